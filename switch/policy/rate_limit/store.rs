//! Sharing a limit's buckets between instances through Redis, without a round trip per
//! request.
//!
//! Every instance decides locally (`key_table.rs`); each entry counts the requests it admitted
//! since the last exchange (`pending`) and a key checked is listed once (`touched.rs`). A task
//! per limit sleeps until a key is listed, then, at most every 2 ms, sends one `EVALSHA` of
//! [`SCRIPT`] with up to 1000 listed keys. For each key it sends `pending` and `base`, its
//! local `tat` before those requests (what this instance last knew of the shared one). Redis
//! keeps, at `tcpvs:limit:NAME:KEY`, the shared `tat` in microseconds. For each key the script
//! takes the later of the stored `tat` and `base`; when `pending` is not 0 it moves that (or
//! now, if later) on by `pending` intervals and stores it, to expire a second after the bucket
//! is full again (then it matters no more). It returns every key's shared `tat`, and the
//! instance takes as its own `tat` the later of its local one and the shared one moved on by
//! the requests it admitted since the snapshot.
//!
//! The shared `tat` thus moves on by `T` for every request any instance admitted: the limit
//! holds across instances, beyond it by at most what they admit between two exchanges (about
//! the rate times 2 ms each; and a key's burst at most, if its client sends that within the
//! first 2 ms on an instance that had not seen the key). `base` makes a Redis that lost its
//! data (restarted, flushed, failed over) learn the buckets back from the first exchange: no
//! free burst.
//!
//! The store is believed only so far: a shared `tat` is taken as at most `now + burst * T +
//! 1 s` (a bucket's span, and a second for the exchange window and clocks kept by NTP). It
//! does go beyond `now + burst * T` legitimately, by what other instances admitted before
//! they learned it, and a key whose shared `tat` is beyond the ceiling stays refused (every
//! exchange lifts its local `tat` to the ceiling again) until the shared one comes back within
//! reach, so the ceiling loses no shared count. What it bounds is a store that is wrong (an
//! instance whose clock is an hour fast, a value of 2^63 written by something else): a key
//! is then refused with a `Retry-After` of `T + 1 s` at most, instead of an hour or centuries,
//! and is free again `T + 1 s` after the store is right again, without a restart.
//!
//! The store is up once an exchange has succeeded, not once a connection is made: on each
//! connection the task loads the script (`SCRIPT LOAD`, within 1 s, so that a store far away
//! does not spend its first exchange's 50 ms on three round trips), then runs it on a probe key
//! of its own (`tcpvs:probe:limit:NAME`, stored for a second), which writes as an exchange
//! does. Only then are counts collected and the store called up; idle, the task runs the probe
//! again every second. A store that connects but refuses every call (a read-only replica, a
//! missing password, out of memory) is thus one outage, warned about once, not one a second.
//!
//! Failure: a call that fails or takes more than 50 ms, a connection that cannot be made
//! within 200 ms or a script that cannot be loaded within 1 s is an outage. Each instance then
//! goes on with its local buckets (fail open to a per-instance limit: with N instances a key
//! gets up to N times its rate), stops counting `pending` (a count held through an outage
//! would later be added as if new), warns once naming the limit and the store, tries again
//! every second, and says once when it is back. Local `tat`s are kept throughout: coming back
//! gives no burst either.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout, timeout_at, Instant};

use super::touched::KeyList;
use super::{now_micros, LimiterCore, Nanos};

/// The shortest time between two exchanges of a limit.
const EXCHANGE_EVERY: Duration = Duration::from_millis(2);
/// Keys per exchange at most (a bounded call, and a bounded time holding the lock).
const BATCH: usize = 1000;
/// How far beyond a bucket's span (`burst * T`) ahead of now a shared `tat` is believed: the
/// exchange window (at most 52 ms) and the clocks of instances kept in step by NTP, with room.
const SHARED_SLACK: Nanos = 1_000_000_000;
/// The interval given to the probe's run of the script: its key is stored for about the expiry
/// margin alone.
const PROBE_INTERVAL_NANOS: u64 = 1000;
/// A key stays in Redis this long after its bucket is full again, for instances whose clocks
/// are a little behind.
const EXPIRY_MARGIN_MS: u64 = 1000;

/// How long the task waits for the store, and between tries.
#[derive(Clone, Copy, Debug)]
struct Timing {
    /// A call slower than this is an outage: requests never wait for Redis, but shared counts
    /// that come late are stale.
    call: Duration,
    /// Making a connection (TCP, then the client's greeting).
    connect: Duration,
    /// Loading the script, once per connection: one round trip, outside the calls' limit.
    load: Duration,
    /// Between tries during an outage.
    retry: Duration,
    /// How often an idle task probes the store (dropping the limiter also wakes it).
    idle: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            call: Duration::from_millis(50),
            connect: Duration::from_millis(200),
            load: Duration::from_secs(1),
            retry: Duration::from_secs(1),
            idle: Duration::from_secs(1),
        }
    }
}

