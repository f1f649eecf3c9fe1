//! Staged rollouts of a controller revision, the pure part: what a revision is, which work
//! items a canary step hands the candidate, and when a step ends, the next starts or the
//! candidate is rolled back. The operator (`crate::runtime::rollout`) keeps the state and acts.

use crate::api::{CanaryStep, HaltedRevision, Rollout, RolloutStrategy};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// Hex digits of a revision name: short enough to type in `metascript rollout promote`.
const REVISION_DIGITS: usize = 10;

/// A controller revision: a digest of its spec (less `rollout`, which says how revisions move,
/// and `budget`, which says how fast the controller may go: neither is what a revision does)
/// and of every hook's digest (which covers scripts kept in ConfigMaps and
/// the libraries they load). Two loads of the same revision give the same name, on any replica.
pub(crate) fn revision(spec: &Value, hook_digests: &BTreeMap<String, String>) -> String {
    let mut spec = spec.clone();
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("rollout");
        fields.remove("budget");
    }
    let text = serde_json::to_string(&(&spec, hook_digests)).expect("JSON values serialize");
    hex::encode(Sha256::digest(text.as_bytes()))[..REVISION_DIGITS].to_string()
}

/// Where a work item falls on the canary's scale: a stable hash of what it is about (a target,
/// a parent, a map input's group), the same in every replica and every run.
pub fn position(unit: &str) -> u64 {
    let digest = Sha256::digest(unit.as_bytes());
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes of a sha256"))
}

/// The work items a candidate revision serves: those whose [`position`] is below a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    Nothing,
    Below(u64),
    Everything,
}

impl Share {
    pub fn serves(self, unit: &str) -> bool {
        match self {
            Share::Nothing => false,
            Share::Below(bound) => position(unit) < bound,
            Share::Everything => true,
        }
    }

    /// The share a step gives the candidate. `positions` are those of the work items the
    /// controller has now; a `count` step takes that many of the lowest, so that (as with
    /// `percent`) each step's items are among the next's. A `percent` step is that share of
    /// the hash scale, the same on every replica whatever items it owns (sharding), so over
    /// few items it is approximate: 30% of 10 items may be 2, 3 or 4 of them.
    pub fn of_step(step: &CanaryStep, positions: impl IntoIterator<Item = u64>) -> Share {
        if let Some(count) = step.count {
            let mut positions: Vec<u64> = positions.into_iter().collect();
            positions.sort_unstable();
            return match positions.get(count as usize) {
                None => Share::Everything,
                Some(_) if count == 0 => Share::Nothing,
                Some(&first_left_out) => Share::Below(first_left_out),
            };
        }
        match step.percent.unwrap_or(0).min(100) {
            0 => Share::Nothing,
            100 => Share::Everything,
            percent => Share::Below(((u128::from(percent) << 64) / 100) as u64),
        }
    }
}

/// What loading the newest revision of a controller does with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// It serves every work item.
    Serve,
    /// It becomes the candidate beside the serving revision.
    Stage,
    /// It does not run: the serving revision keeps serving everything.
    Hold(HaltedRevision),
}

/// Where things stand when a controller's newest revision is loaded.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Revisions<'a> {
    pub newest: &'a str,
    /// The revision serving now, if one is known (none: the controller's first).
    pub serving: Option<&'a str>,
    /// The last revision rolled back or aborted.
    pub halted: Option<&'a HaltedRevision>,
    /// The controller's `metascript.dev/promote` and `metascript.dev/abort` annotations.
    pub promote: Option<&'a str>,
    pub abort: Option<&'a str>,
    /// The controller's `metascript.dev/undo` annotation.
    pub undo: Option<&'a str>,
    /// A revision the operator itself decided to promote (its canary's last step ended).
    pub promoting: Option<&'a str>,
}

