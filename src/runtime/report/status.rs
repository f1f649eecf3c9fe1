//! The status each controller object reports: generation seen, conditions, target counts and
//! the digests of the scripts running.

use crate::api::{
    Condition, ControllerStatus, RolloutStatus, ScriptStatus, UsageFigures, UsageStatus,
};
use crate::runtime::report::problem::Problem;
use crate::runtime::report::usage::{self, Usage, UsageReport};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Duration;

/// The last outcome of every target's sync: for the counts in status, and for a resync to skip
/// what cannot have changed since (see [`crate::runtime::write::fingerprint`]). Forgotten with the target.
#[derive(Debug)]
pub struct SyncOutcomes<K> {
    outcomes: Mutex<HashMap<K, Last>>,
}

#[derive(Debug)]
enum Last {
    /// Synced; with the fingerprint of what the sync saw when it was pure.
    Synced(Option<u64>),
    Failed,
}

impl<K> Default for SyncOutcomes<K> {
    fn default() -> Self {
        SyncOutcomes {
            outcomes: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> SyncOutcomes<K> {
    fn outcomes(&self) -> parking_lot::MutexGuard<'_, HashMap<K, Last>> {
        self.outcomes.lock()
    }

    /// Forgets every outcome `gone` picks (e.g. all the pairs of a deleted parent).
    pub fn forget_where(&self, gone: impl Fn(&K) -> bool) {
        self.outcomes().retain(|key, _| !gone(key));
    }

    /// A sync succeeded; `fingerprint` when a resync may skip it while nothing it saw changes.
    /// Returns whether the key was failing until now.
    pub fn succeeded(&self, key: K, fingerprint: Option<u64>) -> bool {
        let last = self.outcomes().insert(key, Last::Synced(fingerprint));
        matches!(last, Some(Last::Failed))
    }

    pub fn failed(&self, key: K) {
        self.outcomes().insert(key, Last::Failed);
    }

    /// Returns whether the key was failing until now.
    pub fn forget(&self, key: &K) -> bool {
        matches!(self.outcomes().remove(key), Some(Last::Failed))
    }

    /// Whether any key `pick` picks is failing (a pass over every outcome).
    pub fn any_failed(&self, pick: impl Fn(&K) -> bool) -> bool {
        self.outcomes()
            .iter()
            .any(|(key, last)| matches!(last, Last::Failed) && pick(key))
    }

    /// Every key with an outcome.
    pub fn keys(&self) -> Vec<K>
    where
        K: Clone,
    {
        self.outcomes().keys().cloned().collect()
    }

    /// The fingerprint of the last sync, when it succeeded and was pure.
    pub fn fingerprint(&self, key: &K) -> Option<u64> {
        match self.outcomes().get(key) {
            Some(Last::Synced(fingerprint)) => *fingerprint,
            _ => None,
        }
    }

    pub fn counts(&self) -> Counts {
        let outcomes = self.outcomes();
        let failing = outcomes
            .values()
            .filter(|o| matches!(o, Last::Failed))
            .count() as u64;
        let targets = outcomes.len() as u64;
        Counts {
            targets,
            synced: targets - failing,
            failing,
            ..Counts::default()
        }
    }
}

/// How many objects a controller acts on, how their last syncs went, and what it used: what a
/// replica reports of a controller, and what the replicas' reports add up to.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub targets: u64,
    pub synced: u64,
    pub failing: u64,
    /// During a canary rollout: which candidate revision (a digest of its name, 0 for none), of
    /// `targets` those it serves, and how many of these failed on their last sync (what its
    /// `maxErrors` is judged by, summed over the replicas when sharded).
    #[serde(default)]
    pub candidate: u64,
    #[serde(default)]
    pub candidate_serving: u64,
    #[serde(default)]
    pub candidate_failing: u64,
    #[serde(default)]
    pub usage: UsageReport,
}

/// Counts of disjoint sets of work items (replicas' shares) add up. A candidate's counts add
/// only when both are about the same candidate: the left side's is kept (a replica's report
/// made before it followed a new candidate does not count against it).
impl std::ops::Add for Counts {
    type Output = Counts;

