//! The work queue: a key is queued at most once however many events arrive for it, is never
//! handed to two workers at once, and can be added after a delay (resyncs, backoff).

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    wake: Notify,
}

struct State<K> {
    ready: VecDeque<K>,
    /// Keys in `ready`.
    queued: HashSet<K>,
    /// Keys a worker holds; an add meanwhile marks them dirty instead of queueing.
    active: HashSet<K>,
    dirty: HashSet<K>,
    /// Delayed adds by due time; `due` keeps only the earliest per key.
    delayed: BTreeMap<(Instant, u64), K>,
    due: HashMap<K, (Instant, u64)>,
    sequence: u64,
    failures: HashMap<K, u32>,
    shut_down: bool,
}

/// Backoff after the n-th consecutive failure: 1 s doubling to at most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                delayed: BTreeMap::new(),
                due: HashMap::new(),
                sequence: 0,
                failures: HashMap::new(),
                shut_down: false,
            }),
            wake: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State<K>> {
        self.state.lock()
    }

    /// Queues a key now (coalescing with a pending one).
    pub fn add(&self, key: K) {
        let mut state = self.state();
        if state.shut_down {
            return;
        }
        if let Some(slot) = state.due.remove(&key) {
            state.delayed.remove(&slot);
        }
        if state.active.contains(&key) {
            state.dirty.insert(key);
        } else if state.queued.insert(key.clone()) {
            state.ready.push_back(key);
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Queues a key after `delay`, unless it is queued sooner anyway.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut state = self.state();
        if state.shut_down || state.queued.contains(&key) {
            return;
        }
        let at = Instant::now() + delay;
        if let Some(&(existing, _)) = state.due.get(&key)
            && existing <= at
        {
            return;
        }
        if let Some(slot) = state.due.remove(&key) {
            state.delayed.remove(&slot);
        }
        state.sequence += 1;
        let slot = (at, state.sequence);
        state.delayed.insert(slot, key.clone());
        state.due.insert(key, slot);
        drop(state);
        // A worker may be sleeping until a later deadline.
        self.wake.notify_one();
    }

    /// Records a failure and queues the key again after its backoff.
    pub fn retry_later(&self, key: K) -> Duration {
        let delay = {
            let mut state = self.state();
            let failures = state.failures.entry(key.clone()).or_default();
            *failures += 1;
            backoff(*failures)
        };
        self.add_after(key, delay);
        delay
    }

    /// Clears a key's failure count after a success.
    pub fn forget(&self, key: &K) {
        self.state().failures.remove(key);
    }

    /// The next key to work on, waiting for one; `None` once shut down.
    pub async fn next(&self) -> Option<K> {
        loop {
            // Registered before the state is read, so a wake-up between the check and the
            // wait is not lost.
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut state = self.state();
                if state.shut_down {
                    return None;
                }
                let now = Instant::now();
                while let Some((&slot, _)) = state.delayed.first_key_value() {
                    if slot.0 > now {
                        break;
                    }
                    let key = state.delayed.remove(&slot).expect("first key exists");
                    state.due.remove(&key);
                    if state.active.contains(&key) {
                        state.dirty.insert(key);
                    } else if state.queued.insert(key.clone()) {
                        state.ready.push_back(key);
                    }
                }
                if let Some(key) = state.ready.pop_front() {
                    state.queued.remove(&key);
                    state.active.insert(key.clone());
                    return Some(key);
                }
                state.delayed.first_key_value().map(|(slot, _)| slot.0)
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks a key's work finished; if it was added meanwhile it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.state();
        state.active.remove(key);
        if state.dirty.remove(key) && state.queued.insert(key.clone()) {
            state.ready.push_back(key.clone());
            drop(state);
            self.wake.notify_one();
        }
    }

    /// Wakes every waiting worker with `None`.
    pub fn shut_down(&self) {
        self.state().shut_down = true;
        self.wake.notify_waiters();
    }

    /// Keys waiting now or later (not counting those being worked on).
    pub fn len(&self) -> usize {
        let state = self.state();
        state.ready.len() + state.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys `selected` picks that wait now or later or are being worked on. A scan of the
    /// queue: for tests and tools that wait for one controller to settle, not for hot paths.
    pub fn pending(&self, selected: impl Fn(&K) -> bool) -> usize {
        let state = self.state();
        // A dirty key is in progress and queued again: it counts twice.
        let waiting = state.ready.iter().chain(state.delayed.values());
        waiting
            .chain(&state.active)
            .chain(&state.dirty)
            .filter(|k| selected(k))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_of_adds_coalesces_into_one_item() {
        let queue = WorkQueue::new();
        for _ in 0..100 {
            queue.add("a");
        }
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.next().await, Some("a"));
        assert_eq!(queue.next().await, Some("b"));
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn a_key_being_worked_on_is_not_handed_out_twice_but_requeued_after_done() {
        let queue = WorkQueue::new();
        queue.add("a");
        let key = queue.next().await.unwrap();
        queue.add("a");
        queue.add("a");
        assert!(queue.is_empty(), "held keys wait for done()");
        queue.done(&key);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.next().await, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_come_due_and_the_earliest_wins() {
        let queue = WorkQueue::new();
        queue.add_after("a", Duration::from_secs(10));
        queue.add_after("a", Duration::from_secs(5));
        queue.add_after("a", Duration::from_secs(20));
        let started = Instant::now();
        assert_eq!(queue.next().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        queue.done(&"a");
        assert!(
            queue.is_empty(),
            "the later delays were folded into the first"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_immediate_add_overrides_a_pending_delay() {
        let queue = WorkQueue::new();
        queue.add_after("a", Duration::from_secs(60));
        queue.add("a");
        let started = Instant::now();
        assert_eq!(queue.next().await, Some("a"));
        assert_eq!(started.elapsed(), Duration::ZERO);
        queue.done(&"a");
        assert!(queue.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_forget_resets() {
        let queue = WorkQueue::new();
        assert_eq!(queue.retry_later("a"), Duration::from_secs(1));
        assert_eq!(queue.retry_later("a"), Duration::from_secs(2));
        assert_eq!(queue.retry_later("a"), Duration::from_secs(4));
        queue.forget(&"a");
        assert_eq!(queue.retry_later("a"), Duration::from_secs(1));
        assert_eq!(backoff(30), Duration::from_secs(256));
        assert_eq!(backoff(1), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn pending_counts_waiting_delayed_and_active_keys_of_a_selection() {
        let queue = WorkQueue::new();
        queue.add(("a", 1));
        queue.add(("b", 1));
        queue.add_after(("a", 2), Duration::from_secs(60));
        let is_a = |key: &(&str, i32)| key.0 == "a";
        assert_eq!(queue.pending(is_a), 2);
        let held = queue.next().await.unwrap();
        assert_eq!(held, ("a", 1));
        assert_eq!(queue.pending(is_a), 2, "in progress still counts");
        queue.add(("a", 1));
        assert_eq!(queue.pending(is_a), 3, "in progress and queued again");
        queue.done(&held);
        assert_eq!(queue.pending(is_a), 2);
        assert_eq!(queue.pending(|key| key.0 == "c"), 0);
    }

    #[tokio::test]
    async fn shut_down_releases_waiting_workers() {
        let queue = std::sync::Arc::new(WorkQueue::<u32>::new());
        let waiter = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::task::yield_now().await;
        queue.shut_down();
        assert_eq!(waiter.await.unwrap(), None);
    }
}
