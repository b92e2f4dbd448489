//! Rate limits (`[limit.NAME]`, issue 26): how many requests a key (a client address, a
//! header's or a cookie's value, the host, the path) may send, as `rate` with room for a
//! `burst`, in bounded memory, optionally shared by several instances through Redis.
//!
//! - **The bucket** (`bucket.rs`): GCRA, one number per key (its theoretical arrival time
//!   `tat`). `burst` is the bucket's size: a fresh key may send `burst` requests at once, then
//!   one per `per / count`. A refusal says exactly when the same request would pass
//!   ([`Decision::Limited`]'s `retry_after`; `Retry-After` is that in whole seconds, at least
//!   1: [`retry_after_seconds`]).
//! - **Bounded memory** (`key_table.rs`): at most `max_keys` keys are held, in an LRU. The least
//!   recently used key is evicted to make room, and unless its bucket is full again its `tat`
//!   is kept in an overflow slot beside a fingerprint of the key (sets of 4 slots chosen by a
//!   keyed hash, `max(4096, max_keys / 2)` slots). A key that is not held starts from the slot
//!   carrying its own fingerprint, if any, else with a full bucket. So a key seen for the
//!   first time gets its full `burst` whatever other keys did (their history reaches it with
//!   a chance of 4 in 2^32), and an evicted key gets **no free burst** when it comes back: it
//!   resumes where it was, and a client cannot reset its bucket by pushing itself out of the
//!   table with a stream of made-up keys. Its slot is lost only when 4 other evicted keys of
//!   its set have used more of their buckets and are not full again yet: a client able to
//!   bring that about with its own keys has as many fresh bursts anyway (`key_table.rs`). Memory
//!   per limit: about 120 bytes per key held (measured with 16-byte keys: the key's
//!   allocation, the LRU's node and its map slot) plus 8 for its share of the slots (16 bytes
//!   each), so 12.8 MB at the default `max_keys` of 100000 (64 KiB of slots at least).
//! - **Shared counters** (`store.rs`, `touched.rs`): with `store = "redis://..."` each
//!   instance keeps its local buckets (a request never waits for Redis) and a task exchanges,
//!   every 2 ms at most and only for the keys checked since, the requests admitted here
//!   against the shared `tat` of each key; each instance then takes the later of its own and
//!   the shared one (believed up to `burst * T + 1 s` ahead of now: a store that is wrong
//!   makes a key wait `T + 1 s` at most). Redis down, refusing or slow: every instance goes
//!   on with its own buckets (fail open to a per-instance limit), a warning said once per
//!   outage (which ends only when a call succeeds, not when a connection is made), and a new
//!   try every second.
//! - **The request's key** (`request_key.rs`): the bytes a request is counted under, taken
//!   from its parsed head, each value of a key it carries more than once counted.
//! - **The refusal** (`refusal.rs`): the limit's status with `Retry-After` and the IETF
//!   RateLimit fields.
//!
//! One mutex per limit guards its keys and counts: a check holds it for a lookup and a few
//! additions (30 to 50 ns measured; two threads checking one limit without pause, 50 to 130
//! ns each on this 2-core machine), far below what a request costs around it.
//!
//! Time: callers pass the wall clock in microseconds since the UNIX epoch ([`now_micros`]),
//! injectable for tests; instances sharing a store compare their times, so there it must be
//! the wall clock of machines kept in step (NTP). A clock stepping back makes keys stricter
//! by as much; one stepping forward refills buckets as if that time had passed. Inside, times
//! are nanoseconds.

mod bucket;
#[cfg(test)]
mod counting_alloc;
mod key_table;
mod refusal;
mod request_key;
mod store;
mod touched;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use bucket::Gcra;
use key_table::Table;
use touched::Touched;

pub use refusal::{retry_after_seconds, Refusal};

/// Wall-clock microseconds since the UNIX epoch, as callers pass them to [`Limiter::check`].
pub type Micros = u64;

/// Nanoseconds since the UNIX epoch, the limiter's own unit (`u64` holds them until 2554).
type Nanos = u64;