    fn add(self, other: Counts) -> Counts {
        let same_candidate = self.candidate == other.candidate;
        let candidate = |mine: u64, theirs: u64| mine + if same_candidate { theirs } else { 0 };
        Counts {
            targets: self.targets + other.targets,
            synced: self.synced + other.synced,
            failing: self.failing + other.failing,
            candidate: self.candidate,
            candidate_serving: candidate(self.candidate_serving, other.candidate_serving),
            candidate_failing: candidate(self.candidate_failing, other.candidate_failing),
            usage: self.usage + other.usage,
        }
    }
}

/// What the operator knows about a controller at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    pub generation: Option<i64>,
    /// Types resolved and a version of every hook running.
    pub ready: Result<(), Problem>,
    /// The newest scripts compiled; the problem holds the compile error.
    pub scripts_loaded: Result<(), Problem>,
    pub scripts: BTreeMap<String, ScriptStatus>,
}

impl Health {
    /// A controller that cannot run at all.
    pub fn failed(generation: Option<i64>, problem: Problem) -> Health {
        Health {
            generation,
            ready: Err(problem.clone()),
            scripts_loaded: Err(problem),
            scripts: BTreeMap::new(),
        }
    }
}

/// The `ReadsAllowed` condition from the problems of the work items whose last sync was
/// refused a read: the first named, the rest counted.
pub fn reads_allowed<'a>(
    mut refused: impl ExactSizeIterator<Item = &'a Problem>,
) -> Result<(), Problem> {
    let more = refused.len().saturating_sub(1);
    let Some(first) = refused.next() else {
        return Ok(());
    };
    let message = match more {
        0 => first.message.clone(),
        1 => format!("{} (and 1 more work item refused a read)", first.message),
        more => format!(
            "{} (and {more} more work items refused a read)",
            first.message
        ),
    };
    Err(Problem {
        message,
        ..first.clone()
    })
}

/// A staged rollout as the controller's status reports it: `status.rollout`, and the `Rollout`
/// condition (False while a candidate revision is staged, or after one was rolled back).
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutReport {
    pub status: RolloutStatus,
    pub condition: Result<(), Problem>,
}

/// What a controller's status says besides its counts, at one moment.
pub struct Facts<'a> {
    pub health: &'a Health,
    /// The `ReadsAllowed` condition.
    pub reads: &'a Result<(), Problem>,
    pub rollout: Option<&'a RolloutReport>,
    /// Whether it has a budget (then its status has a `Throttled` condition).
    pub budgeted: bool,
}

/// The status to write, carrying over transition times of conditions that did not change.
pub fn status(
    previous: Option<&ControllerStatus>,
    facts: &Facts<'_>,
    counts: Counts,
) -> ControllerStatus {
    let Facts {
        health,
        reads,
        rollout,
        budgeted,
    } = *facts;
    let now = jiff::Timestamp::now();
    let usage = usage_status(previous.and_then(|p| p.usage.as_ref()), &counts.usage, now);
    let now = now.to_string();
    let stated = |kind: &str, status: &str, reason: String, message: String| {
        let earlier = previous
            .into_iter()
            .flat_map(|p| p.conditions.iter())
            .find(|c| c.type_ == kind && c.status == status);
        Condition {
            type_: kind.to_string(),
            status: status.to_string(),
            reason,
            message,
            last_transition_time: Some(
                earlier
                    .and_then(|c| c.last_transition_time.clone())
                    .unwrap_or_else(|| now.clone()),
            ),
            observed_generation: health.generation,
        }
    };
    let condition = |kind: &str, state: &Result<(), Problem>| match state {
        Ok(()) => stated(kind, "True", "Ok".to_string(), String::new()),
        Err(problem) => stated(
            kind,
            "False",
            problem.reason.to_string(),
            problem.message.clone(),
        ),
    };
    let mut conditions = vec![
        condition("Ready", &health.ready),
        condition("ScriptsLoaded", &health.scripts_loaded),
        condition("ReadsAllowed", reads),
    ];
    if let Some(rollout) = rollout {
        conditions.push(condition("Rollout", &rollout.condition));
    }
    // Only for a controller with a budget: True while a replica paces its work.
    if budgeted {
        conditions.push(match &counts.usage.paced {
            Some(paced) => stated(
                "Throttled",
                "True",
                paced.reason.clone(),
                paced.message.clone(),
            ),
            None => stated(
                "Throttled",
                "False",
                "WithinBudget".to_string(),
                String::new(),
            ),
        });
    }
    ControllerStatus {
        observed_generation: health.generation,
        conditions,
        targets: counts.targets,
        synced: counts.synced,
        failing: counts.failing,
        scripts: health.scripts.clone(),
        rollout: rollout.map(|rollout| rollout.status.clone()),
        usage: Some(usage),
    }
}

