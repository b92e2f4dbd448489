//! Which targets an overloaded server sheds, with `auto` thresholds: hot ones.
//!
//! The paper moves whatever target is requested next from an overloaded server. Most of those
//! are cold: with Zipf popularity (exponent 0.9, 3000 objects) half the requests are for
//! objects ranked past the hundredth, each carrying at most 0.1% of the load. Moving one costs
//! a miss and leaves a copy in the cache it left, and relieves nothing. At the paper's load the
//! servers of a closed loop of clients trade tens of requests in flight back and forth for
//! seconds at a time, so the paper's rule fires all the time: 50 to 150 moves a second in the
//! locality harness, 1.6 copies of each cached object on one switch and 1.7 on four.
//!
//! So with `auto` an overloaded server sheds a target only if it is hot: its requests in this
//! second and the last, times `HOT_SHARE` (16), reach the most any one target of the pool had
//! over two such seconds, lately (the peak: kept for the window it was reached in and the
//! next, so up to 3 s). Early in a second a target needs about an eighth of the hottest
//! target's rate, late in it a sixteenth. Moving such a target moves a real share of the load,
//! and the few targets that can move have a few copies at most, whatever the churn. At
//! `2 T_high` any target still moves (`Judge::sheds`): a server that far over is relieved by
//! whatever leaves it. When popularity is flat every target is about as hot as the hottest and
//! any may move, as in the paper. A new target, with one request, is cold unless the pool or
//! its server is nearly idle (no target had more than `HOT_SHARE` requests over two seconds,
//! or the server more than `SERVER_SHARE`): it starts on its ring server even past `T_high`
//! (below `2 T_high`), where every instance starts it. Only a request's first pick counts: a
//! retry after a failed server is the same request. Each instance counts its own requests, so
//! instances may disagree on which targets are hot. The fixed thresholds keep the paper's rule.
//!
//! Measured with the locality harness (BENCHMARKS.md, "LARD moves hot targets only"), one
//! run each, four switches at the paper's load against 64 clients on one switch (2.5 caches),
//! where moves are what keeps servers from idling:
//!
//! | rule | copies, 1 / 2 / 4 switches | 64 clients: req/s of the ceiling |
//! | --- | --- | ---: |
//! | any target (the paper) | 1.61 / 1.66 / 1.70 | 0.97 |
//! | a quarter of its server's hottest | 1.06 / 1.15 / 1.05 | 0.90 |
//! | a sixteenth of its server's hottest | 1.15 / 1.09 / 1.17 | 0.94 |
//! | the same, any target at `2 T_high` | 1.19 / 1.14 / 1.16 | 0.98, 0.96 |
//! | a sixteenth of the pool's hottest, any at `2 T_high` | 1.13 / 1.12 / 1.13 | 0.96, 0.97 |
//!
//! The pool's hottest rather than each server's: a server whose targets are all cold had a low
//! peak and let targets of the catalogue's tail move, each a miss and a copy. Alone, that
//! rule let one path flooded at many times the real hottest target's rate make every other
//! target cold, so that targets moved only at `2 T_high` (RELIABILITY.md, "LARD moves hot
//! targets only"); so a target is also hot when it carries an eighth of its own server's
//! requests (`SERVER_SHARE`): a flood raises the pool's peak and its own server's count, and
//! every other server keeps its largest targets movable.

use std::time::Duration;

/// A target is hot when its requests in this window and the last, times `HOT_SHARE`, reach
/// those of the pool's hottest target.
pub(crate) const HOT_SHARE: u32 = 16;

/// A target is also hot when its requests, times `SERVER_SHARE`, reach those of the server it
/// is judged on over the same windows: one flooded path raises the pool's peak, not the other
/// servers' counts, so each of them keeps its own largest targets movable. Under the
/// harness's Zipf popularity on 4 servers an eighth of a server's requests is about 3% of the
/// pool's, past the pool rule's 0.5%: the rule adds hardly a target there.
pub(crate) const SERVER_SHARE: u32 = 8;

/// The window `now` falls in: windows are a second long, long enough that a target asked
/// for a few times a second has a count, short enough that a target which went quiet leaves
/// the peak within 3 s. (Wraps after 136 years of a module's clock.)
fn window_of(now: Duration) -> u32 {
    now.as_secs() as u32
}

