//! CompositeController end to end against a real kube-apiserver: children claimed, adopted and
//! released by selector and controller reference, generated selectors, each update strategy,
//! rolling updates that wait for readiness and stall on a failing check, finalize, customize, a
//! failing hook that deletes nothing, a script reload in the middle of a rollout, and a parent
//! without a status subresource that settles with no writes.
//!
//! The plane has no kubelet: readiness is driven by patching children's status (Pods, and Shards,
//! a custom child type with a status subresource), as a kubelet or a child's controller would.

use crate::support::cluster::Cluster;
use crate::support::operator::quiet;
use crate::support::{eventually, test_namespace, unique_name};
use k8s_openapi::api::core::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use metascript::kinds::composite::{KIND, REVISION_LABEL};
use metascript::object;
use metascript::runtime::ControllerId;
use serde_json::{Value, json};

const CATSET_CRDS: &str = include_str!("../../scripts/catset/crds.yaml");
const CATSET_RHAI: &str = include_str!("../../scripts/catset/sync.rhai");
const INDEXEDJOB_CRDS: &str = include_str!("../../scripts/indexedjob/crds.yaml");
const INDEXEDJOB_LUA: &str = include_str!("../../scripts/indexedjob/sync.lua");

/// Widget: a parent with a selector, a list of names, a value and a flag that makes test hooks
/// fail; and Shard: a child with a status subresource whose readiness tests set.
const TEST_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.test.example.com}
spec:
  group: test.example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: shards.test.example.com}
spec:
  group: test.example.com
  scope: Namespaced
  names: {kind: Shard, plural: shards, singular: shard}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// The Widget and Shard types in groups of their own (so tests never share a CRD), returned as
/// (widget apiVersion, shard apiVersion). Without `status`, Widgets have no status subresource.
async fn install_test_types(cluster: &mut Cluster, prefix: &str, status: bool) -> (String, String) {
    let mut documents: Vec<Value> = serde_saphyr::from_multiple(TEST_CRDS).expect("test CRDs");
    if !status {
        documents[0]["spec"]["versions"][0]
            .as_object_mut()
            .unwrap()
            .remove("subresources");
    }
    // JSON is YAML: the documents go back as JSON text.
    let yaml = documents
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n---\n");
    let widgets = format!("{}.example.com", unique_name(&format!("{prefix}-w")));
    let shards = format!("{}.example.com", unique_name(&format!("{prefix}-s")));
    cluster.install(&yaml, "Widget", &widgets).await;
    cluster.install(&yaml, "Shard", &shards).await;
    (format!("{widgets}/v1"), format!("{shards}/v1"))
}

fn composite(name: &str, parent: (&str, &str), children: Value, hooks: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "parentResource": {"apiVersion": parent.0, "resource": parent.1},
            "childResources": children,
            "hooks": hooks
        }
    })
}

fn rhai(code: &str) -> Value {
    json!({"script": {"language": "rhai", "inline": code}})
}

fn lua(code: &str) -> Value {
    json!({"script": {"language": "lua", "inline": code}})
}

fn widget(api_version: &str, namespace: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec
    })
}

fn config_map(namespace: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data
    })
}

fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}})
}

fn uid(object: &Value) -> String {
    object::uid(object).expect("a uid").to_string()
}

fn controller_uid(object: &Value) -> Option<String> {
    object::controller_ref(object).map(|r| r["uid"].as_str().unwrap_or_default().to_string())
}

fn condition<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits for the parent's `Updated` condition to satisfy `check`; on timeout, says what the
/// parent's status was.
async fn wait_updated(
    cluster: &Cluster,
    parent: &Value,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    let deadline = tokio::time::Instant::now() + crate::support::WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Some(object) = cluster.get(parent).await {
            if check(condition(&object, "Updated")) {
                return object;
            }
            last = object["status"].clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}; the parent's status was {last}")
}

async fn merge_patch(cluster: &Cluster, object: &Value, patch: Value) {
    cluster
        .api(object)
        .patch(
            object::name(object),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {}: {e}", object::ObjectKey::of(object)));
}

fn id(name: &str) -> ControllerId {
    ControllerId::new(KIND, name)
}

/// Keeps every named ConfigMap and every one it already owns; each is labelled with the
/// parent's selector and says who owns it. Status counts the observed children.
const CLAIM_HOOK: &str = r#"
let parent = request.parent;
let observed = request.children["ConfigMap.v1"];
let wanted = get_path(parent, "spec.names", []);
for key in observed.keys() {
    if !wanted.contains(key) { wanted.push(key); }
}
let children = [];
for child in wanted {
    children.push(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: child, labels: parent.spec.selector.matchLabels },
        data: #{ owner: name(parent) },
    });
}
#{ status: #{ children: observed.len() }, children: children }
"#;

