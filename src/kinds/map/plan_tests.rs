//! The map planning core: input selection, map keys, output groups, tombstones and status.

use super::api::MapController;
use super::plan::Mapper;
use super::{MAP_KEY_LABEL, MAP_LABEL};
use crate::api::HookVersion;
use crate::plan::StatusChange;
use crate::resources::StaticResolver;
use serde_json::{Value, json};

fn mapper(parent_scope: &str, tombstone: bool) -> Mapper {
    let mut resolver = StaticResolver::with_builtins();
    resolver.add_crd(&json!({"spec": {
        "group": "example.com", "scope": parent_scope,
        "names": {"kind": "SnapshotSchedule", "plural": "snapshotschedules"},
        "versions": [{"name": "v1", "subresources": {"status": {}}}]
    }}));
    let mut controller = json!({
        "metadata": {"name": "snapshots"},
        "spec": {
            "parentResource": {"apiVersion": "example.com/v1", "resource": "snapshotschedules"},
            "inputResources": [{"apiVersion": "v1", "resource": "persistentvolumeclaims"}],
            "outputResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"map": {"script": {"language": "lua", "inline": "return {}"}}}
        }
    });
    if tombstone {
        controller["spec"]["hooks"]["tombstone"] =
            json!({"script": {"language": "lua", "inline": "return {}"}});
    }
    let controller: MapController = serde_json::from_value(controller).unwrap();
    Mapper::new(&controller, &resolver).unwrap()
}

fn schedule(selector: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "SnapshotSchedule",
        "metadata": {"name": "nightly", "namespace": "prod", "uid": "p1"},
        "spec": {"selector": selector}
    })
}

fn pvc(namespace: &str, name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "labels": {"app": app}}})
}

fn output(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn observe(planned: &Value) -> Value {
    let mut observed = planned.clone();
    observed["metadata"]["uid"] = json!(format!(
        "uid-{}",
        planned["metadata"]["name"].as_str().unwrap()
    ));
    observed
}

#[test]
fn parents_select_inputs_by_selector_namespace_and_not_their_own_outputs() {
    let mapper = mapper("Namespaced", false);
    let parent = schedule(json!({"matchLabels": {"app": "db"}}));
    let selector = mapper.parent_selector(&parent).unwrap();
    assert!(mapper.selects_input(&parent, &selector, &pvc("prod", "data-0", "db")));
    assert!(!mapper.selects_input(&parent, &selector, &pvc("prod", "data-1", "web")));
    assert!(!mapper.selects_input(&parent, &selector, &pvc("dev", "data-0", "db")));
    let mut own_output = pvc("prod", "data-2", "db");
    own_output["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "SnapshotSchedule",
        "name": "nightly", "uid": "p1", "controller": true}]);
    assert!(!mapper.selects_input(&parent, &selector, &own_output));
    let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "prod", "labels": {"app": "db"}}});
    assert!(
        !mapper.selects_input(&parent, &selector, &config),
        "not an input type"
    );

    let everything = schedule(Value::Null);
    let all = mapper.parent_selector(&everything).unwrap();
    assert!(mapper.selects_input(&everything, &all, &pvc("prod", "x", "anything")));
    assert!(!mapper.selects_input(&everything, &all, &pvc("dev", "x", "anything")));
}

#[test]
fn a_cluster_scoped_parent_selects_inputs_in_every_namespace() {
    let mapper = mapper("Cluster", false);
    let mut parent = schedule(json!({"matchLabels": {"app": "db"}}));
    parent["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let selector = mapper.parent_selector(&parent).unwrap();
    assert!(mapper.selects_input(&parent, &selector, &pvc("prod", "a", "db")));
    assert!(mapper.selects_input(&parent, &selector, &pvc("dev", "b", "db")));
    assert!(!mapper.selects_input(&parent, &selector, &pvc("dev", "c", "web")));
}

#[test]
fn an_invalid_parent_selector_is_an_error_not_an_empty_selection() {
    let mapper = mapper("Namespaced", false);
    let parent = schedule(json!({"matchExpressions": [{"key": "app", "operator": "In"}]}));
    let error = mapper.parent_selector(&parent).unwrap_err().to_string();
    assert_eq!(
        error,
        "parent SnapshotSchedule.example.com/v1 prod/nightly: spec.selector is invalid: \
         selector requirement on key \"app\": operator In needs at least one value"
    );
}

#[test]
fn map_keys_are_stable_label_safe_and_distinct() {
    let a = Mapper::map_key(&pvc("prod", "data-0", "db"));
    assert_eq!(a, Mapper::map_key(&pvc("prod", "data-0", "other-labels")));
    assert_ne!(a, Mapper::map_key(&pvc("dev", "data-0", "db")));
    assert_ne!(a, Mapper::map_key(&pvc("prod", "data-1", "db")));
    assert!(
        a.len() <= 63 && a.chars().all(|c| c.is_ascii_hexdigit()),
        "{a}"
    );
    // The runtime computes it from a reference when the input is gone.
    let claims = StaticResolver::with_builtins()
        .find_kind("v1", "PersistentVolumeClaim")
        .unwrap();
    let reference = crate::runtime::ObjRef::of(&claims, &pvc("prod", "data-0", "db"));
    assert_eq!(reference.identity_digest(), a);
    let namespaces = StaticResolver::with_builtins()
        .find_kind("v1", "Namespace")
        .unwrap();
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}});
    assert_eq!(
        crate::runtime::ObjRef::of(&namespaces, &namespace).identity_digest(),
        Mapper::map_key(&namespace)
    );
}

