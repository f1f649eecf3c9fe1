//! `spec.rollout` and `status.rollout`: how a new revision of a controller (its spec or the
//! scripts it runs) reaches the objects it acts on, and where that stands.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// On a controller: promotes the candidate revision named by the value (`metascript rollout
/// promote`), whatever its strategy still waits for.
pub const PROMOTE_ANNOTATION: &str = "metascript.dev/promote";
/// On a controller: stops rolling out the candidate revision named by the value (`metascript
/// rollout abort`); the serving revision keeps serving every object.
pub const ABORT_ANNOTATION: &str = "metascript.dev/abort";
/// On a controller: serves again the revision that served before the one named by the value
/// (`metascript rollout undo`), from its snapshot; the named one is held back.
pub const UNDO_ANNOTATION: &str = "metascript.dev/undo";
/// The rollout brake: an update that changes only these skips the admission webhook and is
/// checked by the API server itself (the ValidatingAdmissionPolicy of deploy/webhook.yaml), so
/// it works while the webhook is down.
pub const BRAKE_ANNOTATIONS: [&str; 3] = [PROMOTE_ANNOTATION, ABORT_ANNOTATION, UNDO_ANNOTATION];

/// `spec.rollout`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.strategy != 'Canary' || size(self.steps) > 0",
        "message": "a Canary rollout needs at least one step"
    },
    {
        "rule": "self.strategy == 'Canary' || size(self.steps) == 0",
        "message": "steps belong to the Canary strategy"
    }
]))]
pub struct Rollout {
    /// `Immediate` (the default: a new revision serves every object at once), `Shadow` (it is
    /// evaluated on every object without writing, until promoted) or `Canary` (it serves a
    /// growing share of the objects, step by step, and rolls back on errors).
    #[serde(default)]
    pub strategy: RolloutStrategy,
    /// Canary: the shares the new revision serves, in order; after the last one it serves
    /// everything.
    #[serde(default)]
    #[schemars(length(max = 20))]
    pub steps: Vec<CanaryStep>,
    /// Canary: the most work items the new revision may be failing on at once; one more rolls
    /// it back. Default 0.
    #[serde(default)]
    #[schemars(with = "i32", range(min = 0))]
    pub max_errors: u32,
}

impl Rollout {
    /// What the CRD's validation rules refuse, by path under `spec.rollout` (for `validate`
    /// and admission, which see objects the API server has not checked).
    pub(crate) fn problems(&self) -> Vec<(String, &'static str)> {
        let mut problems = Vec::new();
        match (self.strategy, self.steps.is_empty()) {
            (RolloutStrategy::Canary, true) => problems.push((
                "spec.rollout.steps".to_string(),
                "a Canary rollout needs at least one step",
            )),
            (RolloutStrategy::Immediate | RolloutStrategy::Shadow, false) => problems.push((
                "spec.rollout.steps".to_string(),
                "steps belong to the Canary strategy",
            )),
            _ => {}
        }
        for (index, step) in self.steps.iter().enumerate() {
            let path = format!("spec.rollout.steps[{index}]");
            if step.percent.is_some() == step.count.is_some() {
                problems.push((path, "a step needs exactly one of percent or count"));
            } else if step.percent.is_some_and(|p| !(1..=100).contains(&p)) {
                problems.push((path, "percent is 1 to 100"));
            } else if step.count == Some(0) {
                problems.push((path, "count is at least 1"));
            }
        }
        problems
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum RolloutStrategy {
    #[default]
    Immediate,
    Shadow,
    Canary,
}

impl RolloutStrategy {
    /// Whether a new revision waits before it serves everything.
    pub(crate) fn stages(self) -> bool {
        self != RolloutStrategy::Immediate
    }
}

/// One step of a canary: a share of the work items (`percent` or `count`), chosen by a stable
/// hash, so a step's items are among the next step's.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.percent) != has(self.count)",
    "message": "a step needs exactly one of percent or count"
}]))]
pub struct CanaryStep {
    /// The share of the work items, 1 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 1, max = 100))]
    pub percent: Option<u32>,
    /// The number of work items (of those the controller has when the step starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>", range(min = 1))]
    pub count: Option<u32>,
    /// How long the step runs before the next one starts; default 60.
    #[serde(
        default = "default_interval",
        skip_serializing_if = "is_default_interval"
    )]
    #[schemars(with = "i32", range(min = 0))]
    pub interval_seconds: u32,
}

