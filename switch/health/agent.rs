//! HAProxy's agent-check protocol: connect to the server's address at `agent_port`, read one
//! line, and take the words it holds: `up`, `down` (also `fail`, `stopped`), `ready`, `drain`,
//! `maint`, and `NN%` (the share of the configured weight to use). Existing agents written for
//! HAProxy work unchanged. An agent that cannot be reached changes nothing, as in HAProxy.

use super::Place;
use crate::state::control::Change;
use crate::state::status::AgentReport;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Asks the agent every `agent_interval` until the switch goes.
pub async fn run(mut place: Place) {
    loop {
        let Some(pool) = place.get() else { return };
        let config = &pool.health.health;
        let (interval, timeout) = (config.agent_interval, config.timeout);
        let agent = SocketAddr::new(pool.backends[place.server].addr.ip(), config.agent_port);
        let current = pool.backends[place.server]
            .status
            .lock()
            .map(|s| s.agent)
            .unwrap_or_default();
        drop(pool);
        match ask(agent, timeout).await {
            Ok(line) => {
                let report = parse(&line, current);
                if report != current && !place.apply(Change::Agent(report)) {
                    return;
                }
            }
            Err(why) => tracing::debug!(%agent, "agent not reached: {why}"),
        }
        if !place.sleep(interval).await {
            return;
        }
    }
}

async fn ask(agent: SocketAddr, timeout: Duration) -> Result<String, String> {
    let read = async {
        let mut stream = TcpStream::connect(agent)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut line = Vec::with_capacity(64);
        let mut chunk = [0u8; 256];
        while !line.contains(&b'\n') && line.len() < 1024 {
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                break;
            }
            line.extend_from_slice(&chunk[..n]);
        }
        let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
        Ok(String::from_utf8_lossy(&line[..end]).into_owned())
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

/// The report after the agent said `line`, starting from `current`: words it does not say
/// leave their part unchanged.
pub fn parse(line: &str, current: AgentReport) -> AgentReport {
    let mut report = current;
    for word in line
        .split(|c: char| c == ',' || c.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
    {
        match word.to_ascii_lowercase().as_str() {
            "up" => report.down = false,
            "down" | "fail" | "failed" | "stopped" => report.down = true,
            "ready" => {
                report.drain = false;
                report.maint = false;
            }
            "drain" => report.drain = true,
            "maint" => report.maint = true,
            other => {
                if let Some(number) = other.strip_suffix('%') {
                    if let Ok(percent) = number.parse::<u32>() {
                        report.weight_percent = Some(percent.min(256));
                    }
                }
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_change_only_what_they_name() {
        let start = AgentReport::default();
        let drained = parse("drain\r", start);
        assert!(drained.drain && !drained.down);
        let weighted = parse("75%", drained);
        assert_eq!(weighted.weight_percent, Some(75));
        assert!(weighted.drain, "a weight leaves the drain as it was");
        let ready = parse("ready up 100%", weighted);
        assert_eq!(
            ready,
            AgentReport {
                weight_percent: Some(100),
                ..AgentReport::default()
            }
        );
        assert!(parse("DOWN, maint", start).down);
        assert!(parse("down maint", start).maint);
        assert_eq!(parse("hello 12x% -3%", start), start);
    }
}