#[tokio::test]
async fn children_are_adopted_and_released_by_selector_and_controller_reference() {
    let mut cluster = Cluster::new().await;
    let (widgets, _) = install_test_types(&mut cluster, "claim", true).await;
    let namespace = test_namespace(&cluster.client, "composite-claim").await;
    let name = unique_name("claim");
    let children = json!([{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}]);
    cluster
        .apply(&composite(
            &name,
            (&widgets, "widgets"),
            children,
            json!({"sync": rhai(CLAIM_HOOK)}),
        ))
        .await;
    let labels = json!({"app": name});
    let stray = config_map(
        &namespace,
        "stray",
        labels.clone(),
        json!({"owner": "nobody"}),
    );
    let foreign = config_map(&namespace, "foreign", json!({"app": "other"}), json!({}));
    cluster.apply(&stray).await;
    cluster.apply(&foreign).await;
    let parent = widget(
        &widgets,
        &namespace,
        "w",
        json!({"selector": {"matchLabels": labels}, "names": ["made"]}),
    );
    cluster.apply(&parent).await;
    let parent_uid = uid(&cluster.wait_for(&parent, "the Widget", |_| true).await);

    // The orphan matching the selector is adopted (and then updated in place, as the hook asks);
    // the one that does not match is left alone.
    let made = config_map(&namespace, "made", json!({}), json!({}));
    let made = cluster
        .wait_for(&made, "made, owned", |cm| {
            controller_uid(cm).as_deref() == Some(parent_uid.as_str())
        })
        .await;
    assert_eq!(made["data"]["owner"], "w");
    let adopted = cluster
        .wait_for(&stray, "stray adopted and updated", |cm| {
            controller_uid(cm).as_deref() == Some(parent_uid.as_str()) && cm["data"]["owner"] == "w"
        })
        .await;
    assert_eq!(
        object::controller_ref(&adopted).unwrap()["kind"],
        "Widget",
        "{adopted}"
    );
    cluster
        .wait_for(&parent, "two children counted", |w| {
            w["status"]["children"] == 2
        })
        .await;
    let untouched = cluster.get(&foreign).await.expect("foreign exists");
    assert!(object::controller_ref(&untouched).is_none(), "{untouched}");

    // Relabelled out of the selector: released (not deleted), and no longer counted.
    merge_patch(
        &cluster,
        &stray,
        json!({"metadata": {"labels": {"app": "elsewhere"}}}),
    )
    .await;
    let released = cluster
        .wait_for(&stray, "stray released", |cm| {
            object::controller_ref(cm).is_none()
        })
        .await;
    assert_eq!(released["data"]["owner"], "w", "released, not recreated");
    cluster
        .wait_for(&parent, "one child counted", |w| {
            w["status"]["children"] == 1
        })
        .await;
    quiet(&id(&name)).await;
    assert!(
        cluster.get(&stray).await.is_some(),
        "a released child is not deleted"
    );

    // Back under the selector: adopted again.
    merge_patch(
        &cluster,
        &stray,
        json!({"metadata": {"labels": {"app": name}}}),
    )
    .await;
    cluster
        .wait_for(&stray, "stray adopted again", |cm| {
            controller_uid(cm).as_deref() == Some(parent_uid.as_str())
        })
        .await;
}