/// Counts in the current window and the one before, rolled forward as time passes.
#[derive(Clone, Copy, Debug, Default)]
struct Windows {
    window: u32,
    current: u32,
    previous: u32,
}

impl Windows {
    fn roll(&mut self, window: u32) {
        match window.wrapping_sub(self.window) {
            0 => return,
            1 => self.previous = self.current,
            _ => self.previous = 0,
        }
        self.current = 0;
        self.window = window;
    }

    fn both(&self) -> u32 {
        self.previous.saturating_add(self.current)
    }
}

/// One target's requests over the last one to two seconds.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Heat(Windows);

impl Heat {
    /// The target's requests in `window` and the one before, after counting one more if
    /// `counted`.
    fn requests(&mut self, window: u32, counted: bool) -> u32 {
        self.0.roll(window);
        if counted {
            self.0.current = self.0.current.saturating_add(1);
        }
        self.0.both()
    }
}

/// What `HotTargets::judge` found of a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Temperature {
    /// Hot: moves off its server when that one is overloaded (`Judge::sheds`).
    Hot,
    /// Cold: stays unless its server is at 2 T_high, where any target is relief.
    Cold,
    /// Not judged (the fixed thresholds): moves as in the paper.
    Unjudged,
}

/// The most requests one target of the pool had over two windows, as counted in the current
/// window (`current`) and in the one before (`previous`); and each server's requests over the
/// same two windows.
#[derive(Debug)]
pub(crate) struct HotTargets {
    /// False with the fixed thresholds: every target is as good to move as any, and no clock
    /// is read for this.
    enabled: bool,
    peak: Windows,
    /// By server index, grown to the highest index judged (a pool's size).
    servers: Vec<Windows>,
}

impl HotTargets {
    pub(crate) fn new(enabled: bool) -> HotTargets {
        HotTargets {
            enabled,
            peak: Windows::default(),
            servers: Vec::new(),
        }
    }

