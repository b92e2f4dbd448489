//! The signals of a running switch: SIGTERM and SIGINT stop it gracefully, SIGHUP reloads its
//! rule file meanwhile.

use tcpvs::Switch;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;

/// SIGTERM and SIGINT, the signals that stop the switch gracefully; SIGHUP, which reloads its
/// rule file meanwhile.
pub struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

impl StopSignals {
    pub fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Until SIGTERM or SIGINT, or a new tcpvs took the listeners over (`handover` ended);
    /// each SIGHUP reloads the rule file (the outcome is logged).
    pub async fn wait(mut self, switch: &Switch, mut handover: Option<JoinHandle<()>>) {
        loop {
            tokio::select! {
                _ = self.terminate.recv() => return,
                _ = self.interrupt.recv() => return,
                _ = async { handover.as_mut().expect("checked").await }, if handover.is_some() => return,
                _ = self.hangup.recv() => {
                    tracing::info!("SIGHUP: reloading the rule file");
                    reload_off_thread(switch).await;
                }
            }
        }
    }
}

/// Reloads the rule file off this thread: resolving server names may wait on DNS, and with
/// one worker this thread serves requests. The outcome is logged by the reload itself.
async fn reload_off_thread(switch: &Switch) {
    let reloads = switch.reloads();
    let _ = tokio::task::spawn_blocking(move || reloads.reload()).await;
}
