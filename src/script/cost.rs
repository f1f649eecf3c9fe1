//! What one hook call cost: the CPU time of the thread that ran it, the operations the script
//! ran and the most script memory it held at once. Read around every call, so cheap: two
//! clock reads and two counters the budget and the allocator keep anyway.

use std::time::Duration;

/// The cost of one script call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCost {
    /// CPU time of the thread while the call ran (conversions of request and response included).
    pub cpu: Duration,
    /// Rhai's operation count, or the Luau interrupts (function calls and loop iterations)
    /// the budget counted: what `maxOperations` is judged by.
    pub operations: u64,
    /// The most memory the call held at once, in bytes (to [`super::memory::PEAK_STEP`]).
    pub peak_memory: u64,
}

/// The CPU time this thread has used so far. A syscall (about a microsecond here), not a vDSO
/// read, which is why it is read twice per call and not per operation.
pub(crate) fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock id is a constant the platform
    // defines. On failure (never seen) the time stays zero and the call is counted as free.
    let failed = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0;
    if failed {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_cpu_time_grows_with_work_and_not_with_sleep() {
        let start = thread_cpu();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let worked = thread_cpu() - start;
        assert!(worked > Duration::from_millis(1), "worked {worked:?}");
        let before_sleep = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu() - before_sleep;
        assert!(slept < Duration::from_millis(20), "slept {slept:?}");
    }
}
