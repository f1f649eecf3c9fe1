//! The composite planning core: claims, selectors, requests, plans, status and rolling updates,
//! without any cluster.

use super::api::CompositeController;
use super::plan::{Composite, Observed, Rollout};
use super::rolling::{self, REVISION_LABEL, Revision};
use crate::api::HookVersion;
use crate::kinds::one_object::OneObject;
use crate::object::{self, ObjectKey};
use crate::plan::lifecycle::Phase;
use crate::plan::{ClaimChange, FinalizerChange, Plan, StatusChange};
use crate::resources::{ResourceType, StaticResolver, TypeInfo};
use crate::selector::LabelSelector;
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn resolver(parent_has_status: bool) -> StaticResolver {
    let mut resolver = StaticResolver::with_builtins();
    resolver.insert(ResourceType::from(TypeInfo {
        api_version: "ctl.example.com/v1".into(),
        kind: "CatSet".into(),
        plural: "catsets".into(),
        namespaced: true,
        has_status: parent_has_status,
    }));
    resolver
}

fn composite_with(spec: Value, parent_has_status: bool) -> Composite {
    let mut controller = json!({
        "apiVersion": "metascript.dev/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": "catset"},
        "spec": {
            "parentResource": {"apiVersion": "ctl.example.com/v1", "resource": "catsets"},
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{}"}}}
        }
    });
    for (key, value) in spec.as_object().unwrap() {
        controller["spec"][key] = value.clone();
    }
    let controller: CompositeController = serde_json::from_value(controller).unwrap();
    Composite::new(&controller, &resolver(parent_has_status)).unwrap()
}

/// Pods roll out (`method`, checking Ready), ConfigMaps are updated in place.
fn composite(method: &str) -> Composite {
    composite_with(
        json!({
            "parentResource": {
                "apiVersion": "ctl.example.com/v1", "resource": "catsets",
                "revisionHistory": {"fieldPaths": ["spec.template"]}
            },
            "childResources": [
                {"apiVersion": "v1", "resource": "pods", "updateStrategy": {
                    "method": method,
                    "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}
                }},
                {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}
            ],
            "hooks": {
                "sync": {"script": {"language": "rhai", "inline": "#{}"}},
                "finalize": {"script": {"language": "rhai", "inline": "#{}"}}
            }
        }),
        true,
    )
}

fn parent() -> Value {
    json!({
        "apiVersion": "ctl.example.com/v1", "kind": "CatSet",
        "metadata": {"name": "web", "namespace": "prod", "uid": "uid-web", "generation": 3,
                     "finalizers": ["metascript.dev/composite-catset"]},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"image": "v1"}},
        "status": {"ready": 2, "observedGeneration": 3}
    })
}

fn pod(name: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": {"app": "web"}}, "spec": {"image": image}})
}

