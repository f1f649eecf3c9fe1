//! Which existing objects a parent may make its children. A child the planner thinks missing
//! is applied with server-side apply, which merges into whatever already has that name; a
//! parent that took over a hand-made Namespace that way would delete it, and all it holds,
//! when the parent goes. So before anything is written, every child the plan applies is
//! looked up in the store, and one the parent does not control is taken only as its rule's
//! `adopt` policy allows.
//!
//! The operator's caches hold every object of each child type, so the lookup is a map read.
//! A child the cache does not hold may still exist: made in the instant before the sync (a
//! Namespace and its Team applied together), its event not yet arrived. Those are marked
//! [`Plan::unseen`] and the writer reads each from the API server before creating it.

use super::SyncError;
use super::children::ChildType;
use super::writes::{ClaimChange, Plan};
use crate::api::AdoptPolicy;
use crate::object::{self, ObjectKey};
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::BTreeSet;

/// What a parent's children carry and how they are named, to tell its own objects from others.
pub(crate) struct Claimant<'a> {
    /// The parent (or decorator target) the children belong to.
    pub owner: &'a Value,
    /// The child types, with their rules' policies.
    pub types: &'a [ChildType],
    /// Labels every child of this parent carries (the controller's name, a map key): an
    /// orphan with all of them was made by this controller and may be adopted under `Orphans`.
    /// Empty when the kind claims by a selector of its own (composite), which adopts matching
    /// orphans before planning ([`Plan::claims`]).
    pub labels: &'a [(&'a str, &'a str)],
}

/// A child the plan would apply over an object the parent may not take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{child} already exists and is not this parent's child: {why}. Nothing was written")]
pub struct TakeoverRefused {
    pub child: ObjectKey,
    pub why: String,
}

