//! The work queue: a key is queued at most once however many events arrive for it, is never
//! handed to two workers at once, and can be added after a delay (resyncs, backoff).
//!
//! Keys belong to flows (a controller's work is one flow). Workers take keys round-robin across
//! the flows that have work waiting, so one controller's burst of a thousand items does not make
//! another's single item wait behind it (fair queuing, as Kubernetes' API Priority and Fairness
//! does for requests). A flow holds at most `cap` workers while another flow has work waiting,
//! and at most `solo_cap` even alone: work is not preempted, so the workers a lone flow leaves
//! free are what a flow arriving later starts on at once. A flow whose calls keep running into
//! their time budget is throttled to one worker for a while; a flow over its controller's
//! budget is paused (no worker) until it has paid it back, except for its urgent keys (a
//! controller's load), which go first in their flow and through a pause.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

pub struct WorkQueue<K, F = ()> {
    state: Mutex<State<K, F>>,
    wake: Notify,
    /// The flow a key belongs to.
    flow: fn(&K) -> F,
    /// Workers one flow may hold while another flow has work waiting.
    cap: usize,
    /// Workers one flow may hold at all.
    solo_cap: usize,
    /// Keys that go first in their flow and are served through its pause.
    urgent: fn(&K) -> bool,
}

struct State<K, F> {
    /// Keys ready now, by flow, and the flows with keys ready in the order they are served.
    ready: HashMap<F, VecDeque<K>>,
    rotation: VecDeque<F>,
    /// Keys in `ready`, with when each became ready (its queue wait starts there).
    queued: HashMap<K, Instant>,
    /// Keys a worker holds; an add meanwhile marks them dirty instead of queueing.
    active: HashSet<K>,
    /// Workers each flow holds.
    running: HashMap<F, usize>,
    dirty: HashSet<K>,
    /// Delayed adds by due time; `due` keeps only the earliest per key.
    delayed: BTreeMap<(Instant, u64), K>,
    due: HashMap<K, (Instant, u64)>,
    sequence: u64,
    failures: HashMap<K, u32>,
    /// Flows held to one worker until a time, and how many times in a row they were.
    throttled: HashMap<F, (u32, Instant)>,
    /// Flows given no worker until a time.
    paused: HashMap<F, Instant>,
    shut_down: bool,
}

/// Backoff after the n-th consecutive failure: 1 s doubling to at most 5 minutes.
pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_secs(1u64 << failures.saturating_sub(1).min(8)).min(Duration::from_secs(300))
}

