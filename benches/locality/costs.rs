//! What serving costs an emulated server, after the simulator of Pai et al. (ASPLOS 1998,
//! section 4.1), whose costs were measured on a 300 MHz Pentium II running FreeBSD 2.2.5 with
//! a fast experimental web server:
//!
//! - CPU: 145 µs to set a connection up and 145 µs to tear it down, plus 40 µs per 512 bytes
//!   sent (so an 8 KiB document from memory takes 930 µs: about 1075 requests/s, as the paper
//!   says). Our clients keep connections alive; the 290 µs stay a per-request cost so that the
//!   figures stay comparable with the paper's (HTTP/1.0, a connection per request).
//! - Disk (a miss only): 28 ms to reach the data (seeks and rotation), then 410 µs per 4 KiB
//!   (about 10 MB/s), and another 14 ms of positioning for each 44 KiB past the first 44 KiB.
//!
//! Every cost is multiplied by `time_scale`: at 2 the emulated cluster runs at half the
//! paper's speed, which halves the real CPU the switch, the clients and the servers need on
//! this machine while keeping every ratio.

use std::time::Duration;

#[derive(Clone, Copy, Debug)]
pub struct Costs {
    pub cpu_per_request: Duration,
    pub cpu_per_kib: Duration,
    pub disk_seek: Duration,
    /// Bytes per second once the disk is positioned.
    pub disk_bandwidth: f64,
    pub disk_chunk: u64,
    pub disk_chunk_seek: Duration,
    pub time_scale: f64,
}

impl Costs {
    pub fn paper(time_scale: f64) -> Costs {
        Costs {
            cpu_per_request: Duration::from_micros(290),
            cpu_per_kib: Duration::from_micros(80),
            disk_seek: Duration::from_millis(28),
            disk_bandwidth: 4096.0 / 410e-6,
            disk_chunk: 44 * 1024,
            disk_chunk_seek: Duration::from_millis(14),
            time_scale,
        }
    }

    /// CPU time to answer with `size` bytes, hit or miss.
    pub fn cpu(&self, size: u64) -> Duration {
        let kib = size as f64 / 1024.0;
        (self.cpu_per_request + self.cpu_per_kib.mul_f64(kib)).mul_f64(self.time_scale)
    }

    /// Disk time to read `size` bytes (a miss).
    pub fn disk(&self, size: u64) -> Duration {
        let extra_chunks = size
            .saturating_sub(1)
            .checked_div(self.disk_chunk)
            .unwrap_or(0);
        let transfer = Duration::from_secs_f64(size as f64 / self.disk_bandwidth);
        (self.disk_seek + transfer + self.disk_chunk_seek * extra_chunks as u32)
            .mul_f64(self.time_scale)
    }
}

#[cfg(test)]
mod tests {
    use super::Costs;
    use std::time::Duration;

    #[test]
    fn the_papers_figures() {
        let c = Costs::paper(1.0);
        // 8 KiB from memory: 930 µs, about 1075 per second.
        assert_eq!(c.cpu(8192), Duration::from_micros(930));
        // 4 KiB from disk: 28 ms + 410 µs; 100 KiB: two more chunks of positioning.
        let d = c.disk(4096).as_secs_f64();
        assert!((d - 0.028_41).abs() < 1e-6, "{d}");
        let big = c.disk(100 * 1024).as_secs_f64();
        assert!(
            (big - (0.028 + 25.0 * 0.000_41 + 0.028)).abs() < 1e-6,
            "{big}"
        );
        assert_eq!(Costs::paper(2.0).cpu(8192), Duration::from_micros(1860));
    }
}