/// `status.usage` from the replicas' reports; `updated` stays as `previous` has it while the
/// figures are the same.
fn usage_status(
    previous: Option<&UsageStatus>,
    report: &UsageReport,
    now: jiff::Timestamp,
) -> UsageStatus {
    let minutes = report.recent_minutes.max(1) as f64;
    // Nothing counted (a controller that never loaded): keep the start already reported.
    let since = match report.since {
        0 => previous.map_or_else(|| now.to_string(), |previous| previous.since.clone()),
        since => jiff::Timestamp::from_second(since)
            .unwrap_or(now)
            .to_string(),
    };
    let mut usage = UsageStatus {
        since,
        updated: now.to_string(),
        cpu_per_minute: usage::human(Duration::from_micros(
            (report.recent.hook_cpu_micros as f64 / minutes).round() as u64,
        )),
        writes_per_minute: (report.recent.writes as f64 / minutes * 10.0).round() / 10.0,
        recent_minutes: report.recent_minutes,
        recent: figures(&report.recent),
        total: figures(&report.total),
    };
    if let Some(previous) = previous {
        // An idle controller's window growing from one minute to ten changes nothing worth a
        // write.
        if report.recent == Usage::default() && previous.recent == usage.recent {
            usage.recent_minutes = previous.recent_minutes;
        }
        let same = UsageStatus {
            updated: previous.updated.clone(),
            ..usage.clone()
        };
        if same == *previous {
            usage.updated = previous.updated.clone();
        }
    }
    usage
}

fn figures(usage: &Usage) -> UsageFigures {
    // To a tenth of a millisecond: finer would rewrite status for noise.
    let millis = |micros: f64| (micros / 100.0).round() / 10.0;
    UsageFigures {
        hook_calls: usage.hook_calls,
        hook_cpu_millis: millis(usage.hook_cpu_micros as f64),
        operations: usage.operations,
        peak_memory_bytes: usage.peak_memory_bytes,
        webhook_calls: usage.webhook_calls,
        webhook_mean_millis: match usage.webhook_calls {
            0 => 0.0,
            calls => millis(usage.webhook_micros as f64 / calls as f64),
        },
        writes: usage.writes,
        failures: usage.failures.clone(),
    }
}

/// The status to write, or `None` when it is what `previous` (the last written, or what the
/// object carries) already says: unchanged status is never rewritten, and a change of usage
/// alone waits until `previous` usage is `usage_refresh` old.
pub fn changed(
    previous: Option<&ControllerStatus>,
    facts: &Facts<'_>,
    counts: Counts,
    usage_refresh: Duration,
) -> Option<ControllerStatus> {
    let status = status(previous, facts, counts);
    let Some(previous) = previous else {
        return Some(status);
    };
    if *previous == status {
        return None;
    }
    if usage_alone(previous, &status) && !usage_due(previous.usage.as_ref(), usage_refresh) {
        return None;
    }
    Some(status)
}

/// Whether `status` differs from `previous` in its usage alone (a rewrite that does not count
/// as the controller's write: see [`crate::runtime::report::metrics::Metrics::usage_writes`]).
pub fn usage_alone(previous: &ControllerStatus, status: &ControllerStatus) -> bool {
    previous.usage != status.usage
        && ControllerStatus {
            usage: previous.usage.clone(),
            ..status.clone()
        } == *previous
}