/// Whether the newest revision serves, is staged, or is held back. A controller's first revision
/// serves at once (there is nothing to compare it with); so does any revision under
/// `Immediate`, one asked for by name in `metascript.dev/promote`, and one that is already
/// serving. An abort or a rollback of exactly this revision holds it until it is promoted or
/// the controller changes again; so does an undo of it, even when it serves (then the revision
/// before it serves again, from its snapshot).
pub(crate) fn place(strategy: RolloutStrategy, revisions: Revisions) -> Placement {
    let newest = Some(revisions.newest);
    let promoted = revisions.promote == newest || revisions.promoting == newest;
    if strategy.stages() && revisions.undo == newest && !promoted {
        return Placement::Hold(HaltedRevision {
            revision: revisions.newest.to_string(),
            reason: UNDONE.to_string(),
            message: format!(
                "revision {} was undone by the {} annotation; the revision before it serves \
                 every object",
                revisions.newest,
                crate::api::UNDO_ANNOTATION
            ),
        });
    }
    if !strategy.stages() || revisions.serving.is_none() || revisions.serving == newest || promoted
    {
        return Placement::Serve;
    }
    if revisions.abort == newest {
        return Placement::Hold(HaltedRevision {
            revision: revisions.newest.to_string(),
            reason: ABORTED.to_string(),
            message: format!(
                "revision {} was aborted by the {} annotation; the serving revision serves every \
                 object",
                revisions.newest,
                crate::api::ABORT_ANNOTATION
            ),
        });
    }
    match revisions.halted {
        Some(halted) if halted.revision == revisions.newest => Placement::Hold(halted.clone()),
        _ => Placement::Stage,
    }
}

/// `status.rollout.halted.reason` of a revision asked to stop.
pub(crate) const ABORTED: &str = crate::reasons::ABORTED;
/// `status.rollout.halted.reason` of a canary whose errors passed `maxErrors`.
pub(crate) const ROLLED_BACK: &str = crate::reasons::ROLLED_BACK;
/// `status.rollout.halted.reason` of a revision undone.
pub(crate) const UNDONE: &str = crate::reasons::UNDONE;

/// What a canary does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CanaryNext {
    /// The step goes on for this long (at most), unless errors pass `maxErrors` first.
    Wait(Duration),
    /// The step with this index starts.
    Step(usize),
    /// The last step ran its course: the candidate serves everything.
    Promote,
    /// Too many of the candidate's work items fail: why.
    RollBack(String),
}

