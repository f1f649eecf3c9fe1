//! The decorator planning core: requests, plans and rejections, without any cluster.

use super::DECORATOR_LABEL;
use super::api::DecoratorController;
use super::plan::{Decorator, Observed};
use crate::api::HookVersion;
use crate::kinds::one_object::OneObject;
use crate::plan::lifecycle::Phase;
use crate::plan::related::related_rules;
use crate::plan::{APPLIED_DIGEST_ANNOTATION, FinalizerChange, StatusChange};
use crate::resources::StaticResolver;
use crate::script::Json;
use serde_json::{Value, json};

fn decorator(finalize: bool, method: &str) -> Decorator {
    let mut controller = json!({
        "apiVersion": "metascript.dev/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": "service-per-pod"},
        "spec": {
            "resources": [{
                "apiVersion": "apps/v1",
                "resource": "statefulsets",
                "annotationSelector": {"matchExpressions": [{"key": "service-per-pod-ports", "operator": "Exists"}]}
            }],
            "attachments": [
                {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": method}},
                {"apiVersion": "v1", "resource": "configmaps"}
            ],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{}"}}}
        }
    });
    if finalize {
        controller["spec"]["hooks"]["finalize"] =
            json!({"script": {"language": "rhai", "inline": "#{}"}});
    }
    let controller: DecoratorController = serde_json::from_value(controller).unwrap();
    Decorator::new(&controller, &StaticResolver::with_builtins()).unwrap()
}

fn target() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": "web", "namespace": "prod", "uid": "uid-web",
            "labels": {"app": "web", "old": "x"},
            "annotations": {"service-per-pod-ports": "80:8080"}
        },
        "spec": {"replicas": 2},
        "status": {"replicas": 2}
    })
}

fn service(name: &str, port: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": port}]}})
}

/// What the cluster would hold after applying `planned`: server-added fields included.
fn as_observed(planned: &Value) -> Value {
    let mut observed = planned.clone();
    observed["metadata"]["uid"] = json!(format!(
        "uid-{}",
        planned["metadata"]["name"].as_str().unwrap()
    ));
    observed["metadata"]["resourceVersion"] = json!("7");
    observed["spec"]["ports"][0]["protocol"] = json!("TCP");
    observed
}

fn observed<'a>(target: &'a Value, attachments: &[&'a Value]) -> Observed<'a> {
    Observed {
        target,
        lent: Json::Tree(target),
        attachments: attachments.to_vec(),
        related: json!({}),
    }
}

#[test]
fn request_lists_every_attachment_type_even_when_empty() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let observed = observed(&target, &[]);
    let request = decorator
        .request(Phase::Sync, &observed, HookVersion::V1)
        .to_value();
    assert_eq!(
        request["attachments"],
        json!({"Service.v1": {}, "ConfigMap.v1": {}})
    );
    assert_eq!(request["finalizing"], json!(false));
    assert_eq!(request["object"]["metadata"]["name"], "web");
    assert_eq!(request["controller"]["kind"], "DecoratorController");
    assert_eq!(request["controller"]["metadata"]["name"], "service-per-pod");
    assert_eq!(request["related"], json!({}));
}

/// Metacontroller's hook versions: v1 keys an attachment in the target's namespace by name, v2
/// every namespaced object by `namespace/name`; related objects alike.
#[test]
fn v2_requests_key_every_namespaced_object_by_namespace_and_name() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let mut attachment = service("web-0", 80);
    attachment["metadata"]["namespace"] = json!("prod");
    let related = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "prod"}});
    let configmaps = crate::resources::StaticResolver::with_builtins()
        .find_kind("v1", "ConfigMap")
        .unwrap();
    for (version, key, related_key) in [
        (HookVersion::V1, "web-0", "shared"),
        (HookVersion::V2, "prod/web-0", "prod/shared"),
    ] {
        let observed = Observed {
            related: crate::plan::children::group_for_request(
                &target,
                [&configmaps],
                [&related],
                version,
            ),
            ..observed(&target, &[&attachment])
        };
        let request = decorator
            .request(Phase::Sync, &observed, version)
            .to_value();
        assert!(
            request["attachments"]["Service.v1"][key].is_object(),
            "{version:?}: {}",
            request["attachments"]
        );
        assert!(request["related"]["ConfigMap.v1"][related_key].is_object());
    }
}