/// What one flow has: keys waiting (now or later) and workers held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowLoad {
    pub waiting: usize,
    pub running: usize,
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue::fair(|_| (), usize::MAX, usize::MAX)
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    #[cfg(test)]
    /// One flow: first come, first served.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl<K: Clone + Eq + Hash, F: Clone + Eq + Hash> WorkQueue<K, F> {
    /// Keys grouped into flows by `flow`, each holding at most `cap` workers while another has
    /// work waiting and `solo_cap` at all (each at least one).
    pub(crate) fn fair(flow: fn(&K) -> F, cap: usize, solo_cap: usize) -> Self {
        WorkQueue {
            state: Mutex::new(State {
                ready: HashMap::new(),
                rotation: VecDeque::new(),
                queued: HashMap::new(),
                active: HashSet::new(),
                running: HashMap::new(),
                dirty: HashSet::new(),
                delayed: BTreeMap::new(),
                due: HashMap::new(),
                sequence: 0,
                failures: HashMap::new(),
                throttled: HashMap::new(),
                paused: HashMap::new(),
                shut_down: false,
            }),
            wake: Notify::new(),
            flow,
            cap: cap.max(1),
            solo_cap: solo_cap.max(cap).max(1),
            urgent: |_| false,
        }
    }

    /// The same queue, with `urgent` keys first in their flow and served through its pause.
    pub(crate) fn with_urgent(self, urgent: fn(&K) -> bool) -> Self {
        WorkQueue { urgent, ..self }
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State<K, F>> {
        self.state.lock()
    }

    /// Notes a key ready since `since`, unless it already is: whether it was not.
    fn mark_ready(state: &mut State<K, F>, key: &K, since: Instant) -> bool {
        match state.queued.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(since);
                true
            }
        }
    }

    /// Puts a key at the back of its flow, or an urgent one at the front (the caller checked
    /// it is neither queued nor held).
    fn push_ready(&self, state: &mut State<K, F>, key: K) {
        let flow = (self.flow)(&key);
        let keys = state.ready.entry(flow.clone()).or_default();
        if keys.is_empty() {
            state.rotation.push_back(flow);
        }
        if (self.urgent)(&key) {
            keys.push_front(key);
        } else {
            keys.push_back(key);
        }
    }

    /// Queues a key now (coalescing with a pending one).
    pub(crate) fn add(&self, key: K) {
        let mut state = self.state();
        if state.shut_down {
            return;
        }
        if let Some(slot) = state.due.remove(&key) {
            state.delayed.remove(&slot);
        }
        if state.active.contains(&key) {
            state.dirty.insert(key);
        } else if Self::mark_ready(&mut state, &key, Instant::now()) {
            let urgent = (self.urgent)(&key);
            self.push_ready(&mut state, key);
            drop(state);
            if urgent {
                // It may be the one key a paused flow can serve: whoever sleeps until the
                // pause ends must look again.
                self.wake.notify_waiters();
            } else {
                self.wake.notify_one();
            }
        }
    }

    /// Queues a key after `delay`, unless it is queued sooner anyway.
    pub(crate) fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let mut state = self.state();
        if state.shut_down || state.queued.contains_key(&key) {
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
    pub(crate) fn retry_later(&self, key: K) -> Duration {
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
    pub(crate) fn forget(&self, key: &K) {
        self.state().failures.remove(key);
    }

    /// Holds a flow to one worker for a backoff that grows each time in a row it is throttled
    /// (its calls keep running into their time budget). Returns for how long.
    pub(crate) fn throttle(&self, flow: &F) -> Duration {
        let mut state = self.state();
        let now = Instant::now();
        let strikes = state.throttled.get(flow).map_or(0, |(strikes, _)| *strikes) + 1;
        let delay = backoff(strikes);
        state.throttled.insert(flow.clone(), (strikes, now + delay));
        delay
    }

    /// Ends a flow's throttling (one of its calls finished within its budget).
    pub(crate) fn unthrottle(&self, flow: &F) {
        let mut state = self.state();
        if state.throttled.remove(flow).is_some() {
            drop(state);
            self.wake.notify_waiters();
        }
    }

    /// Gives a flow no worker for `wait` (its keys stay queued); a later pause replaces it.
    pub(crate) fn pause(&self, flow: &F, wait: Duration) {
        self.state()
            .paused
            .insert(flow.clone(), Instant::now() + wait);
    }

    /// Ends a flow's pause now (its controller's budget changed, or it is gone).
    pub(crate) fn resume(&self, flow: &F) {
        if self.state().paused.remove(flow).is_some() {
            self.wake.notify_waiters();
        }
    }

    /// Whether a flow is paused now, for the key it would serve next (an urgent one is not).
    fn paused_now(&self, state: &State<K, F>, flow: &F, now: Instant) -> bool {
        // Asked per flow on every hand-out: nothing paused (no budgets) costs no hashing.
        !state.paused.is_empty()
            && state.paused.get(flow).is_some_and(|until| *until > now)
            && !state
                .ready
                .get(flow)
                .and_then(|keys| keys.front())
                .is_some_and(|key| (self.urgent)(key))
    }

    /// How many workers a flow may hold now: while others have work waiting, and at all.
    fn caps_of(&self, state: &State<K, F>, flow: &F, now: Instant) -> (usize, usize) {
        if self.paused_now(state, flow, now) {
            return (0, 0);
        }
        match state.throttled.get(flow) {
            Some((_, until)) if *until > now => (1, 1),
            _ => (self.cap, self.solo_cap),
        }
    }

    /// The next ready key, round-robin across flows: a flow at its cap is passed over while
    /// another has work waiting; when every flow with work waiting is at its cap, the next one
    /// in turn under its solo cap is served (no more workers idle than the solo cap keeps free).
    fn pop_ready(&self, state: &mut State<K, F>, now: Instant) -> Option<K> {
        let running = |flow: &F| state.running.get(flow).copied().unwrap_or(0);
        let under = |cap: fn((usize, usize)) -> usize| {
            state
                .rotation
                .iter()
                .position(|flow| running(flow) < cap(self.caps_of(state, flow, now)))
        };
        let next = under(|(cap, _)| cap).or_else(|| under(|(_, solo)| solo))?;
        let flow = state.rotation.remove(next)?;
        let keys = state
            .ready
            .get_mut(&flow)
            .expect("a flow in rotation has keys");
        let key = keys.pop_front().expect("a flow in rotation has keys");
        if keys.is_empty() {
            state.ready.remove(&flow);
        } else {
            state.rotation.push_back(flow.clone());
        }
        *state.running.entry(flow).or_default() += 1;
        Some(key)
    }

    /// The next key to work on, waiting for one; `None` once shut down.
    #[cfg(test)]
    pub(crate) async fn next(&self) -> Option<K> {
        self.next_waited().await.map(|(key, _)| key)
    }

    /// The next key to work on and how long it waited for a worker since it was ready,
    /// waiting for one; `None` once shut down.
    pub(crate) async fn next_waited(&self) -> Option<(K, Duration)> {
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
                    } else if Self::mark_ready(&mut state, &key, slot.0) {
                        self.push_ready(&mut state, key);
                    }
                }
                if let Some(key) = self.pop_ready(&mut state, now) {
                    let ready_since = state.queued.remove(&key).unwrap_or(now);
                    state.active.insert(key.clone());
                    return Some((key, now.saturating_duration_since(ready_since)));
                }
                state.paused.retain(|_, until| *until > now);
                // A paused flow with keys waiting is served again when its pause ends.
                let resumes = state
                    .paused
                    .iter()
                    .filter(|(flow, _)| state.ready.contains_key(*flow))
                    .map(|(_, until)| *until);
                let delayed = state.delayed.first_key_value().map(|(slot, _)| slot.0);
                resumes.chain(delayed).min()
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
    pub(crate) fn done(&self, key: &K) {
        let mut state = self.state();
        state.active.remove(key);
        let flow = (self.flow)(key);
        if let Some(running) = state.running.get_mut(&flow) {
            *running -= 1;
            if *running == 0 {
                state.running.remove(&flow);
            }
        }
        let requeued = state.dirty.remove(key) && Self::mark_ready(&mut state, key, Instant::now());
        if requeued {
            self.push_ready(&mut state, key.clone());
        }
        drop(state);
        // A freed worker slot may let a flow at its cap go on, even when nothing was requeued.
        self.wake.notify_one();
    }

    /// Wakes every waiting worker with `None`.
    pub(crate) fn shut_down(&self) {
        self.state().shut_down = true;
        self.wake.notify_waiters();
    }

    /// Keys waiting now or later (not counting those being worked on).
    pub(crate) fn len(&self) -> usize {
        let state = self.state();
        state.queued.len() + state.delayed.len()
    }

    /// Keys due now, waiting only for a worker.
    pub(crate) fn ready_len(&self) -> usize {
        let state = self.state();
        let now = Instant::now();
        // Keys of a paused flow wait for their controller's budget, not for a worker.
        let paused: usize = state
            .ready
            .iter()
            .filter(|(flow, _)| self.paused_now(&state, flow, now))
            .map(|(_, keys)| keys.len())
            .sum();
        state.queued.len() - paused
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys `selected` picks that wait now or later or are being worked on. A scan of the
    /// queue: for tests and tools that wait for one controller to settle, not for hot paths.
    pub(crate) fn pending(&self, selected: impl Fn(&K) -> bool) -> usize {
        let state = self.state();
        // A dirty key is in progress and queued again: it counts twice.
        let waiting = state.ready.values().flatten().chain(state.delayed.values());
        waiting
            .chain(&state.active)
            .chain(&state.dirty)
            .filter(|k| selected(k))
            .count()
    }

    /// What each flow has waiting (now or later) and running, for metrics.
    pub(crate) fn loads(&self) -> HashMap<F, FlowLoad> {
        let state = self.state();
        let mut loads: HashMap<F, FlowLoad> = HashMap::new();
        for key in state.ready.values().flatten().chain(state.delayed.values()) {
            loads.entry((self.flow)(key)).or_default().waiting += 1;
        }
        for (flow, running) in &state.running {
            loads.entry(flow.clone()).or_default().running = *running;
        }
        loads
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

    /// The queue wait a trace shows runs from when a key was ready: added now, come due, or
    /// requeued by `done`; a delay before that is not waiting.
    #[tokio::test(start_paused = true)]
    async fn a_key_waits_from_when_it_was_ready_until_a_worker_takes_it() {
        let queue = WorkQueue::new();
        queue.add("a");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(
            queue.next_waited().await,
            Some(("a", Duration::from_secs(3)))
        );
        queue.add("a");
        tokio::time::advance(Duration::from_secs(2)).await;
        queue.done(&"a");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            queue.next_waited().await,
            Some(("a", Duration::from_secs(1))),
            "requeued by done: ready from then"
        );
        queue.done(&"a");
        queue.add_after("b", Duration::from_secs(5));
        tokio::time::advance(Duration::from_secs(7)).await;
        assert_eq!(
            queue.next_waited().await,
            Some(("b", Duration::from_secs(2))),
            "due after 5 s, taken after 7 s"
        );
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

    /// Keys `(flow, item)`: the flow is the first part.
    fn flows() -> WorkQueue<(&'static str, u32), &'static str> {
        WorkQueue::fair(|key| key.0, 2, 3)
    }

    #[tokio::test]
    async fn flows_are_served_in_turn_so_a_burst_does_not_hold_up_another_flow() {
        let queue = flows();
        for item in 0..100 {
            queue.add(("burst", item));
        }
        queue.add(("single", 0));
        let first = queue.next().await.unwrap();
        let second = queue.next().await.unwrap();
        assert_eq!(first, ("burst", 0));
        assert_eq!(
            second,
            ("single", 0),
            "the other flow's item is next, not the 100th"
        );
    }

    #[tokio::test]
    async fn a_flow_holds_at_most_its_cap_while_another_waits_but_no_worker_idles() {
        let queue = flows();
        for item in 0..10 {
            queue.add(("a", item));
        }
        let held = [queue.next().await.unwrap(), queue.next().await.unwrap()];
        assert!(held.iter().all(|key| key.0 == "a"));
        queue.add(("b", 0));
        queue.add(("b", 1));
        // "a" is at its cap of 2 and "b" waits: "b" goes first, twice.
        assert_eq!(queue.next().await.unwrap().0, "b");
        assert_eq!(queue.next().await.unwrap().0, "b");
        // Both at their cap, work waiting only in "a": it is served rather than left waiting.
        assert_eq!(queue.next().await.unwrap().0, "a");
        let loads = queue.loads();
        assert_eq!(
            loads["a"],
            FlowLoad {
                waiting: 7,
                running: 3
            }
        );
        assert_eq!(
            loads["b"],
            FlowLoad {
                waiting: 0,
                running: 2
            }
        );
        queue.done(&held[0]);
        assert_eq!(queue.loads()["a"].running, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_flow_waits_out_its_pause_while_others_run() {
        let queue = flows();
        queue.add(("over", 0));
        queue.add(("over", 1));
        queue.pause(&"over", Duration::from_secs(30));
        queue.add(("other", 0));
        let started = Instant::now();
        assert_eq!(queue.next().await.unwrap(), ("other", 0));
        // Nothing else may run now: the worker sleeps until the pause ends, and no longer.
        assert_eq!(queue.next().await.unwrap(), ("over", 0));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        // Its keys were kept, in order; resuming ends a pause at once.
        queue.pause(&"over", Duration::from_secs(600));
        let resumed = Instant::now();
        let waiting = tokio::spawn({
            let queue = std::sync::Arc::new(queue);
            let waiter = queue.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                queue.resume(&"over");
            });
            async move { waiter.next().await }
        });
        assert_eq!(waiting.await.unwrap(), Some(("over", 1)));
        assert_eq!(resumed.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_key_goes_ahead_of_its_flow_and_through_its_pause() {
        let queue = flows().with_urgent(|key| key.1 == 99);
        for item in 0..3 {
            queue.add(("over", item));
        }
        queue.pause(&"over", Duration::from_secs(600));
        assert_eq!(
            queue.ready_len(),
            0,
            "waiting for a budget, not for a worker"
        );
        queue.add(("over", 99));
        let started = Instant::now();
        assert_eq!(queue.next().await.unwrap(), ("over", 99));
        assert_eq!(started.elapsed(), Duration::ZERO);
        // The rest wait out the pause.
        assert_eq!(queue.next().await.unwrap(), ("over", 0));
        assert_eq!(started.elapsed(), Duration::from_secs(600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_flow_holds_one_worker_while_another_waits_until_unthrottled() {
        let queue = flows();
        for item in 0..5 {
            queue.add(("slow", item));
        }
        assert_eq!(queue.throttle(&"slow"), Duration::from_secs(1));
        assert_eq!(
            queue.throttle(&"slow"),
            Duration::from_secs(2),
            "longer in a row"
        );
        let held = queue.next().await.unwrap();
        queue.add(("quick", 0));
        queue.add(("quick", 1));
        // "slow" is first in turn but holds its one worker: "quick" is served, twice.
        let quick = queue.next().await.unwrap();
        assert_eq!(quick.0, "quick");
        assert_eq!(queue.next().await.unwrap().0, "quick");
        queue.done(&quick);
        queue.add(("quick", 2));
        assert_eq!(queue.next().await.unwrap().0, "quick");
        queue.unthrottle(&"slow");
        queue.add(("quick", 3));
        // Back to a cap of 2: "slow" (1 running) is served before "quick" (at its cap).
        assert_eq!(queue.next().await.unwrap().0, "slow");
        queue.done(&held);
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