/// The exchange, for every key at once. KEYS: the keys. ARGV: now (µs), T (ns), the expiry
/// margin (ms), then per key `pending` and `base` (µs). Returns the shared `tat` of each key
/// (µs). Lua numbers are doubles: microseconds since the epoch (2^51 today) are exact in them,
/// nanoseconds would not be; `%.0f` writes an integer without an exponent.
pub(super) const SCRIPT: &str = r"
local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2]) / 1000
local margin = tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS do
  local pending = tonumber(ARGV[2 + 2 * i])
  local base = tonumber(ARGV[3 + 2 * i])
  local stored = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  local tat = stored
  if base > tat then tat = base end
  if pending > 0 then
    if now > tat then tat = now end
    tat = math.ceil(tat + pending * interval)
  end
  if tat > stored and tat > now then
    local ttl = math.ceil((tat - now) / 1000) + margin
    redis.call('SET', KEYS[i], string.format('%.0f', tat), 'PX', string.format('%.0f', ttl))
  end
  out[i] = tat
end
return out
";

/// Whether `url` names a Redis this client can reach (parsed only, no connection).
pub(super) fn check_url(url: &str) -> Result<(), String> {
    redis::Client::open(url)
        .map(drop)
        .map_err(|e| format!("store {}: {e}", shown(url)))
}

/// Starts the sync task of `core` on the current tokio runtime.
pub(super) fn spawn(core: &Arc<LimiterCore>, name: &str, url: &str) -> Result<(), String> {
    spawn_with(core, name, url, Timing::default())
}

fn spawn_with(
    core: &Arc<LimiterCore>,
    name: &str,
    url: &str,
    timing: Timing,
) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| format!("store {}: {e}", shown(url)))?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|_| "no tokio runtime to run the store's task".to_string())?;
    let task = Sync::new(core, name, &shown(url), timing);
    runtime.spawn(task.run(client));
    Ok(())
}

/// `url` as logs show it: a password in it is left out.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// The keys of one exchange, with what is sent for each.
#[derive(Default)]
struct Round {
    /// Keys taken off the list (some may have been evicted since they were listed).
    taken: KeyList,
    /// Those still held, in the order sent.
    keys: KeyList,
    pending: Vec<u32>,
    base: Vec<u64>,
}

impl Round {
    fn clear(&mut self) {
        self.taken.clear();
        self.keys.clear();
        self.pending.clear();
        self.base.clear();
    }
}

/// Why the task stopped using a connection.
enum Ended {
    /// The limiter is gone: the task ends.
    Gone,
    /// The store failed: an outage.
    Lost(String),
}

/// What a call within `limit` came to, as the reason of an outage when it failed.
fn within<T>(
    limit: Duration,
    outcome: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
) -> Result<T, String> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", limit.as_millis())),
    }
}

/// The sync task of one limit.
struct Sync {
    core: Weak<LimiterCore>,
    notify: Arc<Notify>,
    interval: Nanos,
    /// How far ahead of now a shared `tat` is believed: `burst * T` and [`SHARED_SLACK`].
    believed_ahead: Nanos,
    name: String,
    /// The store's URL as logs show it.
    shown: String,
    /// `tcpvs:limit:NAME:`
    prefix: Vec<u8>,
    /// `tcpvs:probe:limit:NAME`: no key of a limit's is named so.
    probe_key: Vec<u8>,
    script: redis::Script,
    timing: Timing,
    round: Round,
    /// In an outage (warned about).
    down: bool,
}

impl Sync {
    fn new(core: &Arc<LimiterCore>, name: &str, shown: &str, timing: Timing) -> Sync {
        let mut prefix = b"tcpvs:limit:".to_vec();
        prefix.extend_from_slice(name.as_bytes());
        prefix.push(b':');
        let mut probe_key = b"tcpvs:probe:limit:".to_vec();
        probe_key.extend_from_slice(name.as_bytes());
        let gcra = core.gcra;
        Sync {
            core: Arc::downgrade(core),
            notify: Arc::clone(&core.notify),
            interval: gcra.interval(),
            believed_ahead: gcra
                .tolerance()
                .saturating_add(gcra.interval())
                .saturating_add(SHARED_SLACK),
            name: name.to_string(),
            shown: shown.to_string(),
            prefix,
            probe_key,
            script: redis::Script::new(SCRIPT),
            timing,
            round: Round::default(),
            down: false,
        }
    }

    async fn run(mut self, client: redis::Client) {
        loop {
            let ended = match self.open(&client).await {
                Ok(connection) => {
                    self.came_up();
                    self.serve(connection).await
                }
                Err(reason) => Ended::Lost(reason),
            };
            match ended {
                Ended::Gone => return,
                Ended::Lost(reason) => self.went_down(&reason),
            }
            if !self.pause(self.timing.retry).await {
                return;
            }
        }
    }