/// A v1 rule without a namespace looks in the target's; a v2 one in every namespace.
#[test]
fn v2_related_rules_without_a_namespace_look_in_every_namespace() {
    let target = target();
    let response = json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps"}]});
    let elsewhere = json!({"metadata": {"name": "c", "namespace": "shared"}});
    let v1 = related_rules(&response, HookVersion::V1).unwrap();
    assert_eq!(v1[0].namespace_for(&target), Some("prod"));
    assert!(!v1[0].selects(&target, &elsewhere));
    let v2 = related_rules(&response, HookVersion::V2).unwrap();
    assert_eq!(v2[0].namespace_for(&target), None);
    assert!(v2[0].selects(&target, &elsewhere));
}

#[test]
fn creates_attachments_owned_labelled_and_namespaced_then_writes_nothing_once_converged() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let response = json!({"attachments": [service("web-0", 80), service("web-1", 80)]});
    let plan = decorator
        .plan(Phase::Sync, &observed(&target, &[]), &response)
        .unwrap();
    assert_eq!(plan.apply.len(), 2);
    let created = &plan.apply[0];
    assert_eq!(created["metadata"]["namespace"], "prod");
    assert_eq!(
        created["metadata"]["labels"][DECORATOR_LABEL],
        "service-per-pod"
    );
    assert_eq!(
        created["metadata"]["ownerReferences"],
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "uid-web",
                "controller": true, "blockOwnerDeletion": true}])
    );
    assert!(created["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION].is_string());
    assert!(plan.delete.is_empty());

    let cluster: Vec<Value> = plan.apply.iter().map(as_observed).collect();
    let refs: Vec<&Value> = cluster.iter().collect();
    let again = decorator
        .plan(Phase::Sync, &observed(&target, &refs), &response)
        .unwrap();
    assert!(
        again.is_noop(),
        "converged state must plan no writes: {again:?}"
    );
    let observed = observed(&target, &refs);
    let request = decorator
        .request(Phase::Sync, &observed, HookVersion::V1)
        .to_value();
    assert_eq!(
        request["attachments"]["Service.v1"]["web-1"]["metadata"]["uid"],
        "uid-web-1"
    );
}

#[test]
fn update_methods_decide_what_happens_to_a_changed_attachment() {
    let target = target();
    let first = decorator(false, "InPlace")
        .plan(
            Phase::Sync,
            &observed(&target, &[]),
            &json!({"attachments": [service("web-0", 80)]}),
        )
        .unwrap();
    let existing = as_observed(&first.apply[0]);
    let changed = json!({"attachments": [service("web-0", 81)]});

    let in_place = decorator(false, "InPlace")
        .plan(Phase::Sync, &observed(&target, &[&existing]), &changed)
        .unwrap();
    assert_eq!(in_place.apply.len(), 1);
    assert_eq!(in_place.apply[0]["spec"]["ports"][0]["port"], 81);
    assert!(in_place.delete.is_empty());

    let on_delete = decorator(false, "OnDelete")
        .plan(Phase::Sync, &observed(&target, &[&existing]), &changed)
        .unwrap();
    assert!(on_delete.is_noop());

    let recreate = decorator(false, "Recreate")
        .plan(Phase::Sync, &observed(&target, &[&existing]), &changed)
        .unwrap();
    assert!(recreate.apply.is_empty());
    assert_eq!(recreate.delete.len(), 1);
    assert_eq!(recreate.delete[0].uid.as_deref(), Some("uid-web-0"));
    assert_eq!(recreate.delete[0].reason, "recreate");
}

#[test]
fn a_field_the_hook_stops_returning_is_reapplied() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let mut with_selector = service("web-0", 80);
    with_selector["spec"]["selector"] = json!({"pod": "web-0"});
    let first = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[]),
            &json!({"attachments": [with_selector]}),
        )
        .unwrap();
    let existing = as_observed(&first.apply[0]);
    let plan = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[&existing]),
            &json!({"attachments": [service("web-0", 80)]}),
        )
        .unwrap();
    assert_eq!(
        plan.apply.len(),
        1,
        "a dropped field changes the applied digest"
    );
}

#[test]
fn attachments_not_returned_are_deleted_and_terminating_ones_left_alone() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let first = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[]),
            &json!({"attachments": [service("web-0", 80), service("web-1", 80)]}),
        )
        .unwrap();
    let zero = as_observed(&first.apply[0]);
    let mut one = as_observed(&first.apply[1]);
    let plan = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[&zero, &one]),
            &json!({"attachments": []}),
        )
        .unwrap();
    assert_eq!(plan.delete.len(), 2);
    assert_eq!(plan.delete[0].key.name, "web-0");
    one["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let plan = decorator
        .plan(Phase::Sync, &observed(&target, &[&zero, &one]), &json!({}))
        .unwrap();
    assert_eq!(plan.delete.len(), 1);
}