#[tokio::test]
async fn a_generated_selector_claims_children_by_the_parents_uid() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("ij"));
    cluster.install(INDEXEDJOB_CRDS, "IndexedJob", &group).await;
    let namespace = test_namespace(&cluster.client, "composite-indexedjob").await;
    let name = unique_name("indexedjob");
    let mut controller = composite(
        &name,
        (&format!("{group}/v1"), "indexedjobs"),
        json!([{"apiVersion": "v1", "resource": "pods"}]),
        json!({"sync": lua(INDEXEDJOB_LUA)}),
    );
    controller["spec"]["generateSelector"] = json!(true);
    cluster.apply(&controller).await;
    let pod_spec = json!({
        "restartPolicy": "OnFailure",
        "containers": [{"name": "c", "image": "example.invalid/busybox"}]
    });
    // An orphan labelled for another parent is never adopted.
    let other = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "print-index-7", "namespace": namespace,
                     "labels": {"app": "print-index", "controller-uid": "someone-else"}},
        "spec": pod_spec
    });
    cluster.apply(&other).await;
    let job = json!({
        "apiVersion": format!("{group}/v1"), "kind": "IndexedJob",
        "metadata": {"name": "print-index", "namespace": namespace},
        "spec": {"completions": 3, "parallelism": 2,
                 "template": {"metadata": {"labels": {"app": "print-index"}}, "spec": pod_spec}}
    });
    cluster.apply(&job).await;
    let job_uid = uid(&cluster.wait_for(&job, "the IndexedJob", |_| true).await);

    let pod = |index: usize| named("v1", "Pod", &namespace, &format!("print-index-{index}"));
    for index in [0, 1] {
        let created = cluster
            .wait_for(&pod(index), &format!("Pod {index}"), |_| true)
            .await;
        assert_eq!(
            object::label(&created, "controller-uid"),
            Some(job_uid.as_str())
        );
        assert_eq!(controller_uid(&created).as_deref(), Some(job_uid.as_str()));
        assert_eq!(
            created["spec"]["containers"][0]["env"][0],
            json!({"name": "JOB_INDEX", "value": index.to_string()})
        );
    }
    let synced = cluster
        .wait_for(&job, "two active, observedGeneration", |j| {
            j["status"]["active"] == 2
                && j["status"]["observedGeneration"] == j["metadata"]["generation"]
        })
        .await;
    assert_eq!(condition(&synced, "Complete")["status"], "False");

    // A Pod that succeeds makes room for the last index.
    cluster
        .patch_status(&pod(0), json!({"phase": "Succeeded"}))
        .await;
    cluster.wait_for(&pod(2), "Pod 2", |_| true).await;
    cluster
        .wait_for(&job, "one succeeded", |j| j["status"]["succeeded"] == 1)
        .await;
    let other = cluster.get(&other).await.expect("the other Pod stays");
    assert!(object::controller_ref(&other).is_none(), "{other}");
}

/// One ConfigMap `c` whose data is the parent's `spec.value`.
const VALUE_HOOK: &str = r#"
let parent = request.parent;
#{ children: [#{
    apiVersion: "v1", kind: "ConfigMap",
    metadata: #{ name: "c", labels: parent.spec.selector.matchLabels },
    data: #{ value: `${parent.spec.value}` },
}] }
"#;

