//! What each controller costs (`status.usage`): its hook calls and their CPU time, the
//! operations and memory of its scripts, its webhook calls and their latency, its API writes
//! and its failures by reason; since this replica began running it, and over the last minutes.
//!
//! Counted per wall-clock minute, so the windows of several replicas line up when their reports
//! are added together (sharded replicas report theirs in their Leases).

use crate::runtime::keys::ControllerId;
use crate::script::CallCost;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The window `status.usage` reports besides the total: this many wall-clock minutes, the
/// current one included.
pub(crate) const WINDOW_MINUTES: i64 = 10;

/// What a controller used over some span.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    pub hook_calls: u64,
    /// CPU time of the threads running its script hooks.
    pub hook_cpu_micros: u64,
    /// Rhai operations and Luau interrupts (see [`CallCost::operations`]).
    pub operations: u64,
    /// The most memory one script call held at once.
    pub peak_memory_bytes: u64,
    pub webhook_calls: u64,
    /// The webhook calls' wall-clock time, added up.
    pub webhook_micros: u64,
    /// Writes made for its objects (its own status is not counted: writing it is how usage is
    /// reported).
    pub writes: u64,
    /// Failed work items, by reason (the Event reason: HookFailed, ApplyFailed, …).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u64>,
}

impl Usage {
    /// Adds `other` in: counts and times add up, the peak is the larger.
    fn add(&mut self, other: &Usage) {
        self.hook_calls += other.hook_calls;
        self.hook_cpu_micros += other.hook_cpu_micros;
        self.operations += other.operations;
        self.peak_memory_bytes = self.peak_memory_bytes.max(other.peak_memory_bytes);
        self.webhook_calls += other.webhook_calls;
        self.webhook_micros += other.webhook_micros;
        self.writes += other.writes;
        for (reason, count) in &other.failures {
            *self.failures.entry(reason.clone()).or_default() += count;
        }
    }
}

/// A controller's usage as one replica reports it, or as several replicas' reports add up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UsageReport {
    /// When counting began, in Unix seconds (0: never): the earliest of the reports added.
    pub since: i64,
    /// Since then.
    pub total: Usage,
    /// The last [`WINDOW_MINUTES`] minutes, or fewer right after counting began.
    pub recent: Usage,
    /// How many minutes `recent` covers.
    pub recent_minutes: i64,
}

impl std::ops::Add for UsageReport {
    type Output = UsageReport;

    fn add(mut self, other: UsageReport) -> UsageReport {
        self.since = match (self.since, other.since) {
            (0, since) | (since, 0) => since,
            (mine, theirs) => mine.min(theirs),
        };
        self.total.add(&other.total);
        self.recent.add(&other.recent);
        self.recent_minutes = self.recent_minutes.max(other.recent_minutes);
        self
    }
}

/// One controller's usage: the total, and a bucket per minute of the window.
#[derive(Debug)]
struct Tally {
    since: i64,
    total: Usage,
    /// (minute since the epoch, usage in it), oldest first, within the window.
    minutes: VecDeque<(i64, Usage)>,
}

impl Tally {
    fn new(now: i64) -> Tally {
        Tally {
            since: now,
            total: Usage::default(),
            minutes: VecDeque::new(),
        }
    }

    fn record(&mut self, now: i64, change: impl Fn(&mut Usage)) {
        change(&mut self.total);
        let minute = now.div_euclid(60);
        if self.minutes.back().is_none_or(|(last, _)| *last != minute) {
            self.minutes.push_back((minute, Usage::default()));
        }
        let (_, current) = self.minutes.back_mut().expect("pushed above");
        change(current);
        self.forget_before(minute);
    }

    fn forget_before(&mut self, minute: i64) {
        while self
            .minutes
            .front()
            .is_some_and(|(first, _)| *first <= minute - WINDOW_MINUTES)
        {
            self.minutes.pop_front();
        }
    }

    fn report(&mut self, now: i64) -> UsageReport {
        let minute = now.div_euclid(60);
        self.forget_before(minute);
        let mut recent = Usage::default();
        for (_, usage) in &self.minutes {
            recent.add(usage);
        }
        UsageReport {
            since: self.since,
            total: self.total.clone(),
            recent,
            recent_minutes: (minute - self.since.div_euclid(60) + 1).clamp(1, WINDOW_MINUTES),
        }
    }
}

/// Every controller's usage on this replica. Touched once per hook call, write and failure.
#[derive(Debug, Default)]
pub struct Ledger {
    tallies: Mutex<HashMap<ControllerId, Tally>>,
}

impl Ledger {
    fn record(&self, controller: &ControllerId, change: impl Fn(&mut Usage)) {
        self.record_at(controller, unix_seconds(SystemTime::now()), change);
    }

    fn record_at(&self, controller: &ControllerId, now: i64, change: impl Fn(&mut Usage)) {
        let mut tallies = self.tallies.lock();
        match tallies.get_mut(controller) {
            Some(tally) => tally.record(now, change),
            None => tallies
                .entry(controller.clone())
                .or_insert_with(|| Tally::new(now))
                .record(now, change),
        }
    }