#[test]
fn labels_and_annotations_patch_only_changes_and_null_removes() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let response = json!({
        "labels": {"app": "web", "old": null, "new": "y", "absent": null},
        "annotations": {"note": "hi"}
    });
    let plan = decorator
        .plan(Phase::Sync, &observed(&target, &[]), &response)
        .unwrap();
    assert_eq!(
        plan.metadata_patch,
        Some(
            json!({"metadata": {"labels": {"old": null, "new": "y"}, "annotations": {"note": "hi"}}})
        )
    );
    let same = json!({"labels": {"app": "web"}});
    assert!(
        decorator
            .plan(Phase::Sync, &observed(&target, &[]), &same)
            .unwrap()
            .is_noop()
    );
}

#[test]
fn status_is_replaced_only_when_returned_and_different() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let plan = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[]),
            &json!({"status": {"ok": true}}),
        )
        .unwrap();
    assert_eq!(
        plan.status,
        Some(StatusChange::Replace(json!({"ok": true})))
    );
    for unchanged in [
        json!({"status": null}),
        json!({}),
        json!({"status": {"replicas": 2}}),
    ] {
        assert_eq!(
            decorator
                .plan(Phase::Sync, &observed(&target, &[]), &unchanged)
                .unwrap()
                .status,
            None
        );
    }
    // Fields the server added by default do not make the returned status "different".
    let mut defaulted = target.clone();
    defaulted["status"] = json!({"replicas": 2, "availableReplicas": 0});
    let same = json!({"status": {"replicas": 2}});
    assert_eq!(
        decorator
            .plan(Phase::Sync, &observed(&defaulted, &[]), &same)
            .unwrap()
            .status,
        None
    );
}

#[test]
fn bad_responses_are_rejected_naming_the_item_and_why() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let cases = [
        (
            json!("nope"),
            "(response): expected a map of response fields, got a string",
        ),
        (
            json!({"attachments": {"a": 1}}),
            "attachments: expected a list of objects, got a map",
        ),
        (
            json!({"attachments": [1]}),
            "attachments[0]: expected an object, got a number",
        ),
        (
            json!({"attachments": [{"kind": "Service", "metadata": {"name": "a"}}]}),
            "attachments[0]: object has no apiVersion",
        ),
        (
            json!({"attachments": [{"apiVersion": "v1", "metadata": {"name": "a"}}]}),
            "attachments[0]: object has no kind",
        ),
        (
            json!({"attachments": [{"apiVersion": "v1", "kind": "Service", "metadata": {}}]}),
            "attachments[0]: Service has no metadata.name",
        ),
        (
            json!({"attachments": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]}),
            "attachments[0]: Secret.v1 \"s\" is not a declared attachments type (declared: Service.v1, ConfigMap.v1)",
        ),
        (
            json!({"attachments": [service("a", 1), service("a", 2)]}),
            "attachments[1]: Service.v1 prod/a is returned more than once",
        ),
        (
            json!({"attachments": [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "other"}}]}),
            "attachments[0]: Service \"a\" is in namespace \"other\" but owner references cannot cross namespaces (the parent is in \"prod\")",
        ),
        (
            json!({"labels": {"a": 1}}),
            "labels.a: expected a string (or null to remove), got a number",
        ),
        (
            json!({"status": [1]}),
            "status: expected a map (or null to leave status alone), got a list",
        ),
        (
            json!({"resyncAfterSeconds": -1}),
            "resyncAfterSeconds: expected a positive number of seconds, got -1",
        ),
        // Past any timer (Duration::from_secs_f64 would panic a worker on it).
        (
            json!({"resyncAfterSeconds": 1e300}),
            "resyncAfterSeconds: expected at most 31536000 seconds (a year), got 1e+300",
        ),
    ];
    for (response, message) in cases {
        let error = decorator
            .plan(Phase::Sync, &observed(&target, &[]), &response)
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("invalid hook response: {message}"),
            "for {response}"
        );
    }
}

#[test]
fn resync_after_seconds_is_raised_to_a_second_and_kept_up_to_a_year() {
    let (decorator, target) = (decorator(false, "InPlace"), target());
    let asked = |seconds: Value| {
        decorator
            .plan(
                Phase::Sync,
                &observed(&target, &[]),
                &json!({"resyncAfterSeconds": seconds}),
            )
            .unwrap()
            .resync_after_seconds
    };
    assert_eq!(asked(json!(0.001)), Some(1.0));
    assert_eq!(asked(json!(30)), Some(30.0));
    assert_eq!(asked(json!(31_536_000)), Some(31_536_000.0));
    assert_eq!(asked(json!(0)), None);
}

