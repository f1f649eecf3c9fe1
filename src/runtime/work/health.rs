//! Whether the workers are alive and moving, as `/healthz` reports it. A worker that exited, or
//! that has run one work item for longer than any hook or API deadline allows, is a bug the
//! operator cannot fix by itself; the liveness probe restarting the pod is what recovers it.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one work item may run before its worker counts as stuck: above what a slow sync
/// can take (hook timeouts of at most 30 s, API requests of at most kube's 295 s read
/// timeout, a new type's first list), so only a hang trips it.
pub(crate) const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(15 * 60);

/// The workers of one operator, each as a [`WorkerSlot`] it holds while it runs.
#[derive(Debug)]
pub struct WorkerHealth {
    stuck_after: Duration,
    epoch: Instant,
    workers: Mutex<Vec<Arc<Slot>>>,
    /// Set once the operator stops its workers on purpose.
    stopping: AtomicBool,
}

#[derive(Debug, Default)]
struct Slot {
    alive: AtomicBool,
    /// When the current item began, in milliseconds since `epoch` plus one; 0 while idle.
    busy_since: AtomicU64,
    item: Mutex<String>,
}

/// What one worker holds: it says when an item begins and ends, and its drop (a return, an
/// abort, or a panic that escaped) marks the worker gone.
#[derive(Debug)]
pub(crate) struct WorkerSlot {
    health: Arc<WorkerHealth>,
    slot: Arc<Slot>,
}

impl Default for WorkerHealth {
    fn default() -> Self {
        WorkerHealth::new(DEFAULT_STUCK_AFTER)
    }
}

impl WorkerHealth {
    pub(crate) fn new(stuck_after: Duration) -> WorkerHealth {
        WorkerHealth {
            stuck_after,
            epoch: Instant::now(),
            workers: Mutex::default(),
            stopping: AtomicBool::new(false),
        }
    }

    /// A new worker's slot.
    pub(crate) fn register(self: &Arc<Self>) -> WorkerSlot {
        let slot = Arc::new(Slot::default());
        slot.alive.store(true, Ordering::Relaxed);
        self.workers.lock().push(slot.clone());
        WorkerSlot {
            health: self.clone(),
            slot,
        }
    }

    /// The operator is stopping its workers: their exits are not failures.
    pub(crate) fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Ok while every worker is alive and none has run one item longer than `stuck_after`;
    /// otherwise what is wrong, a line per worker.
    pub(crate) fn check(&self) -> Result<(), String> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), String> {
        if self.stopping.load(Ordering::Relaxed) {
            return Ok(());
        }
        let now_ms = millis(now.saturating_duration_since(self.epoch));
        let problems: Vec<String> = self
            .workers
            .lock()
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                if !slot.alive.load(Ordering::Relaxed) {
                    return Some(format!("worker {index} exited"));
                }
                let since = slot.busy_since.load(Ordering::Relaxed);
                let busy = Duration::from_millis(now_ms.saturating_sub(since.checked_sub(1)?));
                (busy > self.stuck_after).then(|| {
                    format!(
                        "worker {index} has run one work item ({}) for {}s, more than {}s",
                        slot.item.lock(),
                        busy.as_secs(),
                        self.stuck_after.as_secs()
                    )
                })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n"))
        }
    }
}

impl WorkerSlot {
    /// The worker begins `item` (a description for the report).
    pub(crate) fn begin(&self, item: impl FnOnce() -> String) {
        *self.slot.item.lock() = item();
        let since = millis(self.health.epoch.elapsed()).saturating_add(1);
        self.slot.busy_since.store(since, Ordering::Relaxed);
    }

    pub(crate) fn end(&self) {
        self.slot.busy_since.store(0, Ordering::Relaxed);
    }
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        self.slot.alive.store(false, Ordering::Relaxed);
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_and_busy_workers_are_healthy() {
        let health = Arc::new(WorkerHealth::new(Duration::from_secs(60)));
        let (idle, busy) = (health.register(), health.register());
        busy.begin(|| "decorator/a".into());
        assert_eq!(health.check(), Ok(()));
        busy.end();
        drop(idle);
        assert_eq!(health.check(), Err("worker 0 exited".to_string()));
    }

    #[test]
    fn an_item_past_the_bound_is_reported_with_its_worker() {
        let health = Arc::new(WorkerHealth::new(Duration::from_secs(60)));
        let _first = health.register();
        let second = health.register();
        second.begin(|| "map/m: default/a".into());
        let later = Instant::now() + Duration::from_secs(61);
        let report = health.check_at(later).unwrap_err();
        assert!(
            report.starts_with("worker 1 has run one work item (map/m: default/a) for 6"),
            "{report}"
        );
        second.end();
        assert_eq!(health.check_at(later), Ok(()));
    }

    #[test]
    fn workers_stopped_on_purpose_are_not_a_failure() {
        let health = Arc::new(WorkerHealth::new(Duration::from_secs(60)));
        let worker = health.register();
        health.stopping();
        drop(worker);
        assert_eq!(health.check(), Ok(()));
    }
}