impl Claimant<'_> {
    /// [`Claimant::check`], as the sync error of `controller`; marks the children the store
    /// does not hold as [`Plan::unseen`], for the writer to make sure they are still missing.
    pub(crate) fn admit(
        &self,
        controller: &str,
        plan: &mut Plan,
        store: &dyn ObjectStore,
    ) -> Result<(), SyncError> {
        plan.unseen = self
            .check(plan, store)
            .map_err(|refusal| SyncError::Takeover {
                controller: controller.to_string(),
                refusal: Box::new(refusal),
            })?;
        Ok(())
    }

    /// Refuses the plan when one of its applies would take over an object the parent does not
    /// control and its rule does not let it adopt. Objects the plan adopts by claim are its own.
    /// Returns the children the store does not hold.
    pub(crate) fn check(
        &self,
        plan: &Plan,
        store: &dyn ObjectStore,
    ) -> Result<BTreeSet<ObjectKey>, TakeoverRefused> {
        let mut unseen = BTreeSet::new();
        let adopted: BTreeSet<&ObjectKey> = plan
            .claims
            .iter()
            .filter(|claim| matches!(claim.change, ClaimChange::Adopt { .. }))
            .map(|claim| &claim.key)
            .collect();
        for child in &plan.apply {
            let Some(child_type) = self.types.iter().find(|t| t.resource.describes(child)) else {
                // Not a child type (a composite's ControllerRevision): named by the operator.
                continue;
            };
            let key = ObjectKey::of(child);
            if adopted.contains(&key) {
                continue;
            }
            let existing = store.get(
                &child_type.resource,
                object::namespace(child),
                object::name(child),
            );
            match existing {
                None => {
                    unseen.insert(key);
                }
                Some(existing) => {
                    if let Some(why) = self.refusal(&existing, child_type.rule.adopt_policy()) {
                        return Err(TakeoverRefused { child: key, why });
                    }
                }
            }
        }
        Ok(unseen)
    }

    /// Why `existing` may not become the parent's child, if it may not.
    fn refusal(&self, existing: &Value, policy: AdoptPolicy) -> Option<String> {
        if let Some(reference) = object::controller_ref(existing) {
            if !object::is_controlled_by(existing, self.owner) {
                let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("?");
                let name = reference.get("name").and_then(Value::as_str).unwrap_or("?");
                return Some(format!(
                    "it is controlled by {kind} {name:?}, and an object has one controller; \
                     return another name, or delete that object"
                ));
            }
            // Controlled by this parent, but carrying another child's marks: another
            // decorator's attachment of the same target, another input's output.
            return self
                .labels
                .iter()
                .find_map(|(key, value)| {
                    object::label(existing, key)
                        .filter(|found| found != value)
                        .map(|found| (key, value, found))
                })
                .map(|(key, value, found)| {
                    format!(
                        "this parent already has it as another child (label {key}={found:?}, \
                         this one would be {value:?}); return another name"
                    )
                });
        }
        let marked = !self.labels.is_empty()
            && self
                .labels
                .iter()
                .all(|(key, value)| object::label(existing, key) == Some(value));
        match policy {
            AdoptPolicy::Always => None,
            AdoptPolicy::Orphans if marked => None,
            AdoptPolicy::Orphans => Some(format!(
                "it has no controller and was not made by this controller ({}), so `adopt: \
                 Orphans` (the default) leaves it alone: deleting the parent would delete it. \
                 Delete or rename it, or set `adopt: Always` on the rule to take it over",
                self.missing_marks()
            )),
            AdoptPolicy::Never => Some(
                "it has no controller, and the rule says `adopt: Never`: delete or rename it, \
                 or change the rule's `adopt`"
                    .to_string(),
            ),
        }
    }

    /// The labels an adoptable orphan carries, as a user would read them.
    fn missing_marks(&self) -> String {
        if self.labels.is_empty() {
            return "the parent's selector does not match it".to_string();
        }
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        format!("it lacks the label {}", labels.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ChildRule;
    use crate::plan::{Claim, ClaimChange};
    use crate::resources::{ResourceType, TypeInfo};
    use crate::store::MemoryStore;
    use serde_json::json;

    fn namespaces(adopt: Option<AdoptPolicy>) -> Vec<ChildType> {
        vec![ChildType {
            rule: ChildRule {
                api_version: "v1".into(),
                resource: "namespaces".into(),
                adopt,
                ..ChildRule::default()
            },
            resource: ResourceType::from(TypeInfo {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                plural: "namespaces".into(),
                namespaced: false,
                has_status: true,
            }),
        }]
    }

    fn parent() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Team", "metadata": {"name": "a", "uid": "u-a"}})
    }

    fn namespace(labels: Value, controller_uid: Option<&str>) -> Value {
        let mut ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "team-a", "labels": labels}});
        if let Some(uid) = controller_uid {
            ns["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1",
                "kind": "Team", "name": "other", "uid": uid, "controller": true}]);
        }
        ns
    }

    fn applying_namespace() -> Plan {
        Plan {
            apply: vec![namespace(json!({"team": "a"}), Some("u-a"))],
            ..Plan::default()
        }
    }

    fn check(
        policy: Option<AdoptPolicy>,
        existing: Option<Value>,
    ) -> Result<BTreeSet<ObjectKey>, TakeoverRefused> {
        let types = namespaces(policy);
        let parent = parent();
        let claimant = Claimant {
            owner: &parent,
            types: &types,
            labels: &[("metascript.dev/controller", "teams")],
        };
        claimant.check(&applying_namespace(), &MemoryStore::new(existing))
    }

    #[test]
    fn a_missing_child_is_created() {
        let unseen = check(None, None).expect("created");
        assert_eq!(
            unseen.into_iter().map(|key| key.name).collect::<Vec<_>>(),
            ["team-a"],
            "marked for the writer to make sure it is still missing"
        );
    }

    #[test]
    fn a_hand_made_object_is_not_taken_over_by_default() {
        let error = check(None, Some(namespace(json!({}), None))).unwrap_err();
        assert_eq!(error.child.name, "team-a");
        assert!(error.why.contains("adopt: Always"), "{error}");
        assert!(
            error
                .why
                .contains("lacks the label metascript.dev/controller=teams"),
            "{error}"
        );
        assert!(
            error.to_string().ends_with("Nothing was written"),
            "{error}"
        );
    }

    #[test]
    fn an_orphan_this_controller_made_is_adopted_unless_never() {
        let orphan = namespace(json!({"metascript.dev/controller": "teams"}), None);
        assert_eq!(check(None, Some(orphan.clone())), Ok(BTreeSet::new()));
        let error = check(Some(AdoptPolicy::Never), Some(orphan)).unwrap_err();
        assert!(error.why.contains("adopt: Never"), "{error}");
    }

    #[test]
    fn always_takes_any_object_without_a_controller() {
        assert_eq!(
            check(Some(AdoptPolicy::Always), Some(namespace(json!({}), None))),
            Ok(BTreeSet::new())
        );
    }

    #[test]
    fn another_controllers_object_is_refused_under_every_policy() {
        for policy in [None, Some(AdoptPolicy::Always)] {
            let error = check(policy, Some(namespace(json!({}), Some("u-other")))).unwrap_err();
            assert!(
                error.why.contains("controlled by Team \"other\""),
                "{error}"
            );
        }
    }

    #[test]
    fn the_parents_own_child_is_updated_unless_it_is_another_childs() {
        let own = namespace(json!({"metascript.dev/controller": "teams"}), Some("u-a"));
        assert_eq!(check(None, Some(own)), Ok(BTreeSet::new()));
        let unlabelled = namespace(json!({}), Some("u-a"));
        assert_eq!(check(None, Some(unlabelled)), Ok(BTreeSet::new()));
        let sibling = namespace(json!({"metascript.dev/controller": "other"}), Some("u-a"));
        let error = check(Some(AdoptPolicy::Always), Some(sibling)).unwrap_err();
        assert!(error.why.contains("another child"), "{error}");
    }

    #[test]
    fn an_orphan_the_plan_claims_is_the_parents() {
        let types = namespaces(None);
        let parent = parent();
        let claimant = Claimant {
            owner: &parent,
            types: &types,
            labels: &[],
        };
        let mut plan = applying_namespace();
        let store = MemoryStore::new([namespace(json!({"team": "a"}), None)]);
        let error = claimant.check(&plan, &store).unwrap_err();
        assert!(error.why.contains("selector does not match"), "{error}");
        plan.claims.push(Claim {
            key: ObjectKey::of(&plan.apply[0]),
            resource_version: "1".into(),
            change: ClaimChange::Adopt {
                reference: json!({}),
                first: true,
            },
        });
        assert_eq!(claimant.check(&plan, &store), Ok(BTreeSet::new()));
    }
}