/// The wall clock now, in [`Micros`] (0 if the clock is before 1970).
pub fn now_micros() -> Micros {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// What a request is keyed by. `request_key.rs` turns a request into the key's bytes
/// ([`Limiter::check_request`]): a request without the field is not limited (and counted as
/// allowed: [`Limiter::pass`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LimitKey {
    /// The client's address (the one PROXY names, when there is one).
    Source,
    /// A request header's value, by name.
    Header(String),
    /// The `Host` (or `:authority`).
    Host,
    /// The path.
    Path,
    /// A cookie's value, by name.
    Cookie(String),
}

/// `count` requests per `per`: `"20/s"` is `{20, 1 s}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    pub count: u32,
    pub per: Duration,
}

impl Rate {
    /// Reads `"N/s"`, `"N/m"` or `"N/h"`, N from 1 to 2^32 - 1: a whole count,
    /// no sign, no fraction, and no unit but the second, the minute and the hour.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let (count, unit) = text
            .split_once('/')
            .ok_or_else(|| format!("rate {text:?}: expected N/s, N/m or N/h"))?;
        let per = match unit {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(format!("rate {text:?}: the unit is s, m or h")),
        };
        let count = count
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0 && count.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| format!("rate {text:?}: the count is a whole number from 1"))?;
        Ok(Rate { count, per })
    }
}

/// One `[limit.NAME]` as the configuration reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    pub name: String,
    pub key: LimitKey,
    pub rate: Rate,
    /// The bucket's size: requests a fresh key may send at once (at least 1).
    pub burst: u32,
    /// The status of a refusal (429).
    pub status: u16,
    /// Count and log, refuse nothing.
    pub dry_run: bool,
    /// Keys held at most (at least 1).
    pub max_keys: usize,
    /// `"redis://host:port/db"`: instances share the counters through it.
    pub store: Option<String>,
}

/// The verdict on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// `dry_run`: it would have been refused; it passes, counted as both allowed and limited.
    WouldLimit {
        retry_after: Duration,
    },
    /// Refused: the same request would pass after `retry_after` (exact, to the nanosecond).
    Limited {
        retry_after: Duration,
    },
}

/// Requests counted by a limit (for `/stats` and `/metrics`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Counts {
    allowed: u64,
    limited: u64,
}

/// What one lock guards: the keys, the counts, the keys to send to the store.
struct State {
    table: Table,
    counts: Counts,
    touched: Touched,
}

/// How the store has been doing (written by the sync task, read by `/stats`).
#[derive(Debug, Default)]
struct StoreHealth {
    started: AtomicBool,
    up: AtomicBool,
    /// Outages seen (each warned about once).
    outages: AtomicU64,
    /// Connections and calls that failed (retries during an outage included).
    failures: AtomicU64,
}

/// The part of a limiter that a reload with the same key, rate, burst, bound and store keeps,
/// and that the sync task reaches (weakly: it ends when the last limiter goes).
struct LimiterCore {
    gcra: Gcra,
    state: Mutex<State>,
    /// Wakes the sync task: keys to send, or the limiter gone.
    notify: Arc<Notify>,
    store: StoreHealth,
}

impl LimiterCore {
    /// The state; a panic while it was held left plain numbers behind, still usable.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for LimiterCore {
    fn drop(&mut self) {
        // The sync task, waiting, finds the limiter gone and ends.
        self.notify.notify_one();
    }
}

/// One rate limit: its keys' buckets, its counts, its link to the store.
pub struct Limiter {
    spec: LimitSpec,
    /// `RateLimit-Policy`'s value, made once.
    policy_field: String,
    core: Arc<LimiterCore>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("spec", &self.spec)
            .field("allowed", &self.allowed())
            .field("limited", &self.limited())
            .field("keys", &self.keys())
            .finish()
    }
}

impl Limiter {
    /// A limiter with no key yet. No I/O and no runtime: the store is reached once
    /// [`Limiter::start_store`] is called.
    pub fn new(spec: LimitSpec) -> Limiter {
        let core = LimiterCore {
            gcra: Gcra::new(&spec.rate, spec.burst),
            state: Mutex::new(State {
                table: Table::new(spec.max_keys),
                counts: Counts::default(),
                touched: Touched::default(),
            }),
            notify: Arc::new(Notify::new()),
            store: StoreHealth::default(),
        };
        Limiter {
            policy_field: refusal::policy_field(&spec),
            spec,
            core: Arc::new(core),
        }
    }

