//! `[switch] cpu_affinity = "auto"`: each worker thread on a CPU of its own, and each worker's
//! listening sockets asking the kernel for the connections that CPU handles.
//!
//! With several workers, a connection's packets are processed by one CPU (the one its network
//! queue interrupts, or on loopback the sender's), its TCP state is touched there, and a worker
//! on another CPU then reads it from there: cache lines cross, and the kernel migrates threads
//! to follow. Pinning worker i to a CPU and setting `SO_INCOMING_CPU` to that CPU on its
//! `SO_REUSEPORT` socket makes the kernel hand a new connection to the worker on the CPU that
//! received it (the reuseport group prefers a socket whose incoming CPU is the receiving one,
//! since Linux 6.1; older kernels pick by hash and only the pinning holds), so a connection
//! lives on one CPU. Measured with `benches/scaling.sh` (two workers,
//! wrk and the backend unpinned on the same two cores; BENCHMARKS.md, "Kernel knobs"): with
//! `AFFINITY=1`, every proxy pinned its own way, tcpvs used 0.89-1.07x the CPU per request of
//! the same build unpinned in five pairs of runs (median 0.97x: within this machine's noise),
//! and 0.94x the better peer's against 1.01x unpinned (medians); with the peers unpinned, the
//! pinning alone or the steering alone did less than both. Off by default, as HAProxy's `cpu-map` and nginx's `worker_cpu_affinity`:
//! a pinned thread cannot move away from a CPU that something else keeps busy.

use rustix::fd::AsFd;
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

/// Asks the kernel to hand `listener` the connections whose packets `cpu` processes.
pub fn steer(listener: impl AsFd, cpu: usize) -> io::Result<()> {
    let cpu = u32::try_from(cpu).map_err(|_| io::Error::other("CPU number out of range"))?;
    rustix::net::sockopt::set_socket_incoming_cpu(listener, cpu)?;
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

    #[test]
    fn a_steered_listener_reports_its_cpu() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let cpu = CpuPlan::of_this_thread().unwrap().cpu_of(0);
        steer(&listener, cpu).unwrap();
        let got = rustix::net::sockopt::socket_incoming_cpu(&listener).unwrap();
        assert_eq!(got as usize, cpu);
    }
}