#[test]
fn a_cluster_scoped_target_keys_children_by_namespace_and_requires_it() {
    let controller: DecoratorController = serde_json::from_value(json!({
        "metadata": {"name": "ns-defaults"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "namespaces"}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return {}"}}}
        }
    }))
    .unwrap();
    let decorator = Decorator::new(&controller, &StaticResolver::with_builtins()).unwrap();
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "uid": "n1"}});
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "defaults"}});
    let error = decorator
        .plan(
            Phase::Sync,
            &observed(&namespace, &[]),
            &json!({"attachments": [config]}),
        )
        .unwrap_err();
    assert!(
        error.to_string().contains("metadata.namespace must be set"),
        "{error}"
    );

    let mut placed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "defaults", "namespace": "team-a"}});
    let plan = decorator
        .plan(
            Phase::Sync,
            &observed(&namespace, &[]),
            &json!({"attachments": [placed.clone()]}),
        )
        .unwrap();
    placed = plan.apply[0].clone();
    let observed = observed(&namespace, &[&placed]);
    let request = decorator
        .request(Phase::Sync, &observed, HookVersion::V1)
        .to_value();
    assert!(request["attachments"]["ConfigMap.v1"]["team-a/defaults"].is_object());
}

#[test]
fn finalizer_lifecycle_follows_the_finalize_hook() {
    let with_finalize = decorator(true, "InPlace");
    let finalizer = with_finalize.common.finalizer().to_string();
    assert_eq!(finalizer, "metascript.dev/decorator-service-per-pod");
    let mut target = target();
    assert_eq!(with_finalize.phase(&target), Phase::Sync);
    let plan = with_finalize
        .plan(Phase::Sync, &observed(&target, &[]), &json!({}))
        .unwrap();
    assert_eq!(
        plan.finalizer,
        Some(FinalizerChange::Add(finalizer.clone()))
    );

    target["metadata"]["finalizers"] = json!([finalizer]);
    assert!(
        with_finalize
            .plan(Phase::Sync, &observed(&target, &[]), &json!({}))
            .unwrap()
            .is_noop()
    );

    // Opting out (annotation removed) finalizes; so does deletion.
    let mut opted_out = target.clone();
    opted_out["metadata"]["annotations"] = json!({});
    assert_eq!(with_finalize.phase(&opted_out), Phase::Finalize);
    let mut deleting = target.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(with_finalize.phase(&deleting), Phase::Finalize);
    assert_eq!(
        with_finalize
            .request(Phase::Finalize, &observed(&deleting, &[]), HookVersion::V1)
            .to_value()["finalizing"],
        json!(true)
    );

    let not_yet = with_finalize
        .plan(
            Phase::Finalize,
            &observed(&deleting, &[]),
            &json!({"finalized": false}),
        )
        .unwrap();
    assert_eq!(not_yet.finalizer, None);
    let done = with_finalize
        .plan(
            Phase::Finalize,
            &observed(&deleting, &[]),
            &json!({"finalized": true}),
        )
        .unwrap();
    assert_eq!(
        done.finalizer,
        Some(FinalizerChange::Remove(finalizer.clone()))
    );
    let bad = with_finalize.plan(
        Phase::Finalize,
        &observed(&deleting, &[]),
        &json!({"finalized": "yes"}),
    );
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("finalized: expected a boolean")
    );

    // Without a finalize hook a leftover finalizer is released, never left to block deletion.
    let without = decorator(false, "InPlace");
    let mut leftover = deleting.clone();
    leftover["metadata"]["finalizers"] = json!([without.common.finalizer()]);
    assert_eq!(without.phase(&leftover), Phase::Release);
    assert_eq!(
        without.common.release_plan().finalizer,
        Some(FinalizerChange::Remove(
            without.common.finalizer().to_string()
        ))
    );
    let mut plain = target.clone();
    plain["metadata"]["annotations"] = json!({});
    plain["metadata"]["finalizers"] = json!([]);
    assert_eq!(without.phase(&plain), Phase::Idle);
}

#[test]
fn only_this_decorators_attachments_are_its_own() {
    let decorator = decorator(false, "InPlace");
    let target = target();
    let plan = decorator
        .plan(
            Phase::Sync,
            &observed(&target, &[]),
            &json!({"attachments": [service("web-0", 80)]}),
        )
        .unwrap();
    let ours = as_observed(&plan.apply[0]);
    assert!(decorator.owns(&target, &ours));
    let mut other_decorator = ours.clone();
    other_decorator["metadata"]["labels"][DECORATOR_LABEL] = json!("another");
    assert!(!decorator.owns(&target, &other_decorator));
    let mut other_target = ours.clone();
    other_target["metadata"]["ownerReferences"][0]["uid"] = json!("someone-else");
    assert!(!decorator.owns(&target, &other_target));
}