#[tokio::test]
async fn on_delete_recreate_and_in_place_update_a_child_as_they_say() {
    let mut cluster = Cluster::new().await;
    let (widgets, _) = install_test_types(&mut cluster, "methods", true).await;
    for method in ["OnDelete", "Recreate", "InPlace"] {
        let namespace = test_namespace(&cluster.client, &format!("composite-{method}")).await;
        let name = unique_name(&method.to_lowercase());
        let children = json!([{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": method}}]);
        let mut controller = composite(
            &name,
            (&widgets, "widgets"),
            children,
            json!({"sync": rhai(VALUE_HOOK)}),
        );
        // The three controllers share the Widget type: each syncs only the Widgets labelled
        // for it.
        controller["spec"]["parentResource"]["labelSelector"] =
            json!({"matchLabels": {"controller": name}});
        cluster.apply(&controller).await;
        let widget = |value: i64| {
            let mut widget = widget(
                &widgets,
                &namespace,
                "w",
                json!({"selector": {"matchLabels": {"app": name}}, "value": value}),
            );
            widget["metadata"]["labels"] = json!({"controller": name});
            widget
        };
        cluster.apply(&widget(1)).await;
        let child = config_map(&namespace, "c", json!({}), json!({}));
        let first = cluster
            .wait_for(&child, &format!("{method}: c at 1"), |cm| {
                cm["data"]["value"] == "1"
            })
            .await;
        cluster.apply(&widget(2)).await;
        match method {
            "InPlace" => {
                let updated = cluster
                    .wait_for(&child, "InPlace: c at 2", |cm| cm["data"]["value"] == "2")
                    .await;
                assert_eq!(uid(&updated), uid(&first), "updated in place");
            }
            "Recreate" => {
                let recreated = cluster
                    .wait_for(&child, "Recreate: c at 2", |cm| cm["data"]["value"] == "2")
                    .await;
                assert_ne!(uid(&recreated), uid(&first), "recreated");
            }
            _ => {
                quiet(&id(&name)).await;
                let kept = cluster.get(&child).await.expect("c stays");
                assert_eq!(kept["data"]["value"], "1", "OnDelete leaves it");
                assert_eq!(uid(&kept), uid(&first));
                // Until someone deletes it: then it comes back as desired now.
                cluster.delete(&child).await;
                cluster
                    .wait_for(&child, "OnDelete: c back at 2", |cm| {
                        cm["data"]["value"] == "2" && uid(cm) != uid(&first)
                    })
                    .await;
            }
        }
    }
}

/// The Pods of a CatSet, by name, as the API has them now.
async fn pods(cluster: &Cluster, namespace: &str) -> Vec<Value> {
    cluster
        .list(&named("v1", "Pod", namespace, "any"))
        .await
        .into_iter()
        .filter(|pod| object::name(pod).starts_with("web-"))
        .collect()
}

/// What a kubelet would report for a Pod that started and passes its readiness probe.
async fn make_ready(cluster: &Cluster, pod: &Value) {
    cluster
        .patch_status(
            pod,
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        )
        .await;
}

/// Waits for Pod `name` to exist with `image` (and a uid other than `not_uid`), makes it Ready,
/// and returns it.
async fn ready_pod(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    image: &str,
    not_uid: &str,
) -> Value {
    let pod = named("v1", "Pod", namespace, name);
    let created = cluster
        .wait_for(&pod, &format!("{name} at {image}"), |p| {
            p["spec"]["containers"][0]["image"] == image && uid(p) != not_uid
        })
        .await;
    make_ready(cluster, &created).await;
    created
}

/// Metacontroller's examples/catset test.sh, with the Rhai port of its hook: Pods come up one at
/// a time, scale up and down, roll out one at a time waiting for Ready (and stall, saying why,
/// while the new Pod is not), and the finalize hook scales to zero before the CatSet goes.
#[tokio::test]
async fn catset_rolls_out_one_ready_pod_at_a_time_and_finalizes() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("catset"));
    cluster.install(CATSET_CRDS, "CatSet", &group).await;
    let namespace = test_namespace(&cluster.client, "composite-catset").await;
    let name = unique_name("catset");
    let mut controller = composite(
        &name,
        (&format!("{group}/v1"), "catsets"),
        json!([
            {"apiVersion": "v1", "resource": "pods", "updateStrategy": {
                "method": "RollingRecreate",
                "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}
            }},
            {"apiVersion": "v1", "resource": "persistentvolumeclaims"}
        ]),
        json!({"sync": rhai(CATSET_RHAI), "finalize": rhai(CATSET_RHAI)}),
    );
    controller["spec"]["parentResource"]["revisionHistory"] =
        json!({"fieldPaths": ["spec.template"]});
    cluster.apply(&controller).await;
    let catset = |replicas: i64, image: &str| {
        json!({
            "apiVersion": format!("{group}/v1"), "kind": "CatSet",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": replicas, "serviceName": "web",
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx", "component": "backend"}},
                    "spec": {"terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "nginx", "image": image}]}
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "www", "labels": {"app": "nginx"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                }]
            }
        })
    };
    let ready = |count: i64| {
        move |c: &Value| c["status"]["readyReplicas"] == count && c["status"]["replicas"] == count
    };

    // "Wait for 3 Pods to be Ready": each is created once the one before is Ready.
    cluster.apply(&catset(3, "nginx:1")).await;
    for pod in ["web-0", "web-1", "web-2"] {
        ready_pod(&cluster, &namespace, pod, "nginx:1", "").await;
    }
    let parent = cluster
        .wait_for(&catset(3, "nginx:1"), "3 ready", ready(3))
        .await;
    assert_eq!(condition(&parent, "Updated")["status"], "True", "{parent}");
    let pvc = named("v1", "PersistentVolumeClaim", &namespace, "www-web-2");
    cluster.wait_for(&pvc, "a PVC per ordinal", |_| true).await;

    // "Scale up to 4", "scale down to 2": replicas is outside fieldPaths, so no rollout.
    cluster.apply(&catset(4, "nginx:1")).await;
    ready_pod(&cluster, &namespace, "web-3", "nginx:1", "").await;
    cluster
        .wait_for(&catset(4, "nginx:1"), "4 ready", ready(4))
        .await;
    cluster.apply(&catset(2, "nginx:1")).await;
    cluster
        .wait_for(&catset(2, "nginx:1"), "2 ready", ready(2))
        .await;
    eventually("web-2 and web-3 gone", || async {
        (pods(&cluster, &namespace).await.len() == 2).then_some(())
    })
    .await;
    assert!(
        cluster.get(&pvc).await.is_some(),
        "PVCs stay after a scale down"
    );

    // A new template: web-1 (listed first) is recreated, and the rollout waits for it.
    let before: Vec<(String, String)> = pods(&cluster, &namespace)
        .await
        .iter()
        .map(|p| (object::name(p).to_string(), uid(p)))
        .collect();
    let old_uid = |pod: &str| before.iter().find(|(n, _)| n == pod).unwrap().1.clone();
    cluster.apply(&catset(2, "nginx:2")).await;
    let web1 = named("v1", "Pod", &namespace, "web-1");
    let recreated = cluster
        .wait_for(&web1, "web-1 recreated at nginx:2", |p| {
            p["spec"]["containers"][0]["image"] == "nginx:2"
        })
        .await;
    assert_ne!(uid(&recreated), old_uid("web-1"));
    let stalled = cluster
        .wait_for(
            &catset(2, "nginx:2"),
            "the rollout waiting for web-1",
            |c| {
                condition(c, "Updated")["message"]
                    == "Pod web-1 failed status check: required condition type missing: \"Ready\""
            },
        )
        .await;
    assert_eq!(condition(&stalled, "Updated")["reason"], "RolloutWaiting");
    // Stalled means stalled: nothing else moves while web-1 is not Ready.
    quiet(&id(&name)).await;
    let web0 = cluster
        .get(&named("v1", "Pod", &namespace, "web-0"))
        .await
        .expect("web-0");
    assert_eq!(uid(&web0), old_uid("web-0"));
    assert_eq!(web0["spec"]["containers"][0]["image"], "nginx:1");
    // Not ready, with a reason: still stalled, and the message says so.
    cluster
        .patch_status(
            &recreated,
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}),
        )
        .await;
    cluster
        .wait_for(&catset(2, "nginx:2"), "the reason of the stall", |c| {
            condition(c, "Updated")["message"]
                == "Pod web-1 failed status check: \"Ready\" condition status is \"False\" (want \"True\")"
        })
        .await;

    // Ready: the rollout resumes with web-0, then reports it is done.
    make_ready(&cluster, &recreated).await;
    let new_web0 = ready_pod(&cluster, &namespace, "web-0", "nginx:2", &old_uid("web-0")).await;
    assert_eq!(
        object::label(&new_web0, REVISION_LABEL),
        object::label(&recreated, REVISION_LABEL)
    );
    let done = cluster
        .wait_for(&catset(2, "nginx:2"), "the rollout done", |c| {
            condition(c, "Updated")["status"] == "True" && c["status"]["readyReplicas"] == 2
        })
        .await;
    let revisions = cluster
        .list(&named("apps/v1", "ControllerRevision", &namespace, "any"))
        .await;
    assert_eq!(
        revisions.len(),
        1,
        "only the latest revision is kept: {revisions:?}"
    );
    assert_eq!(
        condition(&done, "Updated")["message"],
        format!("latest ControllerRevision: {}", object::name(&revisions[0]))
    );

    // Deleting: the finalize hook scales to zero first (a finalizer of the test's own keeps the
    // CatSet readable once the controller's is gone, as in test.sh).
    let hold = "metascript.test/hold";
    merge_patch(
        &cluster,
        &done,
        json!({"metadata": {"finalizers": [format!("metascript.dev/composite-{name}"), hold]}}),
    )
    .await;
    cluster.delete(&catset(2, "nginx:2")).await;
    let finalized = cluster
        .wait_for(&catset(2, "nginx:2"), "scaled to zero and finalized", |c| {
            c["status"]["replicas"] == 0 && c["metadata"]["finalizers"] == json!([hold])
        })
        .await;
    assert!(object::is_deleting(&finalized));
    assert!(
        pods(&cluster, &namespace).await.is_empty(),
        "the finalize hook deleted the Pods"
    );
    merge_patch(
        &cluster,
        &finalized,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    cluster
        .wait_gone(&catset(2, "nginx:2"), "the CatSet gone")
        .await;
}