/// The canary's next move, `running` into step `step` with `failing` of the candidate's work
/// items failing now. Errors are judged first: a step never ends while it is over budget.
pub(crate) fn canary_next(
    rollout: &Rollout,
    step: usize,
    running: Duration,
    failing: u64,
) -> CanaryNext {
    if failing > u64::from(rollout.max_errors) {
        return CanaryNext::RollBack(format!(
            "{failing} work item{} failing under the candidate revision, more than maxErrors \
             ({}) allows",
            if failing == 1 { " is" } else { "s are" },
            rollout.max_errors
        ));
    }
    let Some(current) = rollout.steps.get(step) else {
        return CanaryNext::Promote;
    };
    let interval = Duration::from_secs(current.interval_seconds.into());
    if running < interval {
        return CanaryNext::Wait(interval - running);
    }
    if step + 1 < rollout.steps.len() {
        CanaryNext::Step(step + 1)
    } else {
        CanaryNext::Promote
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RolloutStrategy;
    use serde_json::json;

    fn digests(sync: &str) -> BTreeMap<String, String> {
        [("sync".to_string(), sync.to_string())].into()
    }

    #[test]
    fn a_revision_changes_with_the_spec_or_a_script_but_not_with_the_rollout_or_budget() {
        let spec = json!({"resources": [{"apiVersion": "v1", "resource": "configmaps"}]});
        let first = revision(&spec, &digests("aaa"));
        assert_eq!(first.len(), REVISION_DIGITS);
        assert_eq!(first, revision(&spec, &digests("aaa")), "stable");
        assert_ne!(first, revision(&spec, &digests("bbb")), "a script edit");
        let other = json!({"resources": [{"apiVersion": "v1", "resource": "secrets"}]});
        assert_ne!(first, revision(&other, &digests("aaa")), "a spec edit");
        let mut staged = spec.clone();
        staged["rollout"] = json!({"strategy": "Canary", "steps": [{"percent": 10}]});
        assert_eq!(
            first,
            revision(&staged, &digests("aaa")),
            "rollout settings"
        );
        staged["budget"] = json!({"writesPerMinute": 60});
        assert_eq!(first, revision(&staged, &digests("aaa")), "a budget");
    }

    fn units(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("ConfigMap.v1 ns/target-{i}"))
            .collect()
    }

    fn served(share: Share, units: &[String]) -> Vec<String> {
        units
            .iter()
            .filter(|unit| share.serves(unit))
            .cloned()
            .collect()
    }

    #[test]
    fn a_percent_step_serves_about_that_share_and_grows_into_the_next() {
        let all = units(2000);
        let step = |percent| CanaryStep {
            percent: Some(percent),
            ..CanaryStep::default()
        };
        let ten = served(Share::of_step(&step(10), []), &all);
        let fifty = served(Share::of_step(&step(50), []), &all);
        assert!((150..250).contains(&ten.len()), "{} of 2000", ten.len());
        assert!(
            (900..1100).contains(&fifty.len()),
            "{} of 2000",
            fifty.len()
        );
        assert!(
            ten.iter().all(|unit| fifty.contains(unit)),
            "10% within 50%"
        );
        assert_eq!(Share::of_step(&step(100), []), Share::Everything);
        assert_eq!(served(Share::of_step(&step(100), []), &all).len(), 2000);
    }

    #[test]
    fn a_count_step_serves_exactly_that_many_of_the_items_there_are() {
        let all = units(200);
        let positions = || all.iter().map(|unit| position(unit));
        let step = |count| CanaryStep {
            count: Some(count),
            ..CanaryStep::default()
        };
        let five = served(Share::of_step(&step(5), positions()), &all);
        let twenty = served(Share::of_step(&step(20), positions()), &all);
        assert_eq!(five.len(), 5);
        assert_eq!(twenty.len(), 20);
        assert!(five.iter().all(|unit| twenty.contains(unit)));
        assert_eq!(Share::of_step(&step(200), positions()), Share::Everything);
        assert_eq!(Share::of_step(&step(500), positions()), Share::Everything);
    }

    fn canary(max_errors: u32) -> Rollout {
        Rollout {
            strategy: RolloutStrategy::Canary,
            steps: vec![
                CanaryStep {
                    percent: Some(10),
                    count: None,
                    interval_seconds: 30,
                },
                CanaryStep {
                    percent: Some(50),
                    count: None,
                    interval_seconds: 0,
                },
            ],
            max_errors,
        }
    }

    #[test]
    fn a_step_waits_out_its_interval_then_the_next_starts_and_the_last_promotes() {
        let rollout = canary(0);
        assert_eq!(
            canary_next(&rollout, 0, Duration::from_secs(10), 0),
            CanaryNext::Wait(Duration::from_secs(20))
        );
        assert_eq!(
            canary_next(&rollout, 0, Duration::from_secs(30), 0),
            CanaryNext::Step(1)
        );
        assert_eq!(
            canary_next(&rollout, 1, Duration::ZERO, 0),
            CanaryNext::Promote
        );
        assert_eq!(
            canary_next(&rollout, 7, Duration::ZERO, 0),
            CanaryNext::Promote
        );
    }

    #[test]
    fn errors_beyond_the_budget_roll_back_even_when_the_step_is_over() {
        let next = canary_next(&canary(0), 0, Duration::from_secs(60), 1);
        let CanaryNext::RollBack(why) = next else {
            panic!("{next:?}");
        };
        assert!(why.contains("1 work item is failing"), "{why}");
        assert!(why.contains("maxErrors (0)"), "{why}");
        assert_eq!(
            canary_next(&canary(2), 0, Duration::from_secs(60), 2),
            CanaryNext::Step(1),
            "within the budget"
        );
    }

    #[test]
    fn the_newest_revision_serves_stages_or_is_held() {
        let canary = RolloutStrategy::Canary;
        let at = |serving| Revisions {
            newest: "new",
            serving,
            ..Revisions::default()
        };
        assert_eq!(
            place(canary, at(None)),
            Placement::Serve,
            "a first revision"
        );
        assert_eq!(
            place(canary, at(Some("new"))),
            Placement::Serve,
            "already serving"
        );
        assert_eq!(place(canary, at(Some("old"))), Placement::Stage);
        assert_eq!(
            place(RolloutStrategy::Immediate, at(Some("old"))),
            Placement::Serve
        );
        assert_eq!(
            place(RolloutStrategy::Shadow, at(Some("old"))),
            Placement::Stage
        );
        let promoted = Revisions {
            promote: Some("new"),
            ..at(Some("old"))
        };
        assert_eq!(place(canary, promoted), Placement::Serve);
        let stale_promotion = Revisions {
            promote: Some("older"),
            ..at(Some("old"))
        };
        assert_eq!(place(canary, stale_promotion), Placement::Stage);
        let last_step = Revisions {
            promoting: Some("new"),
            ..at(Some("old"))
        };
        assert_eq!(place(canary, last_step), Placement::Serve);
    }

    #[test]
    fn an_undone_revision_is_held_even_while_it_serves_until_promoted() {
        let undone = Revisions {
            newest: "new",
            serving: Some("new"),
            undo: Some("new"),
            ..Revisions::default()
        };
        let Placement::Hold(halted) = place(RolloutStrategy::Canary, undone) else {
            panic!("held");
        };
        assert_eq!(halted.reason, UNDONE);
        assert!(
            halted.message.contains("metascript.dev/undo"),
            "{}",
            halted.message
        );
        let restored = Revisions {
            serving: Some("old"),
            ..undone
        };
        assert!(matches!(
            place(RolloutStrategy::Canary, restored),
            Placement::Hold(_)
        ));
        let promoted = Revisions {
            promote: Some("new"),
            ..undone
        };
        assert_eq!(place(RolloutStrategy::Canary, promoted), Placement::Serve);
        let reapplied = Revisions {
            newest: "old",
            serving: Some("old"),
            ..undone
        };
        assert_eq!(
            place(RolloutStrategy::Canary, reapplied),
            Placement::Serve,
            "the spec that serves again, applied: no canary"
        );
    }

    #[test]
    fn an_aborted_or_rolled_back_revision_is_held_until_promoted_or_replaced() {
        let canary = RolloutStrategy::Canary;
        let aborted = Revisions {
            newest: "new",
            serving: Some("old"),
            abort: Some("new"),
            ..Revisions::default()
        };
        let Placement::Hold(halted) = place(canary, aborted) else {
            panic!("held");
        };
        assert_eq!(halted.reason, ABORTED);
        assert!(
            halted.message.contains("metascript.dev/abort"),
            "{}",
            halted.message
        );
        let rolled_back = HaltedRevision {
            revision: "new".into(),
            reason: ROLLED_BACK.into(),
            message: "3 work items are failing".into(),
        };
        let held = Revisions {
            newest: "new",
            serving: Some("old"),
            halted: Some(&rolled_back),
            ..Revisions::default()
        };
        assert_eq!(place(canary, held), Placement::Hold(rolled_back.clone()));
        let next_edit = Revisions {
            newest: "newer",
            ..held
        };
        assert_eq!(place(canary, next_edit), Placement::Stage);
        let forced = Revisions {
            promote: Some("new"),
            ..held
        };
        assert_eq!(place(canary, forced), Placement::Serve);
    }
}