/// What the cluster holds once `planned` is applied by `parent`, Ready or not.
fn as_observed(planned: &Value, ready: bool) -> Value {
    let mut observed = planned.clone();
    let name = object::name(planned).to_string();
    observed["metadata"]["uid"] = json!(format!("uid-{name}"));
    observed["metadata"]["resourceVersion"] = json!("7");
    observed["metadata"]["namespace"] = json!("prod");
    observed["metadata"]["ownerReferences"] = json!([object::owner_reference(&parent())]);
    observed["status"] =
        json!({"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]});
    observed
}

fn selector() -> LabelSelector {
    serde_json::from_value(json!({"matchLabels": {"app": "web"}})).unwrap()
}

fn observed<'a>(parent: &'a Value, children: &[&'a Value]) -> Observed<'a> {
    Observed {
        parent,
        children: children.to_vec(),
        claims: Vec::new(),
        related: json!({}),
    }
}

fn plan(
    composite: &Composite,
    phase: Phase,
    observed: &Observed,
    response: Value,
    rollout: Option<&Rollout>,
) -> Plan {
    composite
        .plan(phase, observed, &selector(), &response, rollout)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn names(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| object::name(o).to_string())
        .collect()
}

#[test]
fn children_are_claimed_adopted_and_released_by_selector_and_controller_reference() {
    let composite = composite("RollingRecreate");
    let parent = parent();
    let owned = as_observed(&pod("web-0", "v1"), true);
    let mut relabelled = as_observed(&pod("web-1", "v1"), true);
    relabelled["metadata"]["labels"] = json!({"app": "other"});
    let mut orphan = pod("stray", "v1");
    orphan["metadata"]["resourceVersion"] = json!("4");
    let mut unrelated_orphan = pod("lonely", "v1");
    unrelated_orphan["metadata"]["labels"] = json!({"app": "db"});
    let mut someone_elses = pod("theirs", "v1");
    someone_elses["metadata"]["ownerReferences"] = json!([
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs", "controller": true}
    ]);
    let candidates = [
        &owned,
        &relabelled,
        &orphan,
        &unrelated_orphan,
        &someone_elses,
    ];
    let (claimed, claims) = composite.claim(&parent, &selector(), candidates);
    assert_eq!(
        claimed.iter().map(|c| object::name(c)).collect::<Vec<_>>(),
        ["web-0", "stray"]
    );
    assert_eq!(claims.len(), 2, "{claims:?}");
    assert_eq!(claims[0].key.name, "web-1");
    assert_eq!(claims[0].change, ClaimChange::Release { index: 0 });
    assert_eq!(claims[1].key.name, "stray");
    assert_eq!(claims[1].resource_version, "4");
    match &claims[1].change {
        ClaimChange::Adopt { reference, first } => {
            assert!(*first, "the orphan had no ownerReferences");
            assert_eq!(reference["uid"], "uid-web");
            assert_eq!(reference["controller"], true);
        }
        other => panic!("{other:?}"),
    }
    // A parent being deleted neither adopts nor releases; it keeps what it still matches.
    let mut deleting = parent.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let (claimed, claims) = composite.claim(&deleting, &selector(), candidates);
    assert_eq!(claimed.len(), 1);
    assert!(claims.is_empty(), "{claims:?}");
}

#[test]
fn a_rule_that_adopts_never_claims_no_orphan() {
    let composite = composite_with(
        json!({"childResources": [
            {"apiVersion": "v1", "resource": "pods", "adopt": "Never"}
        ]}),
        true,
    );
    let orphan = pod("stray", "v1");
    let owned = as_observed(&pod("web-0", "v1"), true);
    let (claimed, claims) = composite.claim(&parent(), &selector(), [&orphan, &owned]);
    assert_eq!(
        claimed.iter().map(|c| object::name(c)).collect::<Vec<_>>(),
        ["web-0"],
        "its own child stays, the matching orphan is not taken"
    );
    assert!(claims.is_empty(), "{claims:?}");
}

#[test]
fn a_parent_must_select_something_unless_the_selector_is_generated() {
    let composite = composite("RollingRecreate");
    let mut parent = parent();
    for missing in [Value::Null, json!({}), json!({"matchLabels": {}})] {
        parent["spec"]["selector"] = missing.clone();
        let error = composite.selector(&parent).expect_err("refused");
        assert!(error.to_string().contains("generateSelector"), "{error}");
    }
    parent["spec"]["selector"] = json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]});
    assert!(composite.selector(&parent).is_err());

    let generated = composite_with(
        json!({"generateSelector": true, "childResources": [{"apiVersion": "v1", "resource": "pods"}]}),
        true,
    );
    let selector = generated.selector(&parent).expect("generated");
    assert_eq!(
        selector.match_labels,
        BTreeMap::from([("controller-uid".to_string(), "uid-web".to_string())])
    );
    // Children get the label, so they are claimed by it.
    let desired = generated
        .desired(
            &parent,
            &selector,
            &json!({"children": [pod("web-0", "v1")]}),
        )
        .unwrap();
    assert_eq!(
        desired[0].0["metadata"]["labels"]["controller-uid"],
        "uid-web"
    );
    assert_eq!(desired[0].0["metadata"]["namespace"], "prod");
    assert_eq!(
        desired[0].0["metadata"]["ownerReferences"][0]["uid"],
        "uid-web"
    );
}