    pub fn spec(&self) -> &LimitSpec {
        &self.spec
    }

    /// One request of `key` at `now`, counted. A known key allocates nothing; a new one
    /// allocates its entry (and may evict the least recently used).
    pub fn check(&self, key: &[u8], now: Micros) -> Decision {
        let now: Nanos = now.saturating_mul(1000);
        let gcra = self.core.gcra;
        let dry_run = self.spec.dry_run;
        let (decision, wake) = {
            let mut guard = self.core.lock();
            let state = &mut *guard;
            let (counts, touched) = (&mut state.counts, &mut state.touched);
            state.table.visit(key, now, |entry| {
                let verdict = gcra.admit(&mut entry.tat, now);
                let wake = touched.note(key, entry, verdict.is_ok());
                (count(counts, verdict, dry_run), wake)
            })
        };
        if wake {
            self.core.notify.notify_one();
        }
        decision
    }

    /// A request without the key's field: not limited, counted as allowed (so
    /// that `allowed + limited` is every request the limit saw).
    pub fn pass(&self) {
        self.core.lock().counts.allowed += 1;
    }

    /// A request refused without a key looked at (it carried too many values of its key):
    /// counted as limited (under `dry_run`, allowed too), to come back after one interval.
    pub fn refuse_outright(&self) -> Decision {
        let wait = self.core.gcra.interval();
        count(&mut self.core.lock().counts, Err(wait), self.spec.dry_run)
    }

    /// Requests let through (under `dry_run`: every request).
    pub fn allowed(&self) -> u64 {
        self.core.lock().counts.allowed
    }

    /// Requests refused (under `dry_run`: those that would have been).
    pub fn limited(&self) -> u64 {
        self.core.lock().counts.limited
    }

    /// Keys held now (at most `max_keys`).
    pub fn keys(&self) -> usize {
        self.core.lock().table.len()
    }

    /// Whether a reload to `other` keeps this limiter's buckets and counts: the same key,
    /// rate, burst, bound and store (and name: the store's keys and the task's logs are named
    /// after it). `status` and `dry_run` may differ: use [`Limiter::carry_over`] to get a
    /// limiter with the new ones.
    pub fn same_state_as(&self, other: &LimitSpec) -> bool {
        let spec = &self.spec;
        spec.name == other.name
            && spec.key == other.key
            && spec.rate == other.rate
            && spec.burst == other.burst
            && spec.max_keys == other.max_keys
            && spec.store == other.store
    }

    /// A limiter for `spec` that shares this one's buckets, counts and store task, when
    /// [`Limiter::same_state_as`] allows; `None` otherwise (make a new one). Keeping the old
    /// `Arc<Limiter>` as it is would also keep its old `status` and `dry_run`.
    pub fn carry_over(&self, spec: LimitSpec) -> Option<Limiter> {
        self.same_state_as(&spec).then(|| Limiter {
            policy_field: refusal::policy_field(&spec),
            spec,
            core: Arc::clone(&self.core),
        })
    }

    /// Starts the task that shares this limit's counters through `spec.store`, if it has one
    /// and no limiter sharing this state started it already. Call it inside a tokio runtime
    /// (outside one it warns and does nothing). The task holds the limiter weakly and ends
    /// when the last limiter sharing its state is dropped.
    pub fn start_store(self: &Arc<Self>) {
        let Some(url) = &self.spec.store else {
            return;
        };
        if self.core.store.started.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(reason) = store::spawn(&self.core, &self.spec.name, url) {
            self.core.store.started.store(false, Ordering::Release);
            tracing::warn!(
                "limit {}: the store is not used: {reason}; limiting per instance",
                self.spec.name
            );
        }
    }

    /// Whether the store works now: `None` without a store, `Some(false)` until it has first
    /// worked (connected, the script loaded and run, writing) and during an outage.
    pub fn store_up(&self) -> Option<bool> {
        self.spec
            .store
            .as_ref()
            .map(|_| self.core.store.up.load(Ordering::Acquire))
    }

