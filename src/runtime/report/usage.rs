//! What each controller costs (`status.usage`): its hook calls and their CPU time, the
//! operations and memory of its scripts, its webhook calls and their latency, its API writes
//! and its failures by reason; since this replica began running it, and over the last minutes.
//!
//! Counted per wall-clock minute, so the windows of several replicas line up when their reports
//! are added together (sharded replicas report theirs in their Leases).
//!
//! A controller with a budget (`spec.budget`) also has an allowance here: what its work spends
//! beyond the budget is a debt, and its work waits until the debt is paid back at the budget's
//! rate ([`Ledger::pace`]).

use crate::api::Budget;
use crate::runtime::keys::ControllerId;
use crate::script::CallCost;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The window `status.usage` reports besides the total: this many wall-clock minutes, the
/// current one included.
pub(crate) const WINDOW_MINUTES: i64 = 10;

/// What a controller used over some span.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    #[serde(skip_serializing_if = "is_zero")]
    pub hook_calls: u64,
    /// CPU time of the threads running its script hooks.
    #[serde(skip_serializing_if = "is_zero")]
    pub hook_cpu_micros: u64,
    /// Rhai operations and Luau interrupts (see [`CallCost::operations`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub operations: u64,
    /// The most memory one script call held at once.
    #[serde(skip_serializing_if = "is_zero")]
    pub peak_memory_bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub webhook_calls: u64,
    /// The webhook calls' wall-clock time, added up.
    #[serde(skip_serializing_if = "is_zero")]
    pub webhook_micros: u64,
    /// Writes made for its objects (its own status is not counted: writing it is how usage is
    /// reported).
    #[serde(skip_serializing_if = "is_zero")]
    pub writes: u64,
    /// Failed work items, by reason (the Event reason: HookFailed, ApplyFailed, …).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failures: BTreeMap<String, u64>,
}

/// Leases carry every controller's usage: what is zero is left out.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_empty(usage: &Usage) -> bool {
    *usage == Usage::default()
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
    #[serde(skip_serializing_if = "is_empty")]
    pub total: Usage,
    /// The last [`WINDOW_MINUTES`] minutes, or fewer right after counting began.
    #[serde(skip_serializing_if = "is_empty")]
    pub recent: Usage,
    /// How many minutes `recent` covers.
    pub recent_minutes: i64,
    /// While a replica paces the controller's work for its budget: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paced: Option<Paced>,
}

/// Why a controller's work waits: which budget it is over, and by how much.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Paced {
    /// `CPUBudget` or `WriteBudget`.
    pub reason: String,
    pub message: String,
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
        self.paced = self.paced.or(other.paced);
        self
    }
}

/// One controller's usage: the total, a bucket per minute of the window, and its allowance
/// when it has a budget.
#[derive(Debug)]
struct Tally {
    since: i64,
    total: Usage,
    /// (minute since the epoch, usage in it), oldest first, within the window.
    minutes: VecDeque<(i64, Usage)>,
    allowance: Option<Allowance>,
}

impl Tally {
    fn new(now: i64) -> Tally {
        Tally {
            since: now,
            total: Usage::default(),
            minutes: VecDeque::new(),
            allowance: None,
        }
    }

    fn record(&mut self, now: i64, change: impl Fn(&mut Usage)) {
        let (cpu_before, writes_before) = (self.total.hook_cpu_micros, self.total.writes);
        change(&mut self.total);
        if let Some(allowance) = &mut self.allowance {
            allowance.cpu_micros -= (self.total.hook_cpu_micros - cpu_before) as f64;
            allowance.writes -= (self.total.writes - writes_before) as f64;
        }
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
        let paced = self.allowance.as_ref().and_then(|allowance| {
            let (until, paced) = allowance.paced.as_ref()?;
            (*until > Instant::now()).then(|| paced.clone())
        });
        UsageReport {
            since: self.since,
            total: self.total.clone(),
            recent,
            recent_minutes: (minute - self.since.div_euclid(60) + 1).clamp(1, WINDOW_MINUTES),
            paced,
        }
    }
}