#[test]
fn a_child_the_selector_would_not_claim_is_refused_with_its_path() {
    let composite = composite("RollingRecreate");
    let mut stray = pod("web-1", "v1");
    stray["metadata"]["labels"] = json!({"app": "typo"});
    let error = composite
        .desired(
            &parent(),
            &selector(),
            &json!({"children": [pod("web-0", "v1"), stray]}),
        )
        .expect_err("refused");
    assert_eq!(error.path, "children[1].metadata.labels");
    let error = composite
        .desired(
            &parent(),
            &selector(),
            &json!({"children": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"app": "web"}}}]}),
        )
        .expect_err("undeclared type");
    assert_eq!(error.path, "children[0]");
}

#[test]
fn request_has_every_child_type_related_and_finalizing() {
    let composite = composite("RollingRecreate");
    let parent = parent();
    let web0 = as_observed(&pod("web-0", "v1"), true);
    let observed = observed(&parent, &[&web0]);
    let request = composite
        .request(Phase::Finalize, &parent, &observed, HookVersion::V1)
        .to_value();
    assert_eq!(
        request["children"]["Pod.v1"]["web-0"]["metadata"]["uid"],
        "uid-web-0"
    );
    assert_eq!(request["children"]["ConfigMap.v1"], json!({}));
    assert_eq!(request["related"], json!({}));
    assert_eq!(request["finalizing"], true);
    assert_eq!(request["controller"]["kind"], "CompositeController");
}

#[test]
fn status_is_replaced_with_observed_generation_and_not_rewritten_when_equal() {
    let composite = composite_with(
        json!({"childResources": [{"apiVersion": "v1", "resource": "configmaps"}]}),
        true,
    );
    let parent = parent();
    let same = plan(
        &composite,
        Phase::Sync,
        &observed(&parent, &[]),
        json!({"status": {"ready": 2.0}}),
        None,
    );
    assert_eq!(same.status, None, "equal status (2 == 2.0) is not written");
    let changed = plan(
        &composite,
        Phase::Sync,
        &observed(&parent, &[]),
        json!({"status": {"ready": 1}}),
        None,
    );
    assert_eq!(
        changed.status,
        Some(StatusChange::Replace(
            json!({"ready": 1, "observedGeneration": 3})
        ))
    );
    // Null is an empty status (Metacontroller): the old fields go.
    let emptied = plan(
        &composite,
        Phase::Sync,
        &observed(&parent, &[]),
        json!({}),
        None,
    );
    assert_eq!(
        emptied.status,
        Some(StatusChange::Replace(json!({"observedGeneration": 3})))
    );
    let error = composite
        .plan(
            Phase::Sync,
            &observed(&parent, &[]),
            &selector(),
            &json!({"status": [1]}),
            None,
        )
        .unwrap_err();
    assert_eq!(error.path, "status");
}

/// Metacontroller #68: a parent without a status subresource.
#[test]
fn status_through_the_main_resource_records_the_generation_its_write_produces() {
    let composite = composite_with(
        json!({"childResources": [{"apiVersion": "v1", "resource": "configmaps"}]}),
        false,
    );
    let mut parent = parent();
    parent["metadata"]["finalizers"] = json!([]);
    let first = plan(
        &composite,
        Phase::Sync,
        &observed(&parent, &[]),
        json!({"status": {"ready": 1}}),
        None,
    );
    let Some(StatusChange::Replace(written)) = first.status else {
        panic!("status written")
    };
    assert_eq!(
        written["observedGeneration"], 4,
        "generation 3, moved by the write"
    );
    // The server bumps the generation with the write; the next sync writes nothing.
    parent["status"] = written;
    parent["metadata"]["generation"] = json!(4);
    let next = plan(
        &composite,
        Phase::Sync,
        &observed(&parent, &[]),
        json!({"status": {"ready": 1}}),
        None,
    );
    assert!(next.is_noop(), "{next:?}");
}