    /// A connection on which the script is loaded and has run once, writing: only then is
    /// the store up.
    async fn open(&self, client: &redis::Client) -> Result<MultiplexedConnection, String> {
        let limit = self.timing.connect;
        let mut connection = match timeout(limit, client.get_multiplexed_async_connection()).await {
            Ok(Ok(connection)) => connection,
            Ok(Err(e)) => return Err(format!("cannot connect: {e}")),
            Err(_) => return Err(format!("no connection within {} ms", limit.as_millis())),
        };
        let limit = self.timing.load;
        within(
            limit,
            timeout(limit, self.script.load_async(&mut connection)).await,
        )
        .map_err(|reason| format!("cannot load the script: {reason}"))?;
        self.probe(&mut connection).await?;
        Ok(connection)
    }

    /// Runs the script on the probe key, as an exchange of one key that writes (a read-only
    /// replica or a store out of memory refuses it): whether the store works.
    async fn probe(&self, connection: &mut MultiplexedConnection) -> Result<(), String> {
        let mut call = self.script.prepare_invoke();
        call.arg(now_micros())
            .arg(PROBE_INTERVAL_NANOS)
            .arg(EXPIRY_MARGIN_MS);
        call.key(self.probe_key.as_slice()).arg(1u32).arg(0u64);
        let limit = self.timing.call;
        match within(
            limit,
            timeout(limit, call.invoke_async::<Vec<u64>>(connection)).await,
        ) {
            Ok(tats) if tats.len() == 1 => Ok(()),
            Ok(tats) => Err(format!("{} answers for the probe's 1 key", tats.len())),
            Err(reason) => Err(reason),
        }
    }

    /// Exchanges over `connection` until it fails or the limiter goes. Idle, it probes the
    /// store every second, so that `/stats` tells an outage before traffic meets it.
    async fn serve(&mut self, mut connection: MultiplexedConnection) -> Ended {
        let mut last_exchange = Instant::now();
        loop {
            let Some(listed) = self.listed() else {
                return Ended::Gone;
            };
            if listed == 0 {
                let idle = timeout(self.timing.idle, self.notify.notified()).await;
                if idle.is_err() {
                    if let Err(reason) = self.probe(&mut connection).await {
                        return Ended::Lost(reason);
                    }
                }
                continue;
            }
            sleep_until(last_exchange + EXCHANGE_EVERY).await;
            last_exchange = Instant::now();
            if let Err(reason) = self.exchange(&mut connection).await {
                return Ended::Lost(reason);
            }
        }
    }

    /// Keys waiting for an exchange; `None` when the limiter is gone.
    fn listed(&self) -> Option<usize> {
        let core = self.core.upgrade()?;
        let listed = core.lock().touched.len();
        Some(listed)
    }