#[test]
fn map_outputs_are_tagged_owned_and_converge_to_no_writes() {
    let mapper = mapper("Namespaced", false);
    let parent = schedule(json!({}));
    let input = pvc("prod", "data-0", "db");
    let key = Mapper::map_key(&input);
    let request = mapper.map_request(&parent, &input, &[], HookVersion::V1);
    assert_eq!(request["mapKey"], json!(key));
    assert_eq!(request["outputs"], json!({"ConfigMap.v1": {}}));
    assert_eq!(request["input"]["metadata"]["name"], "data-0");
    assert_eq!(request["parent"]["metadata"]["name"], "nightly");

    let response = json!({"outputs": [output("data-0-a"), output("data-0-b")]});
    let plan = mapper.plan_map(&parent, &key, &[], &response).unwrap();
    assert_eq!(plan.apply.len(), 2);
    let labels = &plan.apply[0]["metadata"]["labels"];
    assert_eq!(labels[MAP_LABEL], "snapshots");
    assert_eq!(labels[MAP_KEY_LABEL], json!(key));
    assert_eq!(plan.apply[0]["metadata"]["ownerReferences"][0]["uid"], "p1");
    assert_eq!(plan.apply[0]["metadata"]["namespace"], "prod");

    let cluster: Vec<Value> = plan.apply.iter().map(observe).collect();
    let refs: Vec<&Value> = cluster.iter().collect();
    assert!(refs.iter().all(|o| mapper.owns(&parent, o)));
    assert!(
        mapper
            .plan_map(&parent, &key, &refs, &response)
            .unwrap()
            .is_noop()
    );
    let fewer = mapper
        .plan_map(
            &parent,
            &key,
            &refs,
            &json!({"outputs": [output("data-0-a")]}),
        )
        .unwrap();
    assert_eq!(fewer.delete.len(), 1);
    assert_eq!(fewer.delete[0].key.name, "data-0-b");
    assert_eq!(mapper.group_by_key(refs.iter().copied())[&key].len(), 2);

    let error = mapper
        .plan_map(&parent, &key, &[], &json!({"outputs": [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]}))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("outputs[0]: Secret.v1 \"s\" is not a declared outputs type"),
        "{error}"
    );
}