#[test]
fn finalize_removes_the_finalizer_once_finalized_and_never_rolls() {
    let composite = composite("RollingRecreate");
    let mut parent = parent();
    parent["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(composite.phase(&parent), Phase::Finalize);
    let old = as_observed(&rolling::stamped(pod("web-0", "v0"), "old"), true);
    let observed = observed(&parent, &[&old]);
    let waiting = plan(
        &composite,
        Phase::Finalize,
        &observed,
        json!({"children": [pod("web-0", "v1")], "finalized": false}),
        None,
    );
    assert!(
        waiting.apply.is_empty() && waiting.delete.is_empty(),
        "{waiting:?}"
    );
    assert_eq!(waiting.finalizer, None);
    let done = plan(
        &composite,
        Phase::Finalize,
        &observed,
        json!({"children": [], "finalized": true}),
        None,
    );
    assert_eq!(names_of_deleted(&done), ["web-0"]);
    assert_eq!(
        done.finalizer,
        Some(FinalizerChange::Remove(
            "metascript.dev/composite-catset".into()
        ))
    );
}

fn names_of_deleted(plan: &Plan) -> Vec<String> {
    plan.delete.iter().map(|d| d.key.name.clone()).collect()
}

#[test]
fn revisions_follow_field_paths_and_the_hook() {
    let parent = parent();
    let paths = vec!["spec.template".to_string()];
    let latest = Revision::latest(&parent, &paths, "hook-1");
    assert_eq!(latest.patch, json!({"spec": {"template": {"image": "v1"}}}));
    assert_eq!(latest.name, format!("web-{}", latest.hash));
    let mut scaled = parent.clone();
    scaled["spec"]["replicas"] = json!(5);
    assert_eq!(Revision::latest(&scaled, &paths, "hook-1"), latest);
    let mut retemplated = parent.clone();
    retemplated["spec"]["template"]["image"] = json!("v2");
    assert_ne!(
        Revision::latest(&retemplated, &paths, "hook-1").hash,
        latest.hash
    );
    assert_ne!(
        Revision::latest(&parent, &paths, "hook-2").hash,
        latest.hash
    );

    // The recorded revision reads back, and gives the parent as it was (replicas as now).
    let recorded = latest.object(&parent, 1);
    assert_eq!(recorded["metadata"]["namespace"], "prod");
    assert_eq!(recorded["metadata"]["ownerReferences"][0]["uid"], "uid-web");
    assert_eq!(Revision::of_object(&recorded), Some(latest.clone()));
    let then = latest.parent(&retemplated, &paths);
    assert_eq!(then["spec"]["template"]["image"], "v1");
    let mut retemplated_and_scaled = retemplated.clone();
    retemplated_and_scaled["spec"]["replicas"] = json!(7);
    assert_eq!(
        latest.parent(&retemplated_and_scaled, &paths)["spec"]["replicas"],
        7
    );
}

/// A parent at template v2 whose Pods `web-1`, `web-0` (the hook's order) are on the v1
/// revision, Ready.
struct Rolling {
    composite: Composite,
    parent: Value,
    old: Revision,
    latest: Revision,
    revisions: Vec<Value>,
}

impl Rolling {
    fn new(method: &str) -> Rolling {
        let composite = composite(method);
        let paths = composite.field_paths.clone();
        let old = Revision::latest(&parent(), &paths, "hook");
        let mut parent = parent();
        parent["spec"]["template"]["image"] = json!("v2");
        let latest = Revision::latest(&parent, &paths, "hook");
        let revisions = vec![old.object(&parent, 1)];
        Rolling {
            composite,
            parent,
            old,
            latest,
            revisions,
        }
    }

    fn on(&self, revision: &Revision, name: &str, image: &str, ready: bool) -> Value {
        let desired = self
            .composite
            .desired(
                &self.parent,
                &selector(),
                &json!({"children": [pod(name, image)]}),
            )
            .unwrap()
            .remove(0)
            .0;
        as_observed(&rolling::stamped(desired, &revision.hash), ready)
    }

    fn rollout(&self, old_desired: &[Value]) -> Rollout<'_> {
        let mut old = BTreeMap::new();
        let desired = self
            .composite
            .desired(&self.parent, &selector(), &json!({"children": old_desired}))
            .unwrap()
            .into_iter()
            .map(|(child, _)| {
                let child = rolling::stamped(child, &self.old.hash);
                (ObjectKey::of(&child), child)
            })
            .collect();
        old.insert(self.old.hash.clone(), desired);
        Rollout {
            latest: self.latest.clone(),
            revisions: self.revisions.iter().collect(),
            old,
        }
    }

    fn step(&self, children: &[&Value], response: Value, old_desired: &[Value]) -> Plan {
        let rollout = self.rollout(old_desired);
        plan(
            &self.composite,
            Phase::Sync,
            &observed(&self.parent, children),
            response,
            Some(&rollout),
        )
    }
}