/// Whether usage written then is old enough to be rewritten.
fn usage_due(written: Option<&UsageStatus>, usage_refresh: Duration) -> bool {
    let Some(updated) = written.and_then(|usage| usage.updated.parse::<jiff::Timestamp>().ok())
    else {
        return true;
    };
    let age = jiff::Timestamp::now().duration_since(updated);
    // Written ahead of this replica's clock (another replica's, skewed): not worth waiting for.
    age.is_negative()
        || age >= jiff::SignedDuration::try_from(usage_refresh).unwrap_or(jiff::SignedDuration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3_600);
    static READS_ALLOWED: Result<(), Problem> = Ok(());

    /// A controller's facts with every read allowed, no rollout and no budget.
    fn facts(health: &Health) -> Facts<'_> {
        Facts {
            health,
            reads: &READS_ALLOWED,
            rollout: None,
            budgeted: false,
        }
    }

    #[test]
    fn counts_follow_the_last_outcome_per_target() {
        let outcomes = SyncOutcomes::default();
        outcomes.succeeded("a", None);
        outcomes.failed("b");
        outcomes.failed("a");
        outcomes.succeeded("c", Some(7));
        let counts = |targets, synced, failing| Counts {
            targets,
            synced,
            failing,
            ..Counts::default()
        };
        assert_eq!(outcomes.counts(), counts(3, 1, 2));
        outcomes.forget(&"a");
        assert_eq!(outcomes.counts(), counts(2, 1, 1));
        outcomes.forget_where(|key| *key != "c");
        assert_eq!(outcomes.counts(), counts(1, 1, 0));
    }

    #[test]
    fn a_candidates_counts_add_up_only_for_the_same_candidate() {
        let counts = |candidate, failing| Counts {
            targets: 10,
            candidate,
            candidate_serving: 5,
            candidate_failing: failing,
            ..Counts::default()
        };
        let total = counts(7, 1) + counts(7, 2) + counts(9, 4);
        assert_eq!(total.targets, 30);
        assert_eq!(total.candidate, 7);
        assert_eq!((total.candidate_serving, total.candidate_failing), (10, 3));
    }

    #[test]
    fn only_a_pure_success_keeps_a_fingerprint() {
        let outcomes = SyncOutcomes::default();
        outcomes.succeeded("a", Some(7));
        assert_eq!(outcomes.fingerprint(&"a"), Some(7));
        outcomes.failed("a");
        assert_eq!(outcomes.fingerprint(&"a"), None, "a failure forgets it");
        outcomes.succeeded("a", Some(8));
        outcomes.succeeded("a", None);
        assert_eq!(
            outcomes.fingerprint(&"a"),
            None,
            "an impure sync forgets it"
        );
        outcomes.succeeded("a", Some(9));
        outcomes.forget(&"a");
        assert_eq!(outcomes.fingerprint(&"a"), None);
        assert_eq!(outcomes.fingerprint(&"never"), None);
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let health = Health {
            generation: Some(3),
            ready: Ok(()),
            scripts_loaded: Err(Problem::new("CompileFailed", "line 1")),
            scripts: BTreeMap::new(),
        };
        let one = Counts {
            targets: 1,
            synced: 1,
            failing: 0,
            ..Counts::default()
        };
        let first = status(None, &facts(&health), one.clone());
        let mut earlier = first.clone();
        earlier.conditions[0].last_transition_time = Some("2020-01-01T00:00:00Z".into());
        let second = status(Some(&earlier), &facts(&health), one);
        assert_eq!(
            second.conditions[0].last_transition_time.as_deref(),
            Some("2020-01-01T00:00:00Z")
        );
        assert_eq!(second.conditions[1].status, "False");
        assert_eq!(second.conditions[1].reason, "CompileFailed");
        assert_eq!(second.observed_generation, Some(3));
    }

    #[test]
    fn an_unchanged_status_is_not_written_again() {
        let health = Health {
            generation: Some(1),
            ready: Ok(()),
            scripts_loaded: Ok(()),
            scripts: BTreeMap::new(),
        };
        let counts = Counts {
            targets: 2,
            synced: 2,
            failing: 0,
            ..Counts::default()
        };
        let first =
            changed(None, &facts(&health), counts.clone(), HOUR).expect("nothing written yet");
        assert_eq!(
            changed(Some(&first), &facts(&health), counts.clone(), HOUR),
            None
        );
        let failing = Counts {
            failing: 1,
            synced: 1,
            ..counts
        };
        let second = changed(Some(&first), &facts(&health), failing.clone(), HOUR)
            .expect("the counts changed");
        assert_eq!(second.failing, 1);
        // A new problem flips Ready and stamps a new transition time.
        let broken = Health {
            ready: Err(Problem::new("ScriptError", "line 2")),
            ..health.clone()
        };
        let third =
            changed(Some(&second), &facts(&broken), failing.clone(), HOUR).expect("Ready changed");
        assert_eq!(third.conditions[0].status, "False");
        assert_eq!(third.conditions[0].reason, "ScriptError");
        // A refused read shows in its own condition, naming what was refused.
        let refused = Err(Problem::new(
            "ReadForbidden",
            "may not list secrets in kube-system",
        ));
        let fourth = changed(
            Some(&third),
            &Facts {
                reads: &refused,
                ..facts(&broken)
            },
            failing,
            HOUR,
        )
        .expect("reads changed");
        assert_eq!(fourth.conditions[2].type_, "ReadsAllowed");
        assert_eq!(fourth.conditions[2].status, "False");
        assert!(fourth.conditions[2].message.contains("kube-system"));
    }

    #[test]
    fn refused_reads_name_the_first_and_count_the_rest() {
        let mut refused = BTreeMap::new();
        assert_eq!(reads_allowed(refused.values()), Ok(()));
        refused.insert(
            "a",
            Problem::new("ReadForbidden", "may not list secrets in x"),
        );
        refused.insert("b", Problem::new("ReadForbidden", "may not get pods in y"));
        let problem = reads_allowed(refused.values()).unwrap_err();
        assert_eq!(problem.reason, "ReadForbidden");
        assert_eq!(
            problem.message,
            "may not list secrets in x (and 1 more work item refused a read)"
        );
    }

    fn quiet_health() -> Health {
        Health {
            generation: Some(1),
            ready: Ok(()),
            scripts_loaded: Ok(()),
            scripts: BTreeMap::new(),
        }
    }

    fn used(hook_calls: u64, hook_cpu_micros: u64, writes: u64) -> Counts {
        let usage = Usage {
            hook_calls,
            hook_cpu_micros,
            writes,
            ..Usage::default()
        };
        Counts {
            usage: UsageReport {
                since: 1_700_000_000,
                total: usage.clone(),
                recent: usage,
                recent_minutes: 10,
                paced: None,
            },
            ..Counts::default()
        }
    }

    #[test]
    fn usage_reads_per_minute_over_the_window() {
        let status = status(None, &facts(&quiet_health()), used(40, 30_000, 7));
        let usage = status.usage.expect("always reported");
        assert_eq!(usage.cpu_per_minute, "3ms", "30 ms over 10 minutes");
        assert_eq!(usage.writes_per_minute, 0.7);
        assert_eq!(usage.total.hook_calls, 40);
        assert_eq!(usage.total.hook_cpu_millis, 30.0);
        assert_eq!(usage.since, "2023-11-14T22:13:20Z");
        let human = |micros| usage::human(Duration::from_micros(micros));
        assert_eq!(human(0), "0s");
        assert_eq!(human(850), "850µs");
        assert_eq!(human(12_400), "12ms");
        assert_eq!(human(1_000_000), "1s");
        assert_eq!(human(2_500_000), "2.5s");
        assert_eq!(human(144_000_000), "2m24s");
    }

    #[test]
    fn usage_alone_is_rewritten_only_once_it_is_old_enough() {
        let health = quiet_health();
        let first = changed(None, &facts(&health), used(1, 100, 1), HOUR).unwrap();
        let after_first = |counts, refresh| changed(Some(&first), &facts(&health), counts, refresh);
        // Same figures: nothing to write, and `updated` would stay.
        assert_eq!(after_first(used(1, 100, 1), HOUR), None);
        let again = status(Some(&first), &facts(&health), used(1, 100, 1));
        assert_eq!(again.usage, first.usage);
        // More work, nothing else: waits for the refresh...
        assert_eq!(after_first(used(2, 300, 1), HOUR), None);
        // ...unless the usage written is that old already.
        let refreshed = after_first(used(2, 300, 1), Duration::ZERO).expect("old enough");
        assert_eq!(refreshed.usage.unwrap().total.hook_calls, 2);
        // Any other change carries the newest usage at once.
        let failing = Counts {
            targets: 1,
            failing: 1,
            ..used(3, 300, 2)
        };
        let carried = after_first(failing, HOUR).unwrap();
        assert_eq!(carried.usage.unwrap().total.hook_calls, 3);
    }
}