#[test]
fn related_rules_select_by_namespace_names_and_labels() {
    let target = target();
    let rules = related_rules(&json!({"relatedResources": [
            {"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"share": "yes"}}},
            {"apiVersion": "v1", "resource": "secrets", "namespace": "shared", "names": ["tls"]}
        ]}), HookVersion::V1)
        .unwrap();
    let config = |ns: &str, share: &str| json!({"metadata": {"name": "c", "namespace": ns, "labels": {"share": share}}});
    assert!(rules[0].selects(&target, &config("prod", "yes")));
    assert!(!rules[0].selects(&target, &config("prod", "no")));
    assert!(!rules[0].selects(&target, &config("dev", "yes")));
    let secret = |ns: &str, name: &str| json!({"metadata": {"name": name, "namespace": ns}});
    assert!(rules[1].selects(&target, &secret("shared", "tls")));
    assert!(!rules[1].selects(&target, &secret("shared", "other")));
    assert!(!rules[1].selects(&target, &secret("prod", "tls")));

    let error = related_rules(
        &json!({"relatedResources": [{"apiVersion": "v1"}]}),
        HookVersion::V1,
    )
    .unwrap_err();
    assert!(error.to_string().contains("relatedResources[0]"), "{error}");
}

/// What a target's hooks are handed, as reads its controller's account must be allowed.
#[test]
fn the_reads_a_target_hands_its_hooks_are_per_type_and_namespace() {
    use crate::plan::related::{RelatedRule, related_scopes};
    let decorator = decorator(false, "InPlace");
    let resolver = StaticResolver::with_builtins();
    let target_type = resolver.find_kind("apps/v1", "StatefulSet").unwrap();
    let shown = |scopes: Vec<crate::reads::ReadScope>| {
        scopes.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    assert_eq!(
        shown(decorator.observed_scopes(&target_type, &target())),
        [
            "get statefulsets (apps) in namespace prod",
            "list services (core) in namespace prod",
            "list configmaps (core) in namespace prod",
        ]
    );
    let secret = resolver.find_kind("v1", "Secret").unwrap();
    let rule = |rule: Value, version: HookVersion| {
        let mut rule: RelatedRule = serde_json::from_value(rule).unwrap();
        rule.version = version;
        (rule, secret.clone())
    };
    let rules = [
        rule(
            json!({"apiVersion": "v1", "resource": "secrets", "namespace": "kube-system", "names": ["top-secret"]}),
            HookVersion::V1,
        ),
        // v1: no namespace is the target's.
        rule(
            json!({"apiVersion": "v1", "resource": "secrets"}),
            HookVersion::V1,
        ),
        // v2: no namespace is every namespace.
        rule(
            json!({"apiVersion": "v1", "resource": "secrets"}),
            HookVersion::V2,
        ),
    ];
    assert_eq!(
        shown(related_scopes(&rules, &target())),
        [
            "get secrets (core) in namespace kube-system",
            "list secrets (core) in namespace prod",
            "list secrets (core) in every namespace",
        ]
    );
}

#[test]
fn only_rules_without_an_annotation_selector_select_by_labels_alone() {
    let resolver = StaticResolver::with_builtins();
    let rule = |selector: Value| {
        let mut rule = json!({"apiVersion": "v1", "resource": "pods",
                              "labelSelector": {"matchLabels": {"app": "web"}}});
        if !selector.is_null() {
            rule["annotationSelector"] = selector;
        }
        rule
    };
    let decorator = |rules: Vec<Value>| {
        let controller: DecoratorController = serde_json::from_value(json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "d"},
            "spec": {"resources": rules,
                     "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{}"}}}}
        }))
        .unwrap();
        Decorator::new(&controller, &resolver).unwrap()
    };
    let pods = resolver.find_kind("v1", "Pod").unwrap();
    let annotated = json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]});

    assert!(decorator(vec![rule(Value::Null)]).selects_by_labels_alone(&pods));
    assert!(!decorator(vec![rule(annotated.clone())]).selects_by_labels_alone(&pods));
    // One rule of the type narrowed by annotations is enough to read every object.
    assert!(
        !decorator(vec![rule(Value::Null), rule(annotated.clone())]).selects_by_labels_alone(&pods)
    );
    // A rule of another type is no rule of this one.
    let mut services = rule(annotated);
    services["resource"] = json!("services");
    assert!(decorator(vec![rule(Value::Null), services]).selects_by_labels_alone(&pods));
}