/// A budget as a bucket per figure: it starts with a minute's worth, refills at the budget's
/// rate up to a minute's worth, and is drawn on by what the controller's work spends; below
/// zero is a debt.
#[derive(Debug)]
struct Allowance {
    budget: Budget,
    /// The part of the budget this replica keeps to (sharded: one replica's part).
    share: f64,
    cpu_micros: f64,
    writes: f64,
    refilled: Instant,
    /// Until when its work waits, and why.
    paced: Option<(Instant, Paced)>,
}

/// One figure of a budget: per minute, in the unit the allowance counts.
struct Figure {
    per_minute: Option<f64>,
    /// `CPU` or `write`, as a message names the budget.
    noun: &'static str,
    /// The condition's reason.
    reason: &'static str,
    describe: fn(f64) -> String,
}

/// How long a paced controller still shows as throttled after its last wait: work that waits
/// now and then, item after item, reads as one stretch of throttling, not as a condition
/// flapping under the status loop's samples (every 2 s).
const PACED_LINGERS: Duration = Duration::from_secs(10);

impl Allowance {
    /// A minute's worth of `budget`, less what `earlier` (the allowance of the budget it
    /// replaces) still owes: a new budget does not forgive a debt.
    fn new(budget: Budget, share: f64, now: Instant, earlier: Option<&Allowance>) -> Allowance {
        let mut allowance = Allowance {
            budget,
            share,
            cpu_micros: 0.0,
            writes: 0.0,
            refilled: now,
            paced: None,
        };
        allowance.refill(now, true);
        if let Some(earlier) = earlier {
            let [(cpu, _), (writes, _)] = earlier.figures();
            if cpu.per_minute.is_some() {
                allowance.cpu_micros = allowance.cpu_micros.min(earlier.cpu_micros);
            }
            if writes.per_minute.is_some() {
                allowance.writes = allowance.writes.min(earlier.writes);
            }
        }
        allowance
    }

    fn figures(&self) -> [(Figure, f64); 2] {
        [
            (
                Figure {
                    per_minute: self
                        .budget
                        .cpu_millis_per_minute
                        .map(|millis| millis as f64 * 1_000.0 * self.share),
                    noun: "CPU",
                    reason: "CPUBudget",
                    describe: |micros| human(Duration::from_micros(micros.round() as u64)),
                },
                self.cpu_micros,
            ),
            (
                Figure {
                    per_minute: self
                        .budget
                        .writes_per_minute
                        .map(|writes| writes as f64 * self.share),
                    noun: "write",
                    reason: "WriteBudget",
                    describe: |writes| match writes.ceil() as u64 {
                        1 => "1 write".to_string(),
                        n => format!("{n} writes"),
                    },
                },
                self.writes,
            ),
        ]
    }

    /// Adds what the time since the last refill earned (`full`: a whole minute's worth).
    fn refill(&mut self, now: Instant, full: bool) {
        let minutes = now.saturating_duration_since(self.refilled).as_secs_f64() / 60.0;
        self.refilled = now;
        let [(cpu, _), (writes, _)] = self.figures();
        let earn = |tokens: &mut f64, per_minute: Option<f64>| {
            let per_minute = per_minute.unwrap_or(0.0);
            *tokens = if full {
                per_minute
            } else {
                (*tokens + per_minute * minutes).min(per_minute)
            };
        };
        earn(&mut self.cpu_micros, cpu.per_minute);
        earn(&mut self.writes, writes.per_minute);
    }

    /// How long the controller's work must wait to pay back its largest debt, and which budget
    /// it is over. The reason and message name the budget only (what is owed changes with every
    /// item; the log says it), so a status carrying them is not rewritten item after item.
    fn debt(&self) -> Option<(Duration, Paced)> {
        self.figures()
            .into_iter()
            .filter_map(|(figure, tokens)| {
                let per_minute = figure.per_minute.filter(|rate| *rate > 0.0)?;
                (tokens < 0.0).then(|| {
                    // A day at most: a debt that large is a budget far too small, not a wait.
                    let wait = Duration::try_from_secs_f64(-tokens / per_minute * 60.0)
                        .unwrap_or(Duration::MAX)
                        .min(Duration::from_secs(86_400));
                    let message = format!(
                        "over its {} budget of {} a minute: its work waits until the excess is paid \
                         back at that rate",
                        figure.noun,
                        (figure.describe)(per_minute / self.share),
                    );
                    (
                        wait,
                        Paced {
                            reason: figure.reason.to_string(),
                            message,
                        },
                    )
                })
            })
            .max_by_key(|(wait, _)| *wait)
    }
}