    /// One hook call: a script's (with its cost) or a webhook's (`cost` is `None`; `took` is
    /// its latency).
    pub(crate) fn hook_call(
        &self,
        controller: &ControllerId,
        took: Duration,
        cost: Option<&CallCost>,
    ) {
        self.record(controller, |usage| {
            usage.hook_calls += 1;
            match cost {
                Some(cost) => {
                    usage.hook_cpu_micros += cost.cpu.as_micros() as u64;
                    usage.operations += cost.operations;
                    usage.peak_memory_bytes = usage.peak_memory_bytes.max(cost.peak_memory);
                }
                None => {
                    usage.webhook_calls += 1;
                    usage.webhook_micros += took.as_micros() as u64;
                }
            }
        });
    }

    pub(crate) fn write(&self, controller: &ControllerId) {
        self.record(controller, |usage| usage.writes += 1);
    }

    pub(crate) fn failure(&self, controller: &ControllerId, reason: &str) {
        self.record(controller, |usage| {
            *usage.failures.entry(reason.to_string()).or_default() += 1;
        });
    }

    /// The controller's usage now; counting begins with the first ask if nothing was
    /// recorded yet (a controller loaded and idle).
    pub fn report(&self, controller: &ControllerId) -> UsageReport {
        self.report_at(controller, unix_seconds(SystemTime::now()))
    }

    fn report_at(&self, controller: &ControllerId, now: i64) -> UsageReport {
        self.tallies
            .lock()
            .entry(controller.clone())
            .or_insert_with(|| Tally::new(now))
            .report(now)
    }

    /// Forgets a removed controller.
    pub(crate) fn forget(&self, controller: &ControllerId) {
        self.tallies.lock().remove(controller);
    }
}

fn unix_seconds(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(name: &str) -> ControllerId {
        ControllerId::new(crate::api::TEST_KIND, name)
    }

    #[test]
    fn the_window_keeps_the_last_ten_minutes_and_the_total_everything() {
        let ledger = Ledger::default();
        let a = controller("a");
        let start = 6_000 * 60; // on a minute's edge
        for minute in 0..15 {
            ledger.record_at(&a, start + minute * 60 + 30, |usage| usage.writes += 1);
        }
        let report = ledger.report_at(&a, start + 14 * 60 + 59);
        assert_eq!(report.total.writes, 15);
        assert_eq!(report.recent.writes, 10, "minutes 5 to 14");
        assert_eq!(report.recent_minutes, 10);
        assert_eq!(report.since, start + 30);
        // Quiet for long: the window empties, the total stays.
        let later = ledger.report_at(&a, start + 60 * 60);
        assert_eq!((later.total.writes, later.recent.writes), (15, 0));
    }

    #[test]
    fn a_young_controllers_window_covers_the_minutes_it_ran() {
        let ledger = Ledger::default();
        let a = controller("a");
        let start = 6_000 * 60 + 50;
        assert_eq!(ledger.report_at(&a, start).recent_minutes, 1);
        assert_eq!(ledger.report_at(&a, start + 20).recent_minutes, 2);
        assert_eq!(ledger.report_at(&a, start + 3_600).recent_minutes, 10);
    }

    #[test]
    fn hook_calls_count_scripts_and_webhooks_apart() {
        let ledger = Ledger::default();
        let a = controller("a");
        let cost = |cpu_micros, operations, peak_memory| CallCost {
            cpu: Duration::from_micros(cpu_micros),
            operations,
            peak_memory,
        };
        ledger.hook_call(&a, Duration::from_millis(1), Some(&cost(300, 50, 4096)));
        ledger.hook_call(&a, Duration::from_millis(1), Some(&cost(200, 70, 1024)));
        ledger.hook_call(&a, Duration::from_millis(12), None);
        ledger.failure(&a, "HookFailed");
        ledger.failure(&a, "HookFailed");
        ledger.write(&a);
        let usage = ledger.report(&a).total;
        assert_eq!(usage.hook_calls, 3);
        assert_eq!(usage.hook_cpu_micros, 500);
        assert_eq!(usage.operations, 120);
        assert_eq!(usage.peak_memory_bytes, 4096);
        assert_eq!((usage.webhook_calls, usage.webhook_micros), (1, 12_000));
        assert_eq!(usage.writes, 1);
        assert_eq!(usage.failures, BTreeMap::from([("HookFailed".into(), 2)]));
        assert_eq!(ledger.report(&controller("b")).total, Usage::default());
        ledger.forget(&a);
        assert_eq!(ledger.report(&a).total, Usage::default());
    }

    #[test]
    fn replicas_reports_add_up_with_the_earliest_start_and_the_largest_peak() {
        let report = |since, writes, peak, reason: &str| UsageReport {
            since,
            total: Usage {
                writes,
                peak_memory_bytes: peak,
                failures: BTreeMap::from([(reason.to_string(), 1)]),
                ..Usage::default()
            },
            recent: Usage {
                writes,
                ..Usage::default()
            },
            recent_minutes: 10,
        };
        let total = report(200, 3, 10, "HookFailed")
            + report(100, 4, 30, "HookFailed")
            + report(0, 1, 20, "ApplyFailed")
            + UsageReport::default();
        assert_eq!(total.since, 100);
        assert_eq!((total.total.writes, total.recent.writes), (8, 8));
        assert_eq!(total.total.peak_memory_bytes, 30);
        assert_eq!(
            total.total.failures,
            BTreeMap::from([("ApplyFailed".into(), 1), ("HookFailed".into(), 2)])
        );
        // What an older replica sends (no usage at all) reads as nothing used.
        let old: UsageReport = serde_json::from_str("{}").unwrap();
        assert_eq!(old, UsageReport::default());
    }
}