#[test]
fn detached_outputs_are_deleted_or_kept_by_the_tombstone_hook() {
    let mapper = mapper("Namespaced", true);
    let parent = schedule(json!({}));
    let key = Mapper::map_key(&pvc("prod", "gone", "db"));
    let plan = mapper
        .plan_map(
            &parent,
            &key,
            &[],
            &json!({"outputs": [output("old-a"), output("old-b")]}),
        )
        .unwrap();
    let detached: Vec<Value> = plan.apply.iter().map(observe).collect();
    let refs: Vec<&Value> = detached.iter().collect();

    let request = mapper.tombstone_request(&parent, &key, &refs, HookVersion::V1);
    assert_eq!(request["mapKey"], json!(key));
    let v2 = mapper.tombstone_request(&parent, &key, &refs, HookVersion::V2);
    let namespace = refs[0]["metadata"]["namespace"].as_str().unwrap();
    assert!(
        v2["outputs"]["ConfigMap.v1"][format!("{namespace}/old-a")].is_object(),
        "{}",
        v2["outputs"]
    );
    assert!(request["outputs"]["ConfigMap.v1"]["old-a"].is_object());
    assert!(request.get("input").is_none());

    let keep_a = mapper
        .plan_tombstone(&parent, &refs, &json!({"outputs": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old-a"}}]}))
        .unwrap();
    assert_eq!(keep_a.delete.len(), 1);
    assert_eq!(keep_a.delete[0].key.name, "old-b");
    assert!(
        keep_a.apply.is_empty(),
        "the tombstone hook never edits outputs"
    );

    let keep_none = mapper
        .plan_tombstone(&parent, &refs, &json!({"outputs": []}))
        .unwrap();
    assert_eq!(keep_none.delete.len(), 2);
    let stranger = mapper
        .plan_tombstone(
            &parent,
            &refs,
            &json!({"outputs": [output("not-detached")]}),
        )
        .unwrap_err();
    assert!(
        stranger
            .to_string()
            .contains("outputs[0]: ConfigMap.v1 not-detached is not one of the detached outputs"),
        "{stranger}"
    );
    assert_eq!(mapper.plan_detached(&refs).delete.len(), 2);
}

#[test]
fn status_aggregates_inputs_outputs_and_true_conditions_and_is_quiet_when_unchanged() {
    let mapper = mapper("Namespaced", false);
    let mut parent = schedule(json!({}));
    let inputs = [pvc("prod", "a", "db"), pvc("prod", "b", "db")];
    let mut ready = output("x");
    ready["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}, {"type": "Degraded", "status": "False"}]});
    let mut pending = output("y");
    pending["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}]});
    let outputs = [ready, pending, output("z")];
    let input_refs: Vec<&Value> = inputs.iter().collect();
    let output_refs: Vec<&Value> = outputs.iter().collect();
    let expected = json!({
        "inputs": {"persistentvolumeclaims": {"total": 2}},
        "outputs": {"configmaps": {"total": 3, "ready": 1, "degraded": 0}}
    });
    assert_eq!(
        mapper.aggregate_status(&parent, &input_refs, &output_refs),
        Some(StatusChange::Merge(expected.clone()))
    );
    parent["status"] = expected;
    parent["status"]["phase"] = json!("owned by someone else");
    assert_eq!(
        mapper.aggregate_status(&parent, &input_refs, &output_refs),
        None
    );
    assert_eq!(
        mapper.aggregate_status(&parent, &input_refs[..1], &output_refs),
        Some(StatusChange::Merge(
            json!({"inputs": {"persistentvolumeclaims": {"total": 1}}})
        ))
    );
}

/// What a parent's map calls are handed, as reads its controller's account must be allowed:
/// in the parent's namespace, or in every namespace for a cluster-scoped parent.
#[test]
fn the_reads_a_parent_hands_its_hooks_follow_its_scope() {
    let shown = |mapper: &Mapper, parent: &Value| {
        super::sync::observed_scopes(mapper, parent)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    let parent = schedule(json!({}));
    assert_eq!(
        shown(&mapper("Namespaced", false), &parent),
        [
            "get snapshotschedules (example.com) in namespace prod",
            "list persistentvolumeclaims (core) in namespace prod",
            "list configmaps (core) in namespace prod",
        ]
    );
    let mut cluster_parent = parent.clone();
    cluster_parent["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    assert_eq!(
        shown(&mapper("Cluster", false), &cluster_parent),
        [
            "get snapshotschedules (example.com)",
            "list persistentvolumeclaims (core) in every namespace",
            "list configmaps (core) in every namespace",
        ]
    );
}

#[test]
fn a_parent_selecting_more_inputs_than_pairs_allowed_fails_and_maps_nothing() {
    use super::sync::{MAX_PAIRS_PER_PARENT, MapFanOut};
    let mapper = mapper("Namespaced", false);
    let parent = schedule(json!({"matchLabels": {"app": "db"}}));
    let inputs = |count: usize| (0..count).map(|i| pvc("prod", &format!("data-{i}"), "db"));
    let store = crate::store::MemoryStore::new(inputs(MAX_PAIRS_PER_PARENT));
    let fan_out = MapFanOut::read(&mapper, &store, &parent).expect("at the cap");
    assert_eq!(fan_out.inputs.len(), MAX_PAIRS_PER_PARENT);

    let store = crate::store::MemoryStore::new(inputs(MAX_PAIRS_PER_PARENT + 1));
    let error = MapFanOut::read(&mapper, &store, &parent).unwrap_err();
    assert_eq!(error.reason(), crate::reasons::TOO_MANY_PAIRS);
    assert_eq!(
        error.to_string(),
        format!(
            "parent SnapshotSchedule.example.com/v1 prod/nightly: spec.selector selects {} \
             inputs, more than the {MAX_PAIRS_PER_PARENT} pairs one parent may have; nothing \
             was mapped or removed: narrow the selector, or split the parent",
            MAX_PAIRS_PER_PARENT + 1
        )
    );
}