fn updated(plan: &Plan) -> Value {
    let Some(StatusChange::Replace(status)) = &plan.status else {
        panic!("no status in {plan:?}")
    };
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Updated")
        .cloned()
        .unwrap()
}

#[test]
fn a_rolling_update_moves_one_child_at_a_time_in_the_hooks_order() {
    let rolling = Rolling::new("RollingInPlace");
    let web0 = rolling.on(&rolling.old, "web-0", "v1", true);
    let web1 = rolling.on(&rolling.old, "web-1", "v1", true);
    let response = json!({"children": [pod("web-1", "v2"), pod("web-0", "v2")]});
    let olds = [pod("web-1", "v1"), pod("web-0", "v1")];
    let first = rolling.step(&[&web0, &web1], response.clone(), &olds);
    // The new revision is recorded first, then web-1 (listed first) moves; web-0 stays.
    assert_eq!(
        names(&first.apply),
        [rolling.latest.name.clone(), "web-1".into()]
    );
    assert_eq!(first.apply[0]["revision"], 2);
    assert_eq!(first.apply[1]["spec"]["image"], "v2");
    assert_eq!(
        first.apply[1]["metadata"]["labels"][REVISION_LABEL],
        rolling.latest.hash.as_str()
    );
    assert!(first.delete.is_empty(), "{first:?}");
    let condition = updated(&first);
    assert_eq!(condition["status"], "False");
    assert_eq!(condition["reason"], "RolloutProgressing");
    assert_eq!(condition["message"], "updating Pod web-1");

    // web-1 is updated but not Ready: the rollout waits, and says for what.
    let mut revisions = rolling.revisions.clone();
    revisions.push(rolling.latest.object(&rolling.parent, 2));
    let rolling = Rolling {
        revisions,
        ..rolling
    };
    let web1_new = rolling.on(&rolling.latest, "web-1", "v2", false);
    let waiting = rolling.step(&[&web0, &web1_new], response.clone(), &olds);
    assert!(waiting.apply.is_empty(), "{waiting:?}");
    let condition = updated(&waiting);
    assert_eq!(condition["reason"], "RolloutWaiting");
    assert_eq!(
        condition["message"],
        "Pod web-1 failed status check: \"Ready\" condition status is \"False\" (want \"True\")"
    );

    // Ready: web-0 moves.
    let web1_ready = rolling.on(&rolling.latest, "web-1", "v2", true);
    let next = rolling.step(&[&web0, &web1_ready], response.clone(), &olds);
    assert_eq!(names(&next.apply), ["web-0"]);

    // Everything on the latest revision: Updated, and the old revision goes.
    let web0_new = rolling.on(&rolling.latest, "web-0", "v2", true);
    let done = rolling.step(&[&web0_new, &web1_ready], response, &[]);
    assert!(done.apply.is_empty(), "{done:?}");
    assert_eq!(
        names_of_deleted(&done),
        std::slice::from_ref(&rolling.old.name)
    );
    let condition = updated(&done);
    assert_eq!(condition["status"], "True");
    assert_eq!(condition["reason"], "OnLatestRevision");
}