    /// Whether the target whose `heat` this is, judged on `server`, is hot, counting the
    /// request first if this is its `first_try` (a retry is the same request).
    pub(crate) fn judge(
        &mut self,
        heat: &mut Heat,
        server: usize,
        first_try: bool,
        now: &mut dyn FnMut() -> Duration,
    ) -> Temperature {
        if !self.enabled {
            return Temperature::Unjudged;
        }
        let window = window_of(now());
        let requests = heat.requests(window, first_try);
        let peak = &mut self.peak;
        peak.roll(window);
        // The peak of a window is the most one target had over that window and the one
        // before; the two windows' peaks are compared as one.
        peak.current = peak.current.max(requests);
        let hottest = peak.current.max(peak.previous);
        if self.servers.len() <= server {
            self.servers.resize(server + 1, Windows::default());
        }
        let on_server = &mut self.servers[server];
        on_server.roll(window);
        if first_try {
            on_server.current = on_server.current.saturating_add(1);
        }
        if requests.saturating_mul(HOT_SHARE) >= hottest
            || requests.saturating_mul(SERVER_SHARE) >= on_server.both()
        {
            Temperature::Hot
        } else {
            Temperature::Cold
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Temperature::{Cold, Hot, Unjudged};

    fn at(ms: u64) -> impl FnMut() -> Duration {
        move || Duration::from_millis(ms)
    }

    /// The requests of the hottest target in these tests: two of them are its
    /// `HOT_SHARE`th part.
    const HOTTEST: u32 = 2 * HOT_SHARE;

    #[test]
    fn a_target_is_hot_with_a_share_of_the_requests_of_the_hottest() {
        let mut hot = HotTargets::new(true);
        let (mut popular, mut middling, mut cold) =
            (Heat::default(), Heat::default(), Heat::default());
        for _ in 0..HOTTEST {
            assert_eq!(hot.judge(&mut popular, 0, true, &mut at(10)), Hot);
        }
        // 1 request against HOTTEST: cold; 2: hot.
        assert_eq!(hot.judge(&mut cold, 0, true, &mut at(20)), Cold);
        assert_eq!(hot.judge(&mut middling, 0, true, &mut at(20)), Cold);
        assert_eq!(hot.judge(&mut middling, 0, true, &mut at(20)), Hot);
    }

    #[test]
    fn a_flooded_path_leaves_other_servers_their_largest_targets() {
        let mut hot = HotTargets::new(true);
        let (mut flooded, mut large, mut small) =
            (Heat::default(), Heat::default(), Heat::default());
        // One path on server 0 flooded at 100 times the others' rate: 1600 requests.
        for _ in 0..1600 {
            hot.judge(&mut flooded, 0, true, &mut at(10));
        }
        // Server 1 serves 32 requests: 8 for one target (a quarter of them), 24 for others.
        for _ in 0..24 {
            hot.judge(&mut Heat::default(), 1, true, &mut at(20));
        }
        for _ in 0..7 {
            hot.judge(&mut large, 1, true, &mut at(20));
        }
        // Against the pool's peak the large target is cold (8 x 16 < 1600), against its
        // server it is hot (8 x 8 >= 32); one request is neither.
        assert_eq!(hot.judge(&mut large, 1, true, &mut at(30)), Hot);
        assert_eq!(hot.judge(&mut small, 1, true, &mut at(30)), Cold);
        // The same target judged on the flooded server is cold: 8 x 8 < 1600.
        let mut large_on_flooded = large;
        assert_eq!(
            hot.judge(&mut large_on_flooded, 0, false, &mut at(30)),
            Cold
        );
        // Server counts fade as the peak does.
        assert_eq!(hot.judge(&mut small, 1, true, &mut at(2_100)), Hot);
    }

    #[test]
    fn counts_cover_this_second_and_the_last_then_fade() {
        let mut hot = HotTargets::new(true);
        let (mut popular, mut cold) = (Heat::default(), Heat::default());
        for _ in 0..HOTTEST {
            hot.judge(&mut popular, 0, true, &mut at(900));
        }
        // The next second still remembers the popular target's requests.
        assert_eq!(hot.judge(&mut cold, 0, true, &mut at(1_500)), Cold);
        // Two seconds on, the popular target went quiet: the cold one (2 requests over the
        // last two windows) is the hottest there is.
        assert_eq!(hot.judge(&mut cold, 0, true, &mut at(2_100)), Hot);
        assert_eq!(hot.judge(&mut cold, 0, true, &mut at(3_100)), Hot);
        // A gap of more than a window forgets both: the popular target's burst at 4.5 s is
        // gone at 6.1 s with no request in between, and a new target's first request is the
        // hottest there is (one second later it was still remembered, as at 1.5 s above).
        for _ in 0..HOTTEST {
            hot.judge(&mut popular, 0, true, &mut at(4_500));
        }
        assert_eq!(
            hot.judge(&mut Heat::default(), 0, true, &mut at(6_100)),
            Hot
        );
    }

    #[test]
    fn a_retry_is_not_counted_again() {
        let mut hot = HotTargets::new(true);
        let (mut popular, mut retried) = (Heat::default(), Heat::default());
        for _ in 0..HOTTEST {
            hot.judge(&mut popular, 0, true, &mut at(10));
        }
        assert_eq!(hot.judge(&mut retried, 0, true, &mut at(20)), Cold);
        for _ in 0..10 {
            assert_eq!(hot.judge(&mut retried, 0, false, &mut at(20)), Cold);
        }
        assert_eq!(hot.judge(&mut retried, 0, true, &mut at(20)), Hot);
    }

    #[test]
    fn windows_roll_across_the_wrap_of_the_clock() {
        let mut windows = Windows {
            window: u32::MAX,
            current: 5,
            previous: 7,
        };
        windows.roll(0);
        assert_eq!(
            (windows.window, windows.current, windows.previous),
            (0, 0, 5)
        );
        windows.roll(2);
        assert_eq!(windows.both(), 0);
    }

    #[test]
    fn disabled_nothing_is_judged_and_no_clock_is_read() {
        let mut hot = HotTargets::new(false);
        let mut target = Heat::default();
        let mut read = false;
        let temperature = hot.judge(&mut target, 0, true, &mut || {
            read = true;
            Duration::ZERO
        });
        assert_eq!(temperature, Unjudged);
        assert!(!read);
    }
}