    /// Waits `duration`, or less if the limiter goes: whether it is still there.
    async fn pause(&self, duration: Duration) -> bool {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            let _ = timeout_at(until, self.notify.notified()).await;
            if self.core.strong_count() == 0 {
                return false;
            }
        }
        self.core.strong_count() > 0
    }

    /// One exchange of up to [`BATCH`] listed keys.
    async fn exchange(&mut self, connection: &mut MultiplexedConnection) -> Result<(), String> {
        let now = now_micros();
        if !self.snapshot() || self.round.keys.is_empty() {
            return Ok(());
        }
        let mut call = self.script.prepare_invoke();
        call.arg(now).arg(self.interval).arg(EXPIRY_MARGIN_MS);
        let mut name = Vec::with_capacity(self.prefix.len() + 64);
        let round = &self.round;
        for ((key, pending), base) in round.keys.iter().zip(&round.pending).zip(&round.base) {
            name.clear();
            name.extend_from_slice(&self.prefix);
            name.extend_from_slice(key);
            call.key(name.as_slice()).arg(*pending).arg(*base);
        }
        let limit = self.timing.call;
        let shared = match within(
            limit,
            timeout(limit, call.invoke_async::<Vec<u64>>(connection)).await,
        )? {
            tats if tats.len() != round.keys.len() => {
                return Err(format!(
                    "{} answers for {} keys",
                    tats.len(),
                    round.keys.len()
                ))
            }
            tats => tats,
        };
        self.merge(&shared, now.saturating_mul(1000));
        Ok(())
    }

    /// Takes up to [`BATCH`] listed keys with their counts into the round, clearing them in
    /// the entries. False when the limiter is gone.
    fn snapshot(&mut self) -> bool {
        let Some(core) = self.core.upgrade() else {
            return false;
        };
        let round = &mut self.round;
        round.clear();
        let mut guard = core.lock();
        let state = &mut *guard;
        state.touched.take(BATCH, &mut round.taken);
        for key in round.taken.iter() {
            let Some(entry) = state.table.peek_mut(key) else {
                continue; // evicted since: its bucket is in its overflow slot
            };
            let pending = entry.pending;
            let before = entry.tat.saturating_sub(u64::from(pending) * self.interval);
            entry.pending = 0;
            entry.touched = false;
            round.keys.push(key);
            round.pending.push(pending);
            round.base.push(before / 1000);
        }
        true
    }

    /// Takes the later of each key's local `tat` and the shared one (believed up to
    /// `believed_ahead` of `now`, the time the exchange was sent) plus what was admitted here
    /// since the snapshot.
    fn merge(&self, tats: &[u64], now: Nanos) {
        let Some(core) = self.core.upgrade() else {
            return;
        };
        let ceiling = now.saturating_add(self.believed_ahead);
        let mut state = core.lock();
        for (key, &tat) in self.round.keys.iter().zip(tats) {
            if let Some(entry) = state.table.peek_mut(key) {
                let since = u64::from(entry.pending).saturating_mul(self.interval);
                let believed = tat.saturating_mul(1000).min(ceiling);
                entry.tat = entry.tat.max(believed.saturating_add(since));
            }
        }
    }

    fn came_up(&mut self) {
        if let Some(core) = self.core.upgrade() {
            core.lock().touched.set_recording(true);
            core.store.up.store(true, Ordering::Release);
        }
        if self.down {
            self.down = false;
            tracing::info!(
                "limit {}: store {} is back: instances share the limit again",
                self.name,
                self.shown
            );
        } else {
            tracing::debug!("limit {}: sharing through store {}", self.name, self.shown);
        }
    }

    fn went_down(&mut self, reason: &str) {
        let Some(core) = self.core.upgrade() else {
            return;
        };
        {
            let mut guard = core.lock();
            let state = &mut *guard;
            state.touched.set_recording(false);
            state.table.clear_sync_marks();
        }
        core.store.up.store(false, Ordering::Release);
        core.store.failures.fetch_add(1, Ordering::Relaxed);
        if !self.down {
            self.down = true;
            core.store.outages.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "limit {}: store {} failed ({reason}): each instance limits on its own until \
                 it works again, tried again every second",
                self.name,
                self.shown
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Decision, LimitKey, LimitSpec, Limiter, Rate};
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::process::{Child, Command, Stdio};
    use std::sync::atomic::{AtomicBool, AtomicUsize};

    /// A `redis-server` of the test's own on a loopback port, killed when dropped.
    struct RedisServer {
        child: Child,
        port: u16,
    }

    impl RedisServer {
        fn start() -> RedisServer {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .expect("a free loopback port")
                .port();
            RedisServer::start_on(port)
        }

        fn start_on(port: u16) -> RedisServer {
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--dir", &std::env::temp_dir().to_string_lossy()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start redis-server ({e}): the store tests need it \
                         (Debian: apt-get install redis-server)"
                    )
                });
            let mut server = RedisServer { child, port };
            server.wait_ready();
            server
        }

        /// Stops (true) or resumes the server: a stopped one accepts connections (the kernel
        /// does) and answers nothing, the slow store at its worst.
        fn freeze(&self, stopped: bool) {
            use rustix::process::{kill_process, Pid, Signal};
            let signal = if stopped { Signal::STOP } else { Signal::CONT };
            kill_process(Pid::from_child(&self.child), signal).expect("signal redis-server");
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/0", self.port)
        }

        /// Until it answers PING (5 s at most).
        fn wait_ready(&mut self) {
            for _ in 0..200 {
                if let Ok(Some(status)) = self.child.try_wait() {
                    panic!("redis-server on port {} exited: {status}", self.port);
                }
                if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                    let mut answer = [0; 7];
                    let pong = stream.write_all(b"PING\r\n").is_ok()
                        && stream.read_exact(&mut answer).is_ok()
                        && &answer == b"+PONG\r\n";
                    if pong {
                        return;
                    }
                }
                std::thread::sleep(Duration::from_millis(25));
            }
            panic!(
                "redis-server on port {} did not answer within 5 s",
                self.port
            );
        }
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    }

    /// Two instances of one limit sharing `url`, their tasks started on `runtime`.
    fn instances(runtime: &tokio::runtime::Runtime, url: &str, burst: u32) -> [Arc<Limiter>; 2] {
        let spec = LimitSpec {
            name: "api".to_string(),
            key: LimitKey::Source,
            rate: Rate::parse("200/s").expect("a rate"),
            burst,
            status: 429,
            dry_run: false,
            max_keys: 1000,
            store: Some(url.to_string()),
        };
        let both = [
            Arc::new(Limiter::new(spec.clone())),
            Arc::new(Limiter::new(spec)),
        ];
        let _inside = runtime.enter();
        for limiter in &both {
            limiter.start_store();
        }
        both
    }

    /// Sends 2000 requests a second of one key (ten times the rate), alternating between the
    /// instances, for `duration` of wall clock: what each admitted, and the time it took.
    fn overload(instances: &[Arc<Limiter>; 2], duration: Duration) -> ([u64; 2], Duration) {
        const PER_SECOND: u128 = 2000;
        let start = std::time::Instant::now();
        let (mut sent, mut admitted) = (0u128, [0u64; 2]);
        while start.elapsed() < duration {
            let due = start.elapsed().as_micros() * PER_SECOND / 1_000_000;
            while sent < due {
                let which = (sent % 2) as usize;
                if instances[which].check(b"198.51.100.7", now_micros()) == Decision::Allowed {
                    admitted[which] += 1;
                }
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        (admitted, start.elapsed())
    }

    /// Overloads until `done` holds (10 s at most), so that the buckets stay full meanwhile.
    fn overload_until(instances: &[Arc<Limiter>; 2], what: &str, done: impl Fn() -> bool) {
        for _ in 0..100 {
            if done() {
                return;
            }
            overload(instances, Duration::from_millis(100));
        }
        panic!("{what}: not within 10 s");
    }

    /// Waits, sending nothing, until both instances are connected (5 s at most).
    fn wait_connected(instances: &[Arc<Limiter>; 2]) {
        for _ in 0..500 {
            if both_up(instances) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the instances did not connect to Redis within 5 s");
    }

    fn both_up(instances: &[Arc<Limiter>; 2]) -> bool {
        instances.iter().all(|l| l.store_up() == Some(true))
    }

    /// `admitted` is within 10 % of `expected`.
    fn assert_near(admitted: u64, expected: f64, what: &str) {
        let off = (admitted as f64 - expected).abs() / expected;
        println!("{what}: {admitted} admitted, {expected:.0} expected");
        assert!(
            off <= 0.10,
            "{what}: {admitted} admitted, {expected:.0} expected ({:.1} % off)",
            off * 100.0
        );
    }

    #[test]
    fn two_instances_hold_one_limit_through_redis() {
        let redis = RedisServer::start();
        let runtime = runtime();
        let instances = instances(&runtime, &redis.url(), 20);
        wait_connected(&instances);
        // The key is new on both: its burst of 20, then 200 a second in all.
        let (admitted, elapsed) = overload(&instances, Duration::from_secs(3));
        let total = admitted[0] + admitted[1];
        assert_near(total, 20.0 + 200.0 * elapsed.as_secs_f64(), "shared");
        for (n, &each) in admitted.iter().enumerate() {
            assert!(each * 5 >= total, "instance {n} admitted {each} of {total}");
        }
        assert_eq!(instances[0].store_outages(), 0);
    }

    #[test]
    fn redis_lost_and_back_limits_per_instance_then_shares_again_without_a_burst() {
        let redis = RedisServer::start();
        let port = redis.port;
        let runtime = runtime();
        // A burst of 100 against 200/s: a free one would show as 25 % over 2 s.
        let instances = instances(&runtime, &redis.url(), 100);
        wait_connected(&instances);
        let (admitted, elapsed) = overload(&instances, Duration::from_millis(1500));
        assert_near(
            admitted[0] + admitted[1],
            100.0 + 200.0 * elapsed.as_secs_f64(),
            "shared before the outage",
        );

        // Redis dies: each instance goes on with its own bucket, already full, at the rate.
        drop(redis);
        overload_until(&instances, "outage seen", || {
            instances.iter().all(|l| l.store_up() == Some(false))
        });
        let (admitted, elapsed) = overload(&instances, Duration::from_secs(2));
        for (n, &each) in admitted.iter().enumerate() {
            assert_near(
                each,
                200.0 * elapsed.as_secs_f64(),
                &format!("instance {n} alone"),
            );
        }
        for limiter in &instances {
            let failures = limiter.core.store.failures.load(Ordering::Relaxed);
            assert!(
                failures >= 2,
                "retried during the outage: {failures} failures"
            );
            assert_eq!(limiter.store_outages(), 1, "one outage, warned once");
        }

        // Redis is back, empty: the instances share again, and nobody gets a burst.
        let _redis = RedisServer::start_on(port);
        overload_until(&instances, "reconnected", || both_up(&instances));
        let (admitted, elapsed) = overload(&instances, Duration::from_secs(2));
        assert_near(
            admitted[0] + admitted[1],
            200.0 * elapsed.as_secs_f64(),
            "shared after the restart",
        );
        for limiter in &instances {
            assert_eq!(limiter.store_outages(), 1);
        }
    }

    #[test]
    fn a_store_that_stops_answering_is_an_outage_until_it_answers_again() {
        let redis = RedisServer::start();
        let runtime = runtime();
        let instances = instances(&runtime, &redis.url(), 20);
        wait_connected(&instances);
        overload(&instances, Duration::from_millis(300));
        redis.freeze(true);
        overload_until(&instances, "the frozen store seen", || {
            instances.iter().all(|l| l.store_up() == Some(false))
        });
        // Requests never waited for it: each instance limits on its own.
        let (admitted, elapsed) = overload(&instances, Duration::from_secs(1));
        for (n, &each) in admitted.iter().enumerate() {
            assert_near(
                each,
                200.0 * elapsed.as_secs_f64(),
                &format!("frozen, {n} alone"),
            );
        }
        redis.freeze(false);
        overload_until(&instances, "the thawed store seen", || both_up(&instances));
        let (admitted, elapsed) = overload(&instances, Duration::from_secs(1));
        assert_near(
            admitted[0] + admitted[1],
            200.0 * elapsed.as_secs_f64(),
            "thawed, shared",
        );
        for limiter in &instances {
            assert_eq!(limiter.store_outages(), 1, "one outage, warned once");
        }
    }

    #[test]
    fn an_idle_limiter_sees_the_outage_and_its_task_ends_with_it() {
        let redis = RedisServer::start();
        let runtime = runtime();
        let [limiter, other] = instances(&runtime, &redis.url(), 20);
        drop(other);
        for _ in 0..500 {
            if limiter.store_up() == Some(true) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(limiter.store_up(), Some(true), "connected within 5 s");
        drop(redis);
        // No request at all: the task's idle PING finds the outage (within about 1 s).
        for _ in 0..500 {
            if limiter.store_up() == Some(false) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(limiter.store_up(), Some(false), "outage seen within 5 s");
        assert_eq!(limiter.store_outages(), 1);
        // The task holds the limiter weakly: dropping it ends the task (which releases its
        // handle on the wake-up).
        let notify = Arc::clone(&limiter.core.notify);
        drop(limiter);
        for _ in 0..500 {
            if Arc::strong_count(&notify) == 1 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the store task did not end within 5 s of its limiter");
    }

    #[test]
    fn the_script_keeps_the_later_tat_and_expires_keys() {
        let redis = RedisServer::start();
        let runtime = runtime();
        let client = redis::Client::open(redis.url()).expect("a client");
        runtime.block_on(async {
            let mut connection = client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection");
            let script = redis::Script::new(SCRIPT);
            let now: u64 = 1_700_000_000_000_000;
            // T = 50 ms: 3 pending from nothing → now + 150 ms; a base later than the
            // stored tat wins; pending 0 with an old base reads; a past tat is not stored.
            let mut call = script.prepare_invoke();
            call.arg(now).arg(50_000_000u64).arg(1000u64);
            call.key("tcpvs:limit:t:a").arg(3u32).arg(0u64);
            call.key("tcpvs:limit:t:b").arg(0u32).arg(now + 400_000);
            call.key("tcpvs:limit:t:c").arg(1u32).arg(now - 900_000);
            call.key("tcpvs:limit:t:d").arg(0u32).arg(now - 1);
            let tats: Vec<u64> = call.invoke_async(&mut connection).await.expect("run");
            assert_eq!(tats, [now + 150_000, now + 400_000, now + 50_000, now - 1]);
            let mut again = script.prepare_invoke();
            again.arg(now + 10_000).arg(50_000_000u64).arg(1000u64);
            again.key("tcpvs:limit:t:a").arg(2u32).arg(now);
            let tats: Vec<u64> = again.invoke_async(&mut connection).await.expect("run");
            assert_eq!(tats, [now + 250_000]);
            let stored: Option<String> = redis::cmd("GET")
                .arg("tcpvs:limit:t:d")
                .query_async(&mut connection)
                .await
                .expect("get");
            assert_eq!(stored, None, "a full bucket is not stored");
            let ttl: i64 = redis::cmd("PTTL")
                .arg("tcpvs:limit:t:a")
                .query_async(&mut connection)
                .await
                .expect("pttl");
            assert!(
                (1000..=1250).contains(&ttl),
                "expires after 240 ms + 1 s: {ttl}"
            );
        });
    }

    #[test]
    fn urls_are_shown_without_passwords() {
        assert_eq!(
            shown("redis://:pw@10.1.1.1:6379/0"),
            "redis://***@10.1.1.1:6379/0"
        );
        assert_eq!(shown("redis://u:p@h/0"), "redis://***@h/0");
        assert_eq!(shown("redis://h:1/0"), "redis://h:1/0");
        assert_eq!(shown("redis://h/a@b"), "redis://h/a@b");
    }

    /// 6/m, burst 3 (T = 10 s, a bucket spans 30 s), keyed by source, with `store`.
    fn slow_spec(store: Option<String>) -> LimitSpec {
        LimitSpec {
            name: "api".to_string(),
            key: LimitKey::Source,
            rate: Rate::parse("6/m").expect("a rate"),
            burst: 3,
            status: 429,
            dry_run: false,
            max_keys: 1000,
            store,
        }
    }

    const SECOND_US: u64 = 1_000_000;

    #[test]
    fn a_shared_tat_far_ahead_is_believed_only_so_far() {
        // 2023-11-14 in µs. A bucket spans 30 s; the store is believed up to now + 31 s.
        const T0: u64 = 1_700_000_000_000_000;
        let limiter = Limiter::new(slow_spec(None));
        let mut sync = Sync::new(&limiter.core, "api", "redis://test", Timing::default());
        limiter.core.lock().touched.set_recording(true);
        // One exchange played by hand: every listed key gets `shared` (µs) from the store.
        let exchange = |sync: &mut Sync, shared: u64, now: u64| {
            assert!(sync.snapshot());
            let tats = vec![shared; sync.round.keys.len()];
            sync.merge(&tats, now * 1000);
        };
        let limited = |seconds: u64| Decision::Limited {
            retry_after: Duration::from_secs(seconds),
        };
        // An instance whose clock is an hour fast, a store holding 2^63: refused for
        // T + 1 s, not an hour or centuries.
        for (key, shared) in [(&b"fast"[..], T0 + 3600 * SECOND_US), (b"broken", 1 << 63)] {
            assert_eq!(limiter.check(key, T0), Decision::Allowed);
            exchange(&mut sync, shared, T0);
            assert_eq!(limiter.check(key, T0), limited(11), "{key:?}");
            // While the store says so, every exchange keeps the key refused (no count lost).
            exchange(&mut sync, shared, T0 + 5 * SECOND_US);
            assert_eq!(limiter.check(key, T0 + 5 * SECOND_US), limited(11));
            // The store right again (its key expired): free T + 1 s later, no restart.
            exchange(&mut sync, 0, T0 + 6 * SECOND_US);
            assert_eq!(limiter.check(key, T0 + 16 * SECOND_US), Decision::Allowed);
        }
        // Within reach, the shared tat is taken as it is: 30.5 s ahead (other instances'
        // admissions) is beyond a bucket's span, refused for 10.5 s.
        assert_eq!(limiter.check(b"busy", T0), Decision::Allowed);
        exchange(&mut sync, T0 + 30_500_000, T0);
        assert_eq!(
            limiter.check(b"busy", T0),
            Decision::Limited {
                retry_after: Duration::from_millis(10_500)
            }
        );
        assert_eq!(limiter.check(b"busy", T0 + 10_500_000), Decision::Allowed);
    }

    /// Log lines written by `tracing` while a test runs (see [`capture_logs`]).
    #[derive(Clone, Default)]
    struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Logs {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn text(&self) -> String {
            let bytes = self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            String::from_utf8_lossy(&bytes).into_owned()
        }
    }

    /// Runs `test` on a runtime of this thread alone, so that the store's task logs into
    /// the returned lines.
    fn capture_logs(test: impl std::future::Future<Output = ()>) -> String {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(test);
        });
        logs.text()
    }

    /// One command as a client sends it (an array of bulk strings) at the start of `buffer`,
    /// and its length; `None` until it is whole.
    fn parse_command(buffer: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
        fn line(buffer: &[u8], at: usize) -> Option<(&[u8], usize)> {
            let length = buffer.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
            Some((&buffer[at..at + length], at + length + 2))
        }
        fn number(text: &[u8]) -> Option<usize> {
            std::str::from_utf8(text).ok()?.parse().ok()
        }
        let (head, mut at) = line(buffer, 0)?;
        let count = number(head.strip_prefix(b"*")?)?;
        let mut args = Vec::new();
        for _ in 0..count {
            let (head, start) = line(buffer, at)?;
            let end = start.checked_add(number(head.strip_prefix(b"$")?)?)?;
            args.push(buffer.get(start..end)?.to_vec());
            at = end + 2;
        }
        (buffer.len() >= at).then_some((args, at))
    }

    type Answer = dyn Fn(&[Vec<u8>]) -> Vec<u8> + Send + std::marker::Sync;

    /// A fake store on a loopback port: each batch of commands read is answered, after
    /// `delay` (one round trip), with `answer` of each. Returns its URL and a count of the
    /// connections it accepted. It ends with the runtime.
    async fn fake_store(answer: Arc<Answer>, delay: Duration) -> (String, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let answer = Arc::clone(&answer);
                tokio::spawn(async move {
                    let (mut buffer, mut chunk) = (Vec::new(), [0u8; 4096]);
                    while let Ok(read @ 1..) = stream.read(&mut chunk).await {
                        buffer.extend_from_slice(&chunk[..read]);
                        let mut replies = Vec::new();
                        while let Some((args, length)) = parse_command(&buffer) {
                            replies.extend_from_slice(&answer(&args));
                            buffer.drain(..length);
                        }
                        tokio::time::sleep(delay).await;
                        if stream.write_all(&replies).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("redis://127.0.0.1:{port}/0"), connections)
    }

    #[test]
    fn a_store_that_refuses_every_call_is_one_outage_and_never_up() {
        let limiter = Arc::new(Limiter::new(slow_spec(Some("redis://test".into()))));
        let seen = Arc::clone(&limiter);
        let logs = capture_logs(async move {
            let readonly: Arc<Answer> = Arc::new(|_: &[Vec<u8>]| {
                b"-READONLY You can't write against a read only replica.\r\n".to_vec()
            });
            let (url, connections) = fake_store(readonly, Duration::ZERO).await;
            let timing = Timing {
                retry: Duration::from_millis(20),
                ..Timing::default()
            };
            spawn_with(&seen.core, "api", &url, timing).expect("a task");
            // Traffic meanwhile, until the task has tried six connections (10 s at most).
            for _ in 0..2000 {
                if connections.load(Ordering::Relaxed) >= 6 {
                    break;
                }
                let _ = seen.check(b"198.51.100.7", now_micros());
                assert_eq!(seen.store_up(), Some(false), "never up");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert!(connections.load(Ordering::Relaxed) >= 6, "six tries");
        });
        assert_eq!(limiter.store_up(), Some(false));
        assert_eq!(limiter.store_outages(), 1, "{logs}");
        assert!(limiter.core.store.failures.load(Ordering::Relaxed) >= 5);
        assert_eq!(logs.matches(" WARN ").count(), 1, "one warning: {logs}");
        assert!(
            logs.contains("read only replica"),
            "the reason told: {logs}"
        );
        assert!(!logs.contains("is back"), "never back: {logs}");
        assert!(!logs.contains("sharing through"), "never up: {logs}");
    }

    #[test]
    fn a_far_store_loads_the_script_once_then_exchanges_within_the_call_limit() {
        // One round trip of 100 ms against a call limit of 250 ms: EVALSHA, NOSCRIPT, SCRIPT
        // LOAD and EVALSHA again (300 ms) would not fit; the script loaded first, they do.
        let script = redis::Script::new(SCRIPT);
        let sha = script.get_hash().to_string();
        let loaded = Arc::new(AtomicBool::new(false));
        let noscript = Arc::new(AtomicUsize::new(0));
        let (state, refused) = (Arc::clone(&loaded), Arc::clone(&noscript));
        let redis_like: Arc<Answer> = Arc::new(move |args: &[Vec<u8>]| {
            let word = |n: usize| args.get(n).map(|a| a.to_ascii_uppercase());
            match (word(0).as_deref(), word(1).as_deref()) {
                (Some(b"SCRIPT"), Some(b"LOAD")) => {
                    state.store(true, Ordering::Relaxed);
                    format!("${}\r\n{sha}\r\n", sha.len()).into_bytes()
                }
                (Some(b"EVALSHA"), _) if !state.load(Ordering::Relaxed) => {
                    refused.fetch_add(1, Ordering::Relaxed);
                    b"-NOSCRIPT No matching script. Please use EVAL.\r\n".to_vec()
                }
                (Some(b"EVALSHA"), _) => {
                    // The shared tat of each key: 0, nothing stored.
                    let keys = args
                        .get(2)
                        .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
                        .unwrap_or(0);
                    let mut reply = format!("*{keys}\r\n").into_bytes();
                    for _ in 0..keys {
                        reply.extend_from_slice(b":0\r\n");
                    }
                    reply
                }
                (Some(b"PING"), _) => b"+PONG\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        });
        let limiter = Arc::new(Limiter::new(slow_spec(Some("redis://test".into()))));
        let seen = Arc::clone(&limiter);
        let logs = capture_logs(async move {
            let (url, _) = fake_store(redis_like, Duration::from_millis(100)).await;
            let timing = Timing {
                call: Duration::from_millis(250),
                connect: Duration::from_secs(1),
                ..Timing::default()
            };
            spawn_with(&seen.core, "api", &url, timing).expect("a task");
            for _ in 0..500 {
                if seen.store_up() == Some(true) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(seen.store_up(), Some(true), "up within 5 s");
            // An exchange of traffic goes through too.
            let before = seen.core.store.failures.load(Ordering::Relaxed);
            assert_eq!(seen.check(b"198.51.100.7", now_micros()), Decision::Allowed);
            for _ in 0..500 {
                if seen.core.lock().touched.len() == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await; // the exchange's answer
            assert_eq!(seen.core.store.failures.load(Ordering::Relaxed), before);
            assert_eq!(seen.store_up(), Some(true));
        });
        assert!(loaded.load(Ordering::Relaxed));
        assert_eq!(
            noscript.load(Ordering::Relaxed),
            0,
            "loaded before the first EVALSHA"
        );
        assert_eq!(limiter.store_outages(), 0, "{logs}");
    }
}