/// Three Shards, shard-2 first, each carrying the Widget's `spec.value`.
const SHARDS_HOOK: &str = r#"
let parent = request.parent;
let children = [];
for i in [2, 1, 0] {
    children.push(#{
        apiVersion: parent.spec.shardApiVersion, kind: "Shard",
        metadata: #{ name: `shard-${i}`, labels: parent.spec.selector.matchLabels },
        spec: #{ value: parent.spec.value },
    });
}
#{ children: children }
"#;

/// A Shard the way its controller would report it: observed generation, and Ready.
async fn shard_ready(cluster: &Cluster, shard: &Value, ready: bool) {
    cluster
        .patch_status(
            shard,
            json!({
                "observedGeneration": shard["metadata"]["generation"],
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]
            }),
        )
        .await;
}

struct Shards {
    cluster: Cluster,
    namespace: String,
    widgets: String,
    shards: String,
    name: String,
}

impl Shards {
    /// A RollingInPlace controller of Shards checked for Ready, and a Widget at value 1 whose
    /// three Shards are Ready.
    async fn new(prefix: &str, hook: &str) -> Shards {
        let mut cluster = Cluster::new().await;
        let (widgets, shards) = install_test_types(&mut cluster, prefix, true).await;
        let namespace = test_namespace(&cluster.client, &format!("composite-{prefix}")).await;
        let name = unique_name(prefix);
        let fixture = Shards {
            cluster,
            namespace,
            widgets,
            shards,
            name,
        };
        fixture.cluster.apply(&fixture.controller(hook)).await;
        fixture.cluster.apply(&fixture.widget(1)).await;
        for i in 0..3 {
            let shard = fixture.wait_value(i, 1).await;
            shard_ready(&fixture.cluster, &shard, true).await;
        }
        fixture
            .cluster
            .wait_for(&fixture.widget(1), "the rollout at rest", |w| {
                condition(w, "Updated")["status"] == "True"
            })
            .await;
        fixture
    }

