//! `[switch] cpu_affinity = "auto"`: each worker thread tied to a CPU of its own, as HAProxy's
//! `cpu-map` and nginx's `worker_cpu_affinity auto` tie theirs.
//!
//! A worker that stays on one CPU keeps its connections' state in that CPU's caches and is not
//! migrated by the scheduler. Measured with `benches/scaling.sh AFFINITY=1` (two workers, wrk
//! and the backend unpinned on the same two cores; BENCHMARKS.md, "Kernel knobs"): against the
//! same build unpinned, within this machine's noise. Off by default, as in HAProxy and nginx:
//! a pinned thread cannot move away from a CPU that something else keeps busy.
//!
//! The listeners are not steered with `SO_INCOMING_CPU`. Since Linux 6.1 a reuseport group
//! hands a new connection to the socket whose incoming CPU is the one that received it, so
//! where one CPU receives every packet (a single-queue NIC, interrupts bound to one core)
//! every connection would go to one worker, and the others would idle unnoticed. Its measured
//! gain here was not separable from noise either.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use std::io;

/// The CPUs the workers are placed on: the ones the process may run on (its affinity mask,
/// which `taskset` and cgroup cpusets narrow), in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuPlan {
    cpus: Vec<usize>,
}

impl CpuPlan {
    /// The calling thread's CPUs, read once at start: the workers' threads inherit the same
    /// mask before each narrows its own.
    pub fn of_this_thread() -> io::Result<CpuPlan> {
        let set = sched_getaffinity(None)?;
        CpuPlan::from_cpus(
            (0..CpuSet::MAX_CPU)
                .filter(|&cpu| set.is_set(cpu))
                .collect(),
        )
    }

    fn from_cpus(cpus: Vec<usize>) -> io::Result<CpuPlan> {
        match cpus.is_empty() {
            true => Err(io::Error::other("the process may run on no CPU")),
            false => Ok(CpuPlan { cpus }),
        }
    }

    /// Worker `index`'s CPU; with more workers than CPUs, they take turns.
    pub fn cpu_of(&self, index: usize) -> usize {
        self.cpus[index % self.cpus.len()]
    }
}

/// Ties the calling thread to `cpu`.
pub fn pin_this_thread(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_take_the_allowed_cpus_in_turn() {
        let plan = CpuPlan::from_cpus(vec![2, 5, 7]).unwrap();
        let placed: Vec<usize> = (0..5).map(|i| plan.cpu_of(i)).collect();
        assert_eq!(placed, [2, 5, 7, 2, 5]);
        assert!(CpuPlan::from_cpus(Vec::new()).is_err());
    }

    #[test]
    fn the_plan_is_the_threads_mask() {
        let plan = CpuPlan::of_this_thread().unwrap();
        let set = sched_getaffinity(None).unwrap();
        assert_eq!(plan.cpus.len(), set.count() as usize);
        assert!(plan.cpus.iter().all(|&cpu| set.is_set(cpu)));
    }
}
