//! Who may take the last of `max_clients`: the budget's last quarter goes to light sources.
//!
//! `max_clients` counts client connections and running HTTP/2 streams alike (each may hold a
//! server connection, so each is descriptors). Without a rule past the budget, one address
//! could take all of it: an attacker's few connections of stalled HTTP/2 streams, or a few
//! hundred stalled HTTP/1.1 uploads, and every other client got `503` (issue 42). So:
//!
//! - the first three quarters are anyone's, as they are in nginx and HAProxy (a site behind an
//!   L4 balancer without PROXY sees one address; a benchmark has one);
//! - in the last quarter, a source may hold (connections and streams, in the whole switch)
//!   fewer than a quarter of what is still free: a newcomer holding nothing is admitted while
//!   anything is free, and the share of a heavy source shrinks as the budget fills. At the
//!   quarter's start, a quarter of the free room is a sixteenth of `max_clients` (625 of the
//!   default 10 000); fresh attacker addresses each take at most a fifth of what they find
//!   free, so filling the quarter takes about 30 of them, not the 5 that a fixed share let
//!   (measured by the re-run attack of issue 42);
//! - a source is an IPv4 address, or an IPv6 /64 network: one subscriber's LAN, whose 2^64
//!   addresses would otherwise each be a fresh source (`policy/source_conns.rs` `Grouping`).
//!
//! The same rule, through `Shared::take_share`, decides a new connection (`connection/mod.rs`
//! `count_source`) and a new HTTP/2 stream (`connection/h2/admission.rs`).

/// Why a connection or stream does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crowding {
    /// Client connections and streams fill `max_clients`.
    Full,
    /// In the budget's last quarter, the source holds a quarter of what is free or more.
    HeavySource,
}

/// Whether one more connection or stream fits: `in_use` connections and streams of
/// `max_clients` are taken already (not counting the newcomer), its source holding `held`
/// of them.
pub fn admits(in_use: usize, max_clients: usize, held: u32) -> Result<(), Crowding> {
    if in_use >= max_clients {
        return Err(Crowding::Full);
    }
    let free = max_clients - in_use;
    let last_quarter = free <= max_clients / 4;
    if last_quarter && (held as usize).saturating_mul(4) >= free {
        return Err(Crowding::HeavySource);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_full_at_max_clients() {
        assert_eq!(admits(399, 400, 0), Ok(()));
        assert_eq!(admits(400, 400, 0), Err(Crowding::Full));
        assert_eq!(admits(401, 400, 0), Err(Crowding::Full));
        assert_eq!(admits(0, 1, 0), Ok(()));
        assert_eq!(admits(1, 1, 0), Err(Crowding::Full));
    }

    #[test]
    fn the_first_three_quarters_are_anyones() {
        assert_eq!(admits(299, 400, 299), Ok(()));
        assert_eq!(admits(7_499, 10_000, 7_499), Ok(()));
        // Below 4, there is no last quarter.
        assert_eq!(admits(2, 3, 2), Ok(()));
    }

    #[test]
    fn in_the_last_quarter_a_source_holds_less_than_a_quarter_of_what_is_free() {
        // 400: the quarter begins with 100 free; a source may hold 24, then less.
        assert_eq!(admits(300, 400, 24), Ok(()));
        assert_eq!(admits(300, 400, 25), Err(Crowding::HeavySource));
        assert_eq!(admits(360, 400, 9), Ok(()));
        assert_eq!(admits(360, 400, 10), Err(Crowding::HeavySource));
        // A newcomer to the very end.
        assert_eq!(admits(399, 400, 0), Ok(()));
        assert_eq!(admits(399, 400, 1), Err(Crowding::HeavySource));
        // The default budget: 625 at the quarter's start.
        assert_eq!(admits(7_500, 10_000, 624), Ok(()));
        assert_eq!(admits(7_500, 10_000, 625), Err(Crowding::HeavySource));
        // Tiny budgets.
        assert_eq!(admits(3, 4, 1), Err(Crowding::HeavySource));
        assert_eq!(admits(3, 4, 0), Ok(()));
        assert_eq!(admits(0, 10_000, u32::MAX), Ok(()));
        assert_eq!(admits(9_999, 10_000, u32::MAX), Err(Crowding::HeavySource));
    }

    /// Fresh sources that each take all they are let take: a single one stops at a fifth of
    /// the quarter, and filling the quarter of the default budget takes dozens of them.
    #[test]
    fn filling_the_last_quarter_takes_many_sources() {
        let max = 10_000;
        let mut in_use = 7_500;
        let mut sources = 0;
        while in_use < max {
            sources += 1;
            let mut held = 0;
            while admits(in_use, max, held).is_ok() {
                held += 1;
                in_use += 1;
            }
            if sources == 1 {
                assert_eq!(held, 500, "the first takes a fifth of 2500");
            }
            assert!(sources < 100, "bounded");
        }
        assert!((30..=40).contains(&sources), "{sources} sources");
    }
}