/// A duration for people: `0s`, `850µs`, `12ms`, `1.5s`, `2m24s` (rounded to what is shown).
pub(crate) fn human(duration: Duration) -> String {
    let micros = duration.as_secs_f64() * 1e6;
    match micros {
        m if m < 0.5 => "0s".to_string(),
        m if m < 999.5 => format!("{m:.0}µs"),
        m if m < 999_500.0 => format!("{:.0}ms", m / 1e3),
        m if m < 59_950_000.0 => format!("{:.1}s", m / 1e6).replace(".0s", "s"),
        _ => {
            let seconds = duration.as_secs_f64().round() as u64;
            format!("{}m{:02}s", seconds / 60, seconds % 60)
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

    /// After a work item of the controller: how long its work must wait now to keep to the
    /// budget it was last loaded with ([`Ledger::budget`]), of which this replica keeps to
    /// `share` (sharded: its part), or `None`. The item's own version may be older than the
    /// live one: its budget is not asked for, so a finished item never brings back a budget an
    /// edit replaced.
    pub(crate) fn pace(&self, controller: &ControllerId, share: f64) -> Option<(Duration, Paced)> {
        self.pace_at(controller, share, Instant::now())
    }

    /// Starts counting against the controller's `budget` (when it is loaded, so its first
    /// work is counted too); a budget it has already goes on as it was. Returns whether the
    /// budget changed (what its work waits for may have).
    pub(crate) fn budget(&self, controller: &ControllerId, budget: &Budget, share: f64) -> bool {
        self.budget_at(controller, budget, share, Instant::now())
    }

    fn budget_at(
        &self,
        controller: &ControllerId,
        budget: &Budget,
        share: f64,
        now: Instant,
    ) -> bool {
        let mut tallies = self.tallies.lock();
        Self::allowance(&mut tallies, controller, budget, share, now).1
    }

    /// The controller's allowance for `budget`, refilled to `now` (`None` without a budget),
    /// and whether the budget (or the share) is new: then a minute's worth less what the old
    /// one still owed.
    fn allowance<'a>(
        tallies: &'a mut HashMap<ControllerId, Tally>,
        controller: &ControllerId,
        budget: &Budget,
        share: f64,
        now: Instant,
    ) -> (Option<&'a mut Allowance>, bool) {
        if !tallies.contains_key(controller) {
            tallies.insert(
                controller.clone(),
                Tally::new(unix_seconds(SystemTime::now())),
            );
        }
        let tally = tallies.get_mut(controller).expect("inserted above");
        if !budget.is_set() {
            let changed = tally.allowance.take().is_some();
            return (None, changed);
        }
        let kept = tally
            .allowance
            .as_ref()
            .is_some_and(|allowance| allowance.budget == *budget && allowance.share == share);
        if kept {
            let allowance = tally.allowance.as_mut().expect("kept");
            allowance.refill(now, false);
            return (Some(allowance), false);
        }
        if let Some(earlier) = &mut tally.allowance {
            earlier.refill(now, false);
        }
        let fresh = Allowance::new(*budget, share, now, tally.allowance.as_ref());
        (Some(tally.allowance.insert(fresh)), true)
    }

    fn pace_at(
        &self,
        controller: &ControllerId,
        share: f64,
        now: Instant,
    ) -> Option<(Duration, Paced)> {
        let mut tallies = self.tallies.lock();
        let budget = tallies.get(controller)?.allowance.as_ref()?.budget;
        let allowance = Self::allowance(&mut tallies, controller, &budget, share, now).0?;
        let debt = allowance.debt();
        if let Some((wait, paced)) = &debt {
            allowance.paced = Some((now + *wait + PACED_LINGERS, paced.clone()));
        }
        debt
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
            paced: None,
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

    fn budget(cpu: Option<i64>, writes: Option<i64>) -> Budget {
        Budget {
            cpu_millis_per_minute: cpu,
            writes_per_minute: writes,
        }
    }

    #[test]
    fn work_past_its_budget_waits_until_the_debt_is_paid_back() {
        let ledger = Ledger::default();
        let a = controller("a");
        let writes = budget(None, Some(6));
        let start = Instant::now();
        // A minute's worth to start with: six writes pass.
        ledger.budget_at(&a, &writes, 1.0, start);
        assert_eq!(ledger.pace_at(&a, 1.0, start), None);
        for _ in 0..6 {
            ledger.write(&a);
        }
        assert_eq!(ledger.pace_at(&a, 1.0, start), None, "at zero");
        for _ in 0..3 {
            ledger.write(&a);
        }
        let (wait, paced) = ledger.pace_at(&a, 1.0, start).expect("three over");
        assert_eq!(wait, Duration::from_secs(30), "3 writes at 6 a minute");
        assert_eq!(paced.reason, "WriteBudget");
        assert_eq!(
            paced.message,
            "over its write budget of 6 writes a minute: its work waits until the excess is \
             paid back at that rate"
        );
        assert_eq!(
            ledger.report(&a).paced,
            Some(paced),
            "reported while it waits"
        );
        // Twenty seconds later two writes are paid back: ten seconds to go.
        let later = start + Duration::from_secs(20);
        assert_eq!(
            ledger.pace_at(&a, 1.0, later).unwrap().0,
            Duration::from_secs(10)
        );
        // Long quiet refills at most a minute's worth.
        let much_later = start + Duration::from_secs(3_600);
        assert_eq!(ledger.pace_at(&a, 1.0, much_later), None);
        for _ in 0..7 {
            ledger.write(&a);
        }
        assert!(ledger.pace_at(&a, 1.0, much_later).is_some());
    }

    #[test]
    fn cpu_is_paced_too_and_a_sharded_replica_keeps_to_its_part() {
        let ledger = Ledger::default();
        let a = controller("a");
        let cpu = budget(Some(100), None);
        let start = Instant::now();
        let call = |micros| CallCost {
            cpu: Duration::from_micros(micros),
            ..CallCost::default()
        };
        // One of four replicas: 25 ms a minute here.
        ledger.budget_at(&a, &cpu, 0.25, start);
        assert_eq!(ledger.pace_at(&a, 0.25, start), None);
        ledger.hook_call(&a, Duration::ZERO, Some(&call(40_000)));
        let (wait, paced) = ledger.pace_at(&a, 0.25, start).expect("15 ms over");
        assert_eq!(wait, Duration::from_secs(36), "15 ms at 25 ms a minute");
        assert_eq!(paced.reason, "CPUBudget");
        assert!(
            paced
                .message
                .starts_with("over its CPU budget of 100ms a minute:")
        );
        // A new budget does not forgive the debt: a larger one still owes the 15 ms.
        let larger = budget(Some(1_000), None);
        assert!(ledger.budget_at(&a, &larger, 0.25, start), "a change");
        let (wait, _) = ledger.pace_at(&a, 0.25, start).expect("still owed");
        assert_eq!(
            wait,
            Duration::from_millis(3_600),
            "15 ms at 250 ms a minute"
        );
        // Pacing after an item of the older version keeps to the budget loaded last.
        assert!(!ledger.budget_at(&a, &larger, 0.25, start), "no change");
        assert_eq!(
            ledger.pace_at(&a, 0.25, start).unwrap().0,
            Duration::from_millis(3_600)
        );
        // None at all forgets the allowance, and the condition with it.
        ledger.hook_call(&a, Duration::ZERO, Some(&call(10_000_000)));
        ledger.budget_at(&a, &Budget::default(), 0.25, start);
        assert_eq!(ledger.pace_at(&a, 0.25, start), None);
        assert_eq!(ledger.report(&a).paced, None);
    }
}