#[test]
fn rolling_recreate_deletes_the_child_it_moves_and_waits_for_it() {
    let rolling = Rolling::new("RollingRecreate");
    let web0 = rolling.on(&rolling.old, "web-0", "v1", true);
    let web1 = rolling.on(&rolling.old, "web-1", "v1", true);
    let response = json!({"children": [pod("web-1", "v2"), pod("web-0", "v2")]});
    let olds = [pod("web-1", "v1"), pod("web-0", "v1")];
    let first = rolling.step(&[&web0, &web1], response.clone(), &olds);
    assert_eq!(names_of_deleted(&first), ["web-1"]);
    assert_eq!(first.delete[0].reason, "recreate");
    // Being deleted, then gone: it is created at the latest revision, and nothing else moves.
    let mut terminating = web1.clone();
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let deleting = rolling.step(&[&web0, &terminating], response.clone(), &olds);
    assert!(
        deleting.apply.len() <= 1 && deleting.delete.is_empty(),
        "{deleting:?}"
    );
    assert_eq!(updated(&deleting)["message"], "Pod web-1 is being deleted");
    let gone = rolling.step(&[&web0], response, &olds);
    let created: Vec<&str> = gone
        .apply
        .iter()
        .filter(|o| object::kind(o) == "Pod")
        .map(object::name)
        .collect();
    assert_eq!(created, ["web-1"]);
    assert_eq!(updated(&gone)["message"], "Pod web-1 does not exist yet");
}

#[test]
fn a_child_whose_content_would_not_change_moves_at_once_in_place() {
    let rolling = Rolling::new("RollingRecreate");
    // The hook returns the same Pods for v2 (it ignores the template): only the label moves.
    let web0 = rolling.on(&rolling.old, "web-0", "v1", true);
    let web1 = rolling.on(&rolling.old, "web-1", "v1", true);
    let plan = rolling.step(
        &[&web0, &web1],
        json!({"children": [pod("web-1", "v1"), pod("web-0", "v1")]}),
        &[pod("web-1", "v1"), pod("web-0", "v1")],
    );
    assert!(
        plan.delete
            .iter()
            .all(|d| d.key.kind == "ControllerRevision"),
        "never recreated for a label: {plan:?}"
    );
    let relabelled: Vec<&Value> = plan
        .apply
        .iter()
        .filter(|o| object::kind(o) == "Pod")
        .collect();
    assert_eq!(relabelled.len(), 2);
    for pod in relabelled {
        assert_eq!(
            pod["metadata"]["labels"][REVISION_LABEL],
            rolling.latest.hash.as_str()
        );
    }
}