    fn controller(&self, hook: &str) -> Value {
        composite(
            &self.name,
            (&self.widgets, "widgets"),
            json!([{"apiVersion": self.shards, "resource": "shards", "updateStrategy": {
                "method": "RollingInPlace",
                "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}
            }}]),
            json!({"sync": rhai(hook)}),
        )
    }

    fn widget(&self, value: i64) -> Value {
        widget(
            &self.widgets,
            &self.namespace,
            "w",
            json!({"selector": {"matchLabels": {"app": self.name}}, "value": value,
                   "shardApiVersion": self.shards}),
        )
    }

    fn shard(&self, i: usize) -> Value {
        named(
            &self.shards,
            "Shard",
            &self.namespace,
            &format!("shard-{i}"),
        )
    }

    async fn wait_value(&self, i: usize, value: i64) -> Value {
        self.cluster
            .wait_for(&self.shard(i), &format!("shard-{i} at {value}"), |s| {
                s["spec"]["value"] == value
            })
            .await
    }

    async fn values(&self) -> Vec<i64> {
        let mut values = Vec::new();
        for i in 0..3 {
            let shard = self.cluster.get(&self.shard(i)).await.expect("shard");
            values.push(shard["spec"]["value"].as_i64().unwrap());
        }
        values
    }
}

#[tokio::test]
async fn rolling_in_place_waits_for_each_child_to_observe_its_spec_and_pass_its_checks() {
    let fixture = Shards::new("inplace", SHARDS_HOOK).await;
    let uids: Vec<String> = {
        let mut uids = Vec::new();
        for i in 0..3 {
            uids.push(uid(&fixture.cluster.get(&fixture.shard(i)).await.unwrap()));
        }
        uids
    };
    fixture.cluster.apply(&fixture.widget(2)).await;
    let moved = fixture.wait_value(2, 2).await;
    let waiting = wait_updated(
        &fixture.cluster,
        &fixture.widget(2),
        "waiting for shard-2",
        |c| c["message"] == "Shard shard-2 has not observed its latest spec yet",
    )
    .await;
    assert_eq!(condition(&waiting, "Updated")["reason"], "RolloutWaiting");
    quiet(&id(&fixture.name)).await;
    assert_eq!(fixture.values().await, [1, 1, 2], "one at a time");
    // Observed but not Ready: still waiting, now for the check.
    shard_ready(&fixture.cluster, &moved, false).await;
    wait_updated(&fixture.cluster, &fixture.widget(2), "waiting for Ready", |c| {
        c["message"]
            == "Shard shard-2 failed status check: \"Ready\" condition status is \"False\" (want \"True\")"
    })
    .await;
    assert_eq!(fixture.values().await, [1, 1, 2]);
    for i in [2, 1, 0] {
        let shard = fixture.wait_value(i, 2).await;
        assert_eq!(uid(&shard), uids[i], "updated in place");
        shard_ready(&fixture.cluster, &shard, true).await;
    }
    fixture
        .cluster
        .wait_for(&fixture.widget(2), "the rollout done", |w| {
            condition(w, "Updated")["status"] == "True"
        })
        .await;
}

