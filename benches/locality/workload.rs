//! The workload: a catalogue of objects (their sizes) and a trace (the order in which clients
//! ask for them). Synthetic and seeded: popularity follows a Zipf-like law (the i-th most
//! popular object is asked for in proportion to 1 / i^alpha, as web traces show with alpha
//! from 0.6 to 1, Breslau et al. 1999) and sizes are heavy-tailed (a lognormal body and a
//! Pareto tail, as in SURGE, Barford and Crovella 1998), independent of popularity. Or read
//! from a real access log (`access_log.rs`). Object `i` is asked for as `/o/i`.

use super::random::SplitMix64;

pub struct Workload {
    /// Size in bytes of each object, by id.
    pub sizes: Vec<u64>,
    /// Object ids, in the order clients ask for them.
    pub trace: Vec<u32>,
    /// One line saying where it came from, for the report.
    pub description: String,
}

impl Workload {
    /// The bytes of every distinct object the trace asks for: what a cache must hold for every
    /// request to hit.
    pub fn working_set(&self) -> u64 {
        let mut seen = vec![false; self.sizes.len()];
        let mut total = 0;
        for &id in &self.trace {
            if let Some(flag) = seen.get_mut(id as usize) {
                if !*flag {
                    *flag = true;
                    total += self.sizes[id as usize];
                }
            }
        }
        total
    }

    pub fn path(id: u32) -> String {
        format!("/o/{id}")
    }
}

#[derive(Clone, Debug)]
pub struct Synthetic {
    pub objects: usize,
    pub zipf_exponent: f64,
    pub requests: usize,
    pub seed: u64,
    /// Lognormal body: median and sigma of ln(size).
    pub median_size: f64,
    pub size_sigma: f64,
    /// Share of objects in the Pareto tail, its shape and its lower bound.
    pub tail_share: f64,
    pub tail_alpha: f64,
    pub tail_min: f64,
    /// No object is larger (a bound on what one answer costs).
    pub max_size: u64,
}

impl Synthetic {
    pub fn default_with(objects: usize, requests: usize, seed: u64) -> Synthetic {
        Synthetic {
            objects,
            zipf_exponent: 0.9,
            requests,
            seed,
            median_size: 6.0 * 1024.0,
            size_sigma: 1.0,
            tail_share: 0.05,
            tail_alpha: 1.2,
            tail_min: 48.0 * 1024.0,
            max_size: 1 << 20,
        }
    }

    pub fn build(&self) -> Workload {
        let mut rng = SplitMix64::new(self.seed);
        let objects = self.objects.max(1);
        let sizes: Vec<u64> = (0..objects)
            .map(|_| {
                let size = if rng.next_open01() < self.tail_share {
                    self.tail_min / rng.next_open01().powf(1.0 / self.tail_alpha)
                } else {
                    (self.median_size.ln() + self.size_sigma * rng.normal()).exp()
                };
                (size.round() as u64).clamp(64, self.max_size)
            })
            .collect();
        // Popularity rank r (0 = most popular) belongs to a random object, so that ids say
        // nothing about popularity (nor about where a hash places them).
        let mut by_rank: Vec<u32> = (0..objects as u32).collect();
        for i in (1..objects).rev() {
            by_rank.swap(i, rng.below(i + 1));
        }
        let mut cumulative = Vec::with_capacity(objects);
        let mut total = 0.0;
        for rank in 0..objects {
            total += 1.0 / ((rank + 1) as f64).powf(self.zipf_exponent);
            cumulative.push(total);
        }
        let trace = (0..self.requests)
            .map(|_| {
                let u = rng.next_open01() * total;
                let rank = cumulative.partition_point(|&c| c < u).min(objects - 1);
                by_rank[rank]
            })
            .collect();
        Workload {
            description: format!(
                "synthetic: {objects} objects, Zipf exponent {}, sizes lognormal (median {:.0} KiB, \
                 sigma {}) with a Pareto tail ({:.0}% of objects, alpha {}, from {:.0} KiB, at most {} KiB), \
                 {} requests, seed {}",
                self.zipf_exponent,
                self.median_size / 1024.0,
                self.size_sigma,
                self.tail_share * 100.0,
                self.tail_alpha,
                self.tail_min / 1024.0,
                self.max_size / 1024,
                self.requests,
                self.seed
            ),
            sizes,
            trace,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Synthetic;

    #[test]
    fn a_seed_gives_one_workload() {
        let spec = Synthetic::default_with(1000, 20_000, 7);
        let (a, b) = (spec.build(), spec.build());
        assert_eq!(a.trace, b.trace);
        assert_eq!(a.sizes, b.sizes);
        let other = Synthetic::default_with(1000, 20_000, 8).build();
        assert_ne!(a.trace, other.trace);
    }

    #[test]
    fn popularity_is_skewed() {
        let w = Synthetic::default_with(1000, 50_000, 1).build();
        let mut counts = vec![0usize; 1000];
        for &id in &w.trace {
            counts[id as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top_tenth: usize = counts[..100].iter().sum();
        assert!(
            top_tenth > 25_000,
            "the top 10% get most requests: {top_tenth}"
        );
        assert!(w.working_set() > 0);
    }
}