pub(crate) const DEFAULT_STEP_INTERVAL_SECONDS: u32 = 60;

fn default_interval() -> u32 {
    DEFAULT_STEP_INTERVAL_SECONDS
}

fn is_default_interval(seconds: &u32) -> bool {
    *seconds == DEFAULT_STEP_INTERVAL_SECONDS
}

/// `status.rollout`: the revision serving, and the one being rolled out.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The strategy of the newest revision's `spec.rollout`.
    pub strategy: RolloutStrategy,
    /// The revision serving every object outside the canary's share.
    pub serving: String,
    /// The revision being rolled out, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// Canary: the step running (from 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<i32>")]
    pub step: Option<u32>,
    /// Canary: when the step started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<String>,
    /// Canary: the work items the candidate serves now, and how many of them are failing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryCounts>,
    /// Shadow: what the candidate would do, evaluated on every object without writing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowReport>,
    /// The last revision that was rolled back or aborted, and why: it does not serve until it
    /// is promoted or the controller changes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<HaltedRevision>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryCounts {
    /// The work items the candidate revision serves.
    #[schemars(with = "i64")]
    pub serving: u64,
    /// Of those, how many failed on their last sync.
    #[schemars(with = "i64")]
    pub failing: u64,
}

/// What a shadow evaluation found, in `metascript diff`'s terms.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// When the evaluation ended (RFC 3339).
    pub evaluated_at: String,
    /// The work items evaluated.
    #[schemars(with = "i64")]
    pub evaluated: u64,
    /// Objects the candidate would create.
    #[schemars(with = "i64")]
    pub would_create: u64,
    /// Objects it would change (children, outputs, and targets' or parents' labels, status
    /// and finalizers).
    #[schemars(with = "i64")]
    pub would_update: u64,
    /// Objects it would delete.
    #[schemars(with = "i64")]
    pub would_delete: u64,
    /// Objects it would adopt or release.
    #[serde(default)]
    #[schemars(with = "i64")]
    pub would_claim: u64,
    /// Work items whose hooks failed.
    #[schemars(with = "i64")]
    pub errors: u64,
    /// A few of the changes and errors, as `metascript diff` prints them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct HaltedRevision {
    /// The revision held back.
    pub revision: String,
    /// `RolledBack` (its errors passed `maxErrors`) or `Aborted` (asked to stop).
    pub reason: String,
    /// Why, for people.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The objects of an admission manifest, `{{ … }}` (the chart's templating) blanked out.
    fn admission_objects(yaml: &str) -> Vec<serde_json::Value> {
        let untemplated: String = yaml
            .lines()
            .filter(|line| !line.trim_start().starts_with("{{"))
            .map(|line| {
                let mut line = line.to_string();
                while let (Some(open), Some(close)) = (line.find("{{"), line.find("}}")) {
                    line.replace_range(open..close + 2, "x");
                }
                line + "\n"
            })
            .collect();
        let objects: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(&untemplated).expect("the admission manifest parses");
        objects.into_iter().filter(|o| !o.is_null()).collect()
    }

    fn one_line(expression: &serde_json::Value) -> String {
        let text = expression.as_str().expect("a CEL expression");
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The webhook skips exactly the updates the brake's policy checks: its match condition is
    /// the negation of the policy's (which matches only updates), in deploy/ and in the chart
    /// alike, and both name the brake's annotations as the operator reads them. The policy
    /// comes first, so an install that cannot create it stops before the skip exists.
    #[test]
    fn the_webhook_skips_exactly_what_the_brake_policy_checks() {
        let listed = format!(
            "[{}]",
            BRAKE_ANNOTATIONS.map(|key| format!("'{key}'")).join(", ")
        );
        let mut found = Vec::new();
        for (file, yaml) in [
            ("deploy", include_str!("../../deploy/webhook.yaml")),
            (
                "chart",
                include_str!("../../charts/metascript/templates/webhook.yaml"),
            ),
        ] {
            let objects = admission_objects(yaml);
            let position = |kind: &str| {
                objects
                    .iter()
                    .position(|o| o["kind"] == kind)
                    .unwrap_or_else(|| panic!("{file}: no {kind}"))
            };
            let (policy, binding, configuration) = (
                position("ValidatingAdmissionPolicy"),
                position("ValidatingAdmissionPolicyBinding"),
                position("ValidatingWebhookConfiguration"),
            );
            assert!(policy < configuration && binding < configuration, "{file}");
            let policy = &objects[policy];
            assert_eq!(
                objects[binding]["spec"]["policyName"], policy["metadata"]["name"],
                "{file}"
            );
            assert_eq!(
                policy["spec"]["matchConstraints"]["resourceRules"][0]["operations"],
                serde_json::json!(["UPDATE"]),
                "{file}"
            );
            let conditions = policy["spec"]["matchConditions"].as_array().expect(file);
            let only_brake = conditions
                .iter()
                .find(|c| c["name"] == "only-the-rollout-brake")
                .unwrap_or_else(|| panic!("{file}: the policy's match"));
            let only_brake = one_line(&only_brake["expression"]);
            assert!(only_brake.contains(&listed), "{file}: {only_brake}");
            assert!(
                conditions
                    .iter()
                    .any(|c| one_line(&c["expression"]).starts_with(&listed)),
                "{file}: a condition that the brake changes"
            );
            let webhook = objects[configuration]["webhooks"]
                .as_array()
                .expect(file)
                .iter()
                .find(|w| w["name"] == "controllers.metascript.dev")
                .unwrap_or_else(|| panic!("{file}: the controllers' webhook"));
            let skip = webhook["matchConditions"].as_array().expect(file);
            assert_eq!(skip.len(), 1, "{file}: the webhook's only match condition");
            assert_eq!(
                one_line(&skip[0]["expression"]),
                format!("!(request.operation == 'UPDATE' && {only_brake})"),
                "{file}: the webhook's skip is the policy's match, negated"
            );
            found.push(only_brake);
        }
        assert_eq!(found[0], found[1], "deploy/ and the chart check the same");
    }

    #[test]
    fn problems_are_what_the_crd_refuses() {
        let rollout = |value| serde_json::from_value::<Rollout>(value).unwrap().problems();
        assert_eq!(rollout(serde_json::json!({})), vec![]);
        assert_eq!(
            rollout(serde_json::json!({"strategy": "Canary", "steps": [{"count": 3}]})),
            vec![]
        );
        assert_eq!(
            rollout(serde_json::json!({"strategy": "Canary"})),
            vec![(
                "spec.rollout.steps".to_string(),
                "a Canary rollout needs at least one step"
            )]
        );
        let problems = rollout(serde_json::json!({"strategy": "Shadow",
            "steps": [{"percent": 10, "count": 2}, {"percent": 0}]}));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[1].0, "spec.rollout.steps[0]");
        assert_eq!(problems[2].1, "percent is 1 to 100");
    }

    #[test]
    fn a_step_defaults_to_a_minute_and_the_strategy_to_immediate() {
        let rollout: Rollout =
            serde_json::from_value(serde_json::json!({"steps": [{"percent": 10}]})).unwrap();
        assert_eq!(rollout.strategy, RolloutStrategy::Immediate);
        assert_eq!(rollout.steps[0].interval_seconds, 60);
        assert!(!rollout.strategy.stages());
        assert!(RolloutStrategy::Canary.stages() && RolloutStrategy::Shadow.stages());
        assert_eq!(
            serde_json::to_value(&rollout.steps[0]).unwrap(),
            serde_json::json!({"percent": 10})
        );
    }
}
