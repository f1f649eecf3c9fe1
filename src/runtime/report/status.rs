//! The status each controller object reports: generation seen, conditions, target counts and
//! the digests of the scripts running.

use crate::api::{Condition, ControllerStatus, RolloutStatus, ScriptStatus};
use crate::runtime::report::problem::Problem;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

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

/// How many objects a controller acts on, and how their last syncs went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

/// The status to write, carrying over transition times of conditions that did not change.
pub fn status(
    previous: Option<&ControllerStatus>,
    health: &Health,
    counts: Counts,
    reads: &Result<(), Problem>,
    rollout: Option<&RolloutReport>,
) -> ControllerStatus {
    let now = jiff::Timestamp::now().to_string();
    let condition = |kind: &str, state: &Result<(), Problem>| {
        let (status, reason, message) = match state {
            Ok(()) => ("True", "Ok".to_string(), String::new()),
            Err(problem) => ("False", problem.reason.to_string(), problem.message.clone()),
        };
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
    let mut conditions = vec![
        condition("Ready", &health.ready),
        condition("ScriptsLoaded", &health.scripts_loaded),
        condition("ReadsAllowed", reads),
    ];
    if let Some(rollout) = rollout {
        conditions.push(condition("Rollout", &rollout.condition));
    }
    ControllerStatus {
        observed_generation: health.generation,
        conditions,
        targets: counts.targets,
        synced: counts.synced,
        failing: counts.failing,
        scripts: health.scripts.clone(),
        rollout: rollout.map(|rollout| rollout.status.clone()),
    }
}

/// The status to write, or `None` when it is what `previous` (the last written, or what the
/// object carries) already says: unchanged status is never rewritten.
pub fn changed(
    previous: Option<&ControllerStatus>,
    health: &Health,
    counts: Counts,
    reads: &Result<(), Problem>,
    rollout: Option<&RolloutReport>,
) -> Option<ControllerStatus> {
    let status = status(previous, health, counts, reads, rollout);
    (previous != Some(&status)).then_some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let first = status(None, &health, one, &Ok(()), None);
        let mut earlier = first.clone();
        earlier.conditions[0].last_transition_time = Some("2020-01-01T00:00:00Z".into());
        let second = status(Some(&earlier), &health, one, &Ok(()), None);
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
        let first = changed(None, &health, counts, &Ok(()), None).expect("nothing written yet");
        assert_eq!(changed(Some(&first), &health, counts, &Ok(()), None), None);
        let failing = Counts {
            failing: 1,
            synced: 1,
            ..counts
        };
        let second =
            changed(Some(&first), &health, failing, &Ok(()), None).expect("the counts changed");
        assert_eq!(second.failing, 1);
        // A new problem flips Ready and stamps a new transition time.
        let broken = Health {
            ready: Err(Problem::new("ScriptError", "line 2")),
            ..health.clone()
        };
        let third = changed(Some(&second), &broken, failing, &Ok(()), None).expect("Ready changed");
        assert_eq!(third.conditions[0].status, "False");
        assert_eq!(third.conditions[0].reason, "ScriptError");
        // A refused read shows in its own condition, naming what was refused.
        let refused = Err(Problem::new(
            "ReadForbidden",
            "may not list secrets in kube-system",
        ));
        let fourth =
            changed(Some(&third), &broken, failing, &refused, None).expect("reads changed");
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
}