#[test]
fn old_children_follow_their_revision_and_unknown_ones_are_left_alone() {
    let rolling = Rolling::new("RollingInPlace");
    // web-1 moves first; web-0 is on the old revision, whose hook now asks for an extra field
    // outside fieldPaths: applied to it at once, still at the old revision.
    let web0 = rolling.on(&rolling.old, "web-0", "v1", true);
    let web1 = rolling.on(&rolling.latest, "web-1", "v2", false);
    let mut old_web0 = pod("web-0", "v1");
    old_web0["spec"]["priority"] = json!(5);
    let plan = rolling.step(
        &[&web0, &web1],
        json!({"children": [pod("web-1", "v2"), pod("web-0", "v2")]}),
        &[old_web0],
    );
    assert_eq!(
        names(&plan.apply),
        [rolling.latest.name.clone(), "web-0".into()]
    );
    assert_eq!(plan.apply[1]["spec"]["image"], "v1");
    assert_eq!(plan.apply[1]["spec"]["priority"], 5);
    assert_eq!(
        plan.apply[1]["metadata"]["labels"][REVISION_LABEL],
        rolling.old.hash.as_str()
    );
    // A child of a revision that cannot be computed (no ControllerRevision, another hook):
    // kept exactly as it is, and it keeps nothing else alive.
    let mut stranger = rolling.on(&rolling.old, "web-0", "v0", true);
    stranger["metadata"]["labels"][REVISION_LABEL] = json!("gone");
    let plan = rolling.step(
        &[&stranger, &web1],
        json!({"children": [pod("web-1", "v2"), pod("web-0", "v2")]}),
        &[],
    );
    let pods: Vec<&Value> = plan
        .apply
        .iter()
        .filter(|o| object::kind(o) == "Pod")
        .collect();
    assert!(pods.is_empty(), "{plan:?}");
    assert_eq!(
        names_of_deleted(&plan),
        std::slice::from_ref(&rolling.old.name)
    );
}

#[test]
fn status_checks_say_what_is_missing() {
    let checks: Vec<super::api::StatusConditionCheck> = serde_json::from_value(json!([
        {"type": "Ready", "status": "True"},
        {"type": "Synced", "reason": "Done"}
    ]))
    .unwrap();
    let child = |conditions: Value| json!({"status": {"conditions": conditions}});
    assert_eq!(
        rolling::status_check(&checks, &child(json!([]))),
        Err("required condition type missing: \"Ready\"".into())
    );
    assert_eq!(
        rolling::status_check(
            &checks,
            &child(
                json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True", "reason": "Busy"}])
            )
        ),
        Err("\"Synced\" condition reason is \"Busy\" (want \"Done\")".into())
    );
    assert!(
        rolling::status_check(
            &checks,
            &child(
                json!([{"type": "Ready", "status": "True"}, {"type": "Synced", "reason": "Done"}])
            )
        )
        .is_ok()
    );
    assert!(
        rolling::status_check(&[], &json!({})).is_ok(),
        "no checks: nothing to wait for"
    );
}

#[test]
fn rolling_in_place_waits_for_a_child_to_observe_its_spec() {
    let rolling = Rolling::new("RollingInPlace");
    let web0 = rolling.on(&rolling.old, "web-0", "v1", true);
    let mut web1 = rolling.on(&rolling.latest, "web-1", "v2", true);
    web1["metadata"]["generation"] = json!(2);
    web1["status"]["observedGeneration"] = json!(1);
    let plan = rolling.step(
        &[&web0, &web1],
        json!({"children": [pod("web-1", "v2"), pod("web-0", "v2")]}),
        &[pod("web-0", "v1")],
    );
    assert_eq!(
        updated(&plan)["message"],
        "Pod web-1 has not observed its latest spec yet"
    );
}

#[test]
fn a_cluster_scoped_parent_cannot_roll() {
    let mut resolver = resolver(true);
    resolver.insert(ResourceType::from(TypeInfo {
        api_version: "ctl.example.com/v1".into(),
        kind: "CatSet".into(),
        plural: "catsets".into(),
        namespaced: false,
        has_status: true,
    }));
    let controller: CompositeController = serde_json::from_value(json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "c"},
        "spec": {
            "parentResource": {"apiVersion": "ctl.example.com/v1", "resource": "catsets"},
            "childResources": [{"apiVersion": "v1", "resource": "pods", "updateStrategy": {"method": "RollingRecreate"}}],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{}"}}}
        }
    }))
    .unwrap();
    let error = Composite::new(&controller, &resolver).unwrap_err();
    assert!(error.to_string().contains("ControllerRevisions"), "{error}");
}