    /// Store outages seen since the start (each warned about once).
    pub fn store_outages(&self) -> u64 {
        self.core.store.outages.load(Ordering::Relaxed)
    }
}

/// Counts one verdict under `dry_run` or not.
#[inline]
fn count(counts: &mut Counts, verdict: Result<(), Nanos>, dry_run: bool) -> Decision {
    match verdict {
        Ok(()) => {
            counts.allowed += 1;
            Decision::Allowed
        }
        Err(wait) => {
            counts.limited += 1;
            let retry_after = Duration::from_nanos(wait);
            if dry_run {
                counts.allowed += 1;
                Decision::WouldLimit { retry_after }
            } else {
                Decision::Limited { retry_after }
            }
        }
    }
}

/// Checks a `store` value without connecting (for `tcpvs check`): a `redis://` or
/// `redis+unix://` URL the client can use.
pub fn check_store_url(url: &str) -> Result<(), String> {
    store::check_url(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2023-11-14, in microseconds: any wall-clock instant.
    const T0: Micros = 1_700_000_000_000_000;
    const MS: Micros = 1000;

    /// A limit of `rate` and `burst` keyed by source (refusal.rs's tests use it too).
    pub(super) fn spec(rate: &str, burst: u32) -> LimitSpec {
        LimitSpec {
            name: "api".to_string(),
            key: LimitKey::Source,
            rate: Rate::parse(rate).expect("a rate"),
            burst,
            status: 429,
            dry_run: false,
            max_keys: 1000,
            store: None,
        }
    }

    fn limited(retry_after_nanos: u64) -> Decision {
        Decision::Limited {
            retry_after: Duration::from_nanos(retry_after_nanos),
        }
    }

    #[test]
    fn exact_burst_then_rate_with_an_injected_clock() {
        let limiter = Limiter::new(spec("20/s", 5));
        for n in 0..5 {
            assert_eq!(limiter.check(b"10.0.0.1", T0), Decision::Allowed, "{n}");
        }
        assert_eq!(limiter.check(b"10.0.0.1", T0), limited(50_000_000));
        assert_eq!(limiter.check(b"10.0.0.1", T0 + 49_999), limited(1_000));
        assert_eq!(limiter.check(b"10.0.0.1", T0 + 50 * MS), Decision::Allowed);
        // Another key has its own bucket.
        assert_eq!(limiter.check(b"10.0.0.2", T0), Decision::Allowed);
        // Ten seconds of one attempt a millisecond: exactly 20 a second.
        let mut admitted = 0;
        for step in 1..=10_000 {
            let now = T0 + 50 * MS + step * MS;
            if limiter.check(b"10.0.0.1", now) == Decision::Allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 200);
        assert_eq!(limiter.allowed(), 5 + 1 + 1 + 200);
        assert_eq!(limiter.limited(), 2 + 10_000 - 200);
        assert_eq!(limiter.keys(), 2);
    }

    #[test]
    fn retry_after_is_exact_and_whole_seconds_round_up() {
        let limiter = Limiter::new(spec("1/m", 1));
        assert_eq!(limiter.check(b"k", T0), Decision::Allowed);
        let decision = limiter.check(b"k", T0 + 12_500 * MS);
        assert_eq!(decision, limited(47_500_000_000));
        assert_eq!(retry_after_seconds(Duration::from_millis(47_500)), 48);
        assert_eq!(retry_after_seconds(Duration::from_secs(48)), 48);
        assert_eq!(retry_after_seconds(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        assert_eq!(limiter.check(b"k", T0 + 60_000 * MS - 1), limited(1_000));
        assert_eq!(limiter.check(b"k", T0 + 60_000 * MS), Decision::Allowed);
    }

    #[test]
    fn dry_run_counts_every_request_allowed_and_would_be_refusals_limited() {
        let limiter = Limiter::new(LimitSpec {
            dry_run: true,
            ..spec("20/s", 2)
        });
        let decisions: Vec<Decision> = (0..10).map(|_| limiter.check(b"k", T0)).collect();
        assert_eq!(decisions[..2], [Decision::Allowed, Decision::Allowed]);
        for decision in &decisions[2..] {
            assert_eq!(
                *decision,
                Decision::WouldLimit {
                    retry_after: Duration::from_millis(50)
                }
            );
        }
        assert_eq!((limiter.allowed(), limiter.limited()), (10, 8));
        // What would have been refused did not use the bucket: one more 50 ms later.
        assert_eq!(limiter.check(b"k", T0 + 50 * MS), Decision::Allowed);
        // A request without the key's field is counted as allowed.
        limiter.pass();
        assert_eq!((limiter.allowed(), limiter.limited()), (12, 8));
    }

    #[test]
    fn a_reload_keeps_the_state_only_for_the_same_bucket() {
        let limiter = Limiter::new(spec("20/s", 2));
        limiter.check(b"k", T0);
        limiter.check(b"k", T0);
        let stricter = LimitSpec {
            status: 503,
            dry_run: true,
            ..spec("20/s", 2)
        };
        assert!(limiter.same_state_as(&stricter));
        let carried = limiter.carry_over(stricter).expect("the same bucket");
        assert_eq!(carried.spec().status, 503);
        assert_eq!(carried.keys(), 1);
        assert_eq!(carried.allowed(), 2);
        assert!(matches!(
            carried.check(b"k", T0),
            Decision::WouldLimit { .. }
        ));
        assert_eq!(limiter.limited(), 1, "one state, seen from both");
        for other in [
            LimitSpec {
                name: "renamed".into(),
                ..spec("20/s", 2)
            },
            spec("21/s", 2),
            spec("20/s", 3),
            LimitSpec {
                key: LimitKey::Header("X-Api-Key".into()),
                ..spec("20/s", 2)
            },
            LimitSpec {
                max_keys: 10,
                ..spec("20/s", 2)
            },
            LimitSpec {
                store: Some("redis://127.0.0.1:6379/0".into()),
                ..spec("20/s", 2)
            },
        ] {
            assert!(!limiter.same_state_as(&other), "{other:?}");
            assert!(limiter.carry_over(other).is_none());
        }
    }

    #[test]
    fn rates_parse_as_the_design_writes_them() {
        let rate = |count, secs| Rate {
            count,
            per: Duration::from_secs(secs),
        };
        assert_eq!(Rate::parse("20/s"), Ok(rate(20, 1)));
        assert_eq!(Rate::parse("600/m"), Ok(rate(600, 60)));
        assert_eq!(Rate::parse("1/h"), Ok(rate(1, 3600)));
        for bad in [
            "0/s",
            "20",
            "20/d",
            "/s",
            "+5/s",
            "-1/s",
            "1.5/s",
            "99999999999/s",
            "",
        ] {
            assert!(Rate::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_store_needs_a_runtime_and_a_usable_url() {
        let limiter = Arc::new(Limiter::new(LimitSpec {
            store: Some("redis://127.0.0.1:1/0".into()),
            ..spec("20/s", 2)
        }));
        limiter.start_store(); // no runtime here: a warning, local limits
        assert_eq!(limiter.store_up(), Some(false));
        assert_eq!(limiter.check(b"k", T0), Decision::Allowed);
        assert_eq!(Limiter::new(spec("20/s", 2)).store_up(), None);
        assert!(check_store_url("redis://127.0.0.1:6379/0").is_ok());
        assert!(check_store_url("http://127.0.0.1/").is_err());
        let hidden = check_store_url("nonsense://user:secret@host/").unwrap_err();
        assert!(!hidden.contains("secret"), "{hidden}");
    }

    #[test]
    fn a_known_keys_check_allocates_nothing() {
        let limiter = Limiter::new(spec("1000/s", 10));
        for n in 0..100u32 {
            limiter.check(&n.to_be_bytes(), T0);
        }
        let before = counting_alloc::on_this_thread();
        for step in 0..10_000 {
            let key = (step % 100u32).to_be_bytes();
            std::hint::black_box(limiter.check(&key, T0 + u64::from(step) * 10));
        }
        assert_eq!(
            counting_alloc::on_this_thread() - before,
            0,
            "without a store"
        );
        // The count sees allocations: a new key makes its entry.
        let before = counting_alloc::on_this_thread();
        limiter.check(b"a new key", T0);
        assert!(
            counting_alloc::on_this_thread() > before,
            "a new key allocates"
        );

        // With a store: listing keys for the exchange reuses its buffer once grown. The
        // exchange is played here by hand: take the list, clear the marks.
        limiter.core.lock().touched.set_recording(true);
        let mut taken = touched::KeyList::default();
        let exchange = |taken: &mut touched::KeyList| {
            let mut state = limiter.core.lock();
            taken.clear();
            state.touched.take(usize::MAX, taken);
            state.table.clear_sync_marks();
        };
        for n in 0..100u32 {
            limiter.check(&n.to_be_bytes(), T0 + 200_000);
        }
        exchange(&mut taken);
        for n in 0..100u32 {
            limiter.check(&n.to_be_bytes(), T0 + 200_000);
        }
        exchange(&mut taken);
        let before = counting_alloc::on_this_thread();
        for round in 0..100u64 {
            for n in 0..100u32 {
                let now = T0 + 300_000 + round * 1000;
                std::hint::black_box(limiter.check(&n.to_be_bytes(), now));
            }
            exchange(&mut taken);
        }
        assert_eq!(counting_alloc::on_this_thread() - before, 0, "with a store");
    }

    /// Figures for the report, not a verdict: `cargo test --release --lib
    /// policy::rate_limit::tests::cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn cost_of_a_check() {
        let limiter = Arc::new(Limiter::new(spec("1000000/s", 1000)));
        for n in 0..1000u32 {
            limiter.check(&n.to_be_bytes(), T0);
        }
        let keys: Vec<Vec<u8>> = (0..1000u32)
            .map(|n| format!("10.0.{}.{}", n / 256, n % 256).into_bytes())
            .collect();
        for key in &keys {
            limiter.check(key, T0);
        }
        let run = |limiter: &Limiter, rounds: u64| {
            let start = std::time::Instant::now();
            for round in 0..rounds {
                for key in &keys {
                    std::hint::black_box(limiter.check(key, T0 + round));
                }
            }
            start.elapsed().as_nanos() as f64 / (rounds * keys.len() as u64) as f64
        };
        println!(
            "one thread, 1000 known keys: {:.1} ns per check",
            run(&limiter, 2000)
        );
        let one = Limiter::new(spec("1000000/s", 1000));
        let start = std::time::Instant::now();
        for step in 0..2_000_000u64 {
            std::hint::black_box(one.check(b"203.0.113.7", T0 + step));
        }
        println!(
            "one thread, one key: {:.1} ns per check",
            start.elapsed().as_nanos() as f64 / 2e6
        );
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                let keys = keys.clone();
                std::thread::spawn(move || {
                    let start = std::time::Instant::now();
                    for round in 0..2000u64 {
                        for key in &keys {
                            std::hint::black_box(limiter.check(key, T0 + round));
                        }
                    }
                    start.elapsed().as_nanos() as f64 / 2e6
                })
            })
            .collect();
        for (n, thread) in threads.into_iter().enumerate() {
            let ns = thread.join().expect("a bench thread");
            println!("two threads on one limiter, thread {n}: {ns:.1} ns per check");
        }
        // Memory per key: 100000 keys of 16 bytes (an IPv6 address), resident set before and
        // after (Linux).
        let resident = || {
            let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
            let pages: u64 = statm
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            pages * 4096
        };
        let before = resident();
        let full = Limiter::new(LimitSpec {
            max_keys: 100_000,
            ..spec("10/s", 10)
        });
        for n in 0..100_000u128 {
            full.check(&n.to_be_bytes(), T0);
        }
        let bytes = resident().saturating_sub(before);
        println!(
            "100000 keys of 16 bytes: {} KiB resident, {} bytes per key",
            bytes / 1024,
            bytes / 100_000
        );
        let start = std::time::Instant::now();
        for n in 100_000..200_000u128 {
            full.check(&n.to_be_bytes(), T0);
        }
        println!(
            "a new key evicting the oldest: {:.1} ns per check",
            start.elapsed().as_nanos() as f64 / 1e5
        );
    }
}
