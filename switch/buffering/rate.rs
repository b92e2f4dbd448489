//! `[switch] min_body_rate`: a request body that arrives slower than this on average, after a
//! grace of 5 s, is the client's `408`, and not held against the server. `idle_timeout` alone
//! bounds only the gap between bytes: a client that sends a byte every few seconds would keep
//! its request (and, unbuffered, a server) for as long as it likes. HAProxy bounds the whole
//! body when it buffers (`timeout http-request`); nginx has no floor.

use crate::relay::{Meter, RelayError};
use std::future::Future;
use std::io;
use std::time::Duration;
use tokio::time::Instant;

/// The time a body has before its rate is judged.
pub const GRACE: Duration = Duration::from_secs(5);

/// How often the rate is judged after the grace.
const EVERY: Duration = Duration::from_millis(500);

/// Resolves once the bytes counted by `meter` since this was called fall below `rate` bytes a
/// second on average, after [`GRACE`]; never when `rate` is 0.
pub async fn too_slow(meter: &Meter, rate: u64) {
    if rate == 0 {
        return std::future::pending().await;
    }
    let started = Instant::now();
    let at_start = meter.get();
    tokio::time::sleep(GRACE).await;
    loop {
        let seconds = started.elapsed().as_secs_f64();
        if ((meter.get() - at_start) as f64) < rate as f64 * seconds {
            return;
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// `body` (a request body on its way up, counted by `meter`), ended as a read that timed out
/// when the body is slower than `rate` (failure.rs makes that the client's `408`).
pub async fn within_rate<F>(body: F, meter: &Meter, rate: u64) -> Result<(), RelayError>
where
    F: Future<Output = Result<(), RelayError>>,
{
    if rate == 0 {
        return body.await;
    }
    tokio::select! {
        sent = body => sent,
        () = too_slow(meter, rate) => Err(RelayError::Read(io::Error::new(
            io::ErrorKind::TimedOut,
            "request body slower than min_body_rate",
        ))),
    }
}