#[tokio::test]
async fn a_script_reloaded_mid_rollout_rolls_on_one_child_at_a_time() {
    let fixture = Shards::new("reload", SHARDS_HOOK).await;
    fixture.cluster.apply(&fixture.widget(2)).await;
    fixture.wait_value(2, 2).await;
    wait_updated(
        &fixture.cluster,
        &fixture.widget(2),
        "waiting for shard-2",
        |c| c["reason"] == "RolloutWaiting",
    )
    .await;

    // A new script (it adds a field to every Shard) is a new revision: it rolls out as a
    // template change would, never to every Shard at once.
    let edited = SHARDS_HOOK.replace(
        "spec: #{ value: parent.spec.value },",
        "spec: #{ value: parent.spec.value, script: \"two\" },",
    );
    fixture.cluster.apply(&fixture.controller(&edited)).await;
    let moved = fixture
        .cluster
        .wait_for(&fixture.shard(2), "shard-2 at the new script", |s| {
            s["spec"]["script"] == "two"
        })
        .await;
    quiet(&id(&fixture.name)).await;
    for i in [0, 1] {
        let shard = fixture.cluster.get(&fixture.shard(i)).await.unwrap();
        assert_eq!(
            shard["spec"],
            json!({"value": 1}),
            "shard-{i} waits its turn"
        );
    }
    shard_ready(&fixture.cluster, &moved, true).await;
    for i in [1, 0] {
        let shard = fixture
            .cluster
            .wait_for(
                &fixture.shard(i),
                &format!("shard-{i} at the new script"),
                |s| s["spec"] == json!({"value": 2, "script": "two"}),
            )
            .await;
        shard_ready(&fixture.cluster, &shard, true).await;
    }
    fixture
        .cluster
        .wait_for(&fixture.widget(2), "the rollout done", |w| {
            condition(w, "Updated")["status"] == "True"
        })
        .await;
    let revisions = fixture
        .cluster
        .list(&named(
            "apps/v1",
            "ControllerRevision",
            &fixture.namespace,
            "any",
        ))
        .await;
    assert_eq!(revisions.len(), 1, "{revisions:?}");
}

/// Copies the data of every related ConfigMap (customize selects those labelled
/// `role: source` in the parent's namespace) into one child.
const CUSTOMIZE_LUA: &str = r#"
return { relatedResources = array({
  { apiVersion = "v1", resource = "configmaps", labelSelector = { matchLabels = { role = "source" } } },
}) }
"#;
const MERGE_LUA: &str = r#"
local data, sources = {}, 0
for _, source in pairs(request.related["ConfigMap.v1"]) do
  sources = sources + 1
  for key, value in pairs(get_path(source, "data", {})) do
    data[key] = value
  end
end
return {
  status = { sources = sources },
  children = array({
    { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = "merged", labels = request.parent.spec.selector.matchLabels },
      data = map(data) },
  }),
}
"#;

#[tokio::test]
async fn customize_relates_objects_whose_changes_resync_the_parent() {
    let mut cluster = Cluster::new().await;
    let (widgets, _) = install_test_types(&mut cluster, "customize", true).await;
    let namespace = test_namespace(&cluster.client, "composite-customize").await;
    let name = unique_name("customize");
    let children = json!([{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}]);
    cluster
        .apply(&composite(
            &name,
            (&widgets, "widgets"),
            children,
            json!({"sync": lua(MERGE_LUA), "customize": lua(CUSTOMIZE_LUA)}),
        ))
        .await;
    let source = |key: &str, value: &str| {
        config_map(
            &namespace,
            &format!("source-{key}"),
            json!({"role": "source"}),
            json!({key: value}),
        )
    };
    cluster.apply(&source("a", "1")).await;
    let parent = widget(
        &widgets,
        &namespace,
        "w",
        json!({"selector": {"matchLabels": {"app": name}}}),
    );
    cluster.apply(&parent).await;
    let merged = config_map(&namespace, "merged", json!({}), json!({}));
    cluster
        .wait_for(&merged, "merged from a", |cm| {
            cm["data"] == json!({"a": "1"})
        })
        .await;
    // A new related object, and a change to one: the parent syncs again each time.
    cluster.apply(&source("b", "2")).await;
    cluster
        .wait_for(&merged, "merged from a and b", |cm| {
            cm["data"] == json!({"a": "1", "b": "2"})
        })
        .await;
    cluster.apply(&source("a", "3")).await;
    cluster
        .wait_for(&merged, "a changed", |cm| {
            cm["data"] == json!({"a": "3", "b": "2"})
        })
        .await;
    cluster
        .wait_for(&parent, "two sources counted", |w| {
            w["status"]["sources"] == 2
        })
        .await;
}

