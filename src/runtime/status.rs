//! The status each controller object reports: generation seen, conditions, target counts and
//! the digests of the scripts running.

use crate::api::{Condition, ControllerStatus, ScriptStatus};
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Mutex;

/// The last outcome of every target's sync, for the counts in status.
#[derive(Debug)]
pub struct SyncOutcomes<K> {
    outcomes: Mutex<HashMap<K, Option<String>>>,
}

impl<K> Default for SyncOutcomes<K> {
    fn default() -> Self {
        SyncOutcomes {
            outcomes: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> SyncOutcomes<K> {
    fn outcomes(&self) -> std::sync::MutexGuard<'_, HashMap<K, Option<String>>> {
        self.outcomes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn succeeded(&self, key: K) {
        self.outcomes().insert(key, None);
    }

    pub fn failed(&self, key: K, message: String) {
        self.outcomes().insert(key, Some(message));
    }

    pub fn forget(&self, key: &K) {
        self.outcomes().remove(key);
    }

    /// (targets, synced, failing)
    pub fn counts(&self) -> (u64, u64, u64) {
        let outcomes = self.outcomes();
        let failing = outcomes.values().filter(|o| o.is_some()).count() as u64;
        let total = outcomes.len() as u64;
        (total, total - failing, failing)
    }
}

/// What the operator knows about a controller at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Health {
    pub generation: Option<i64>,
    /// Types resolved and a version of every hook running; the message says why not.
    pub ready: Result<(), (String, String)>,
    /// The newest scripts compiled; the message holds the compile error.
    pub scripts_loaded: Result<(), (String, String)>,
    pub scripts: BTreeMap<String, ScriptStatus>,
}

/// The status to write, carrying over transition times of conditions that did not change.
pub fn status(
    previous: Option<&ControllerStatus>,
    health: &Health,
    counts: (u64, u64, u64),
) -> ControllerStatus {
    let now = jiff::Timestamp::now().to_string();
    let condition = |kind: &str, state: &Result<(), (String, String)>| {
        let (status, reason, message) = match state {
            Ok(()) => ("True", "Ok".to_string(), String::new()),
            Err((reason, message)) => ("False", reason.clone(), message.clone()),
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
    ControllerStatus {
        observed_generation: health.generation,
        conditions: vec![
            condition("Ready", &health.ready),
            condition("ScriptsLoaded", &health.scripts_loaded),
        ],
        targets: counts.0,
        synced: counts.1,
        failing: counts.2,
        scripts: health.scripts.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_last_outcome_per_target() {
        let outcomes = SyncOutcomes::default();
        outcomes.succeeded("a");
        outcomes.failed("b", "boom".into());
        outcomes.failed("a", "boom".into());
        outcomes.succeeded("c");
        assert_eq!(outcomes.counts(), (3, 1, 2));
        outcomes.forget(&"a");
        assert_eq!(outcomes.counts(), (2, 1, 1));
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let health = Health {
            generation: Some(3),
            ready: Ok(()),
            scripts_loaded: Err(("CompileFailed".into(), "line 1".into())),
            scripts: BTreeMap::new(),
        };
        let first = status(None, &health, (1, 1, 0));
        let mut earlier = first.clone();
        earlier.conditions[0].last_transition_time = Some("2020-01-01T00:00:00Z".into());
        let second = status(Some(&earlier), &health, (1, 1, 0));
        assert_eq!(
            second.conditions[0].last_transition_time.as_deref(),
            Some("2020-01-01T00:00:00Z")
        );
        assert_eq!(second.conditions[1].status, "False");
        assert_eq!(second.conditions[1].reason, "CompileFailed");
        assert_eq!(second.observed_generation, Some(3));
    }
}