/// One ConfigMap per name; fails when the parent says so, or returns a child its selector does
/// not match when asked to.
const FAILING_HOOK: &str = r#"
let parent = request.parent;
if get_path(parent, "spec.fail", false) { throw "told to fail"; }
let labels = if get_path(parent, "spec.stray", false) { #{ app: "nobody" } } else { parent.spec.selector.matchLabels };
let children = [];
for child in parent.spec.names {
    children.push(#{ apiVersion: "v1", kind: "ConfigMap", metadata: #{ name: child, labels: labels } });
}
#{ status: #{ ok: true }, children: children }
"#;

#[tokio::test]
async fn a_failing_hook_deletes_nothing_and_says_why_on_the_parent() {
    let mut cluster = Cluster::new().await;
    let (widgets, _) = install_test_types(&mut cluster, "failing", true).await;
    let namespace = test_namespace(&cluster.client, "composite-failing").await;
    let name = unique_name("failing");
    let children = json!([{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}]);
    cluster
        .apply(&composite(
            &name,
            (&widgets, "widgets"),
            children,
            json!({"sync": rhai(FAILING_HOOK)}),
        ))
        .await;
    let spec = |extra: Value| {
        let mut spec = json!({"selector": {"matchLabels": {"app": name}}, "names": ["a", "b"]});
        for (key, value) in extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        spec
    };
    let parent = widget(&widgets, &namespace, "w", spec(json!({})));
    cluster.apply(&parent).await;
    let child = |n: &str| config_map(&namespace, n, json!({}), json!({}));
    let a = cluster.wait_for(&child("a"), "a", |_| true).await;
    cluster.wait_for(&child("b"), "b", |_| true).await;
    let parent_uid = uid(&cluster.get(&parent).await.unwrap());
    let events: kube::Api<Event> = kube::Api::namespaced(cluster.client.clone(), &namespace);
    let about = ListParams::default().fields(&format!("involvedObject.uid={parent_uid}"));

    for (extra, reason, says) in [
        (json!({"fail": true}), "HookFailed", "told to fail"),
        (
            json!({"stray": true}),
            "InvalidResponse",
            "children[0].metadata.labels",
        ),
    ] {
        cluster
            .apply(&widget(&widgets, &namespace, "w", spec(extra)))
            .await;
        let event = eventually(&format!("a {reason} Event on the Widget"), || async {
            events
                .list(&about)
                .await
                .expect("events")
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
        })
        .await;
        assert!(
            event.message.as_deref().unwrap_or_default().contains(says),
            "{event:?}"
        );
        assert!(cluster.get(&child("a")).await.is_some(), "nothing deleted");
        assert!(cluster.get(&child("b")).await.is_some(), "nothing deleted");
    }
    // Fixed: the sync goes on where it left off.
    cluster
        .apply(&widget(
            &widgets,
            &namespace,
            "w",
            spec(json!({"names": ["a"]})),
        ))
        .await;
    cluster
        .wait_gone(&child("b"), "b deleted once asked for")
        .await;
    assert_eq!(uid(&cluster.get(&child("a")).await.unwrap()), uid(&a));
}

/// Metacontroller #68: a parent type without a status subresource, whose status writes move
/// its generation, settles: observedGeneration matches and nothing more is written.
#[tokio::test]
async fn a_parent_without_a_status_subresource_settles_with_no_writes() {
    let mut cluster = Cluster::new().await;
    let (widgets, _) = install_test_types(&mut cluster, "nostatus", false).await;
    let namespace = test_namespace(&cluster.client, "composite-nostatus").await;
    let name = unique_name("nostatus");
    let children = json!([{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}]);
    cluster
        .apply(&composite(
            &name,
            (&widgets, "widgets"),
            children,
            json!({"sync": rhai(CLAIM_HOOK)}),
        ))
        .await;
    let parent = widget(
        &widgets,
        &namespace,
        "w",
        json!({"selector": {"matchLabels": {"app": name}}, "names": ["x"]}),
    );
    cluster.apply(&parent).await;
    cluster
        .wait_for(&parent, "status with observedGeneration", |w| {
            w["status"]["children"] == 1
                && w["status"]["observedGeneration"] == w["metadata"]["generation"]
        })
        .await;
    let (writes, _) = quiet(&id(&name)).await;
    let settled = cluster.get(&parent).await.unwrap();
    // A change of spec: one more status write, and settled again.
    cluster
        .apply(&widget(
            &widgets,
            &namespace,
            "w",
            json!({"selector": {"matchLabels": {"app": name}}, "names": ["x", "y"]}),
        ))
        .await;
    cluster
        .wait_for(&parent, "two children", |w| {
            w["status"]["children"] == 2
                && w["status"]["observedGeneration"] == w["metadata"]["generation"]
        })
        .await;
    let (after, _) = quiet(&id(&name)).await;
    let (still, _) = quiet(&id(&name)).await;
    assert_eq!(after, still, "no writes once settled");
    assert!(after > writes);
    let now = cluster.get(&parent).await.unwrap();
    assert!(
        now["metadata"]["generation"].as_i64() > settled["metadata"]["generation"].as_i64(),
        "status writes through the main resource move the generation"
    );
}
