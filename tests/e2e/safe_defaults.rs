//! Safe and visible by default, against a real kube-apiserver: a parent does not take over an
//! object someone else made (the "namespace as a service" data-loss case), and every parent and
//! decorated target says in its own status whether its last sync went through.

use crate::support::cluster::Cluster;
use crate::support::operator::wait_for_event;
use crate::support::{test_namespace, unique_name};
use metascript::object;
use serde_json::{Value, json};

/// Team: a cluster-scoped parent with a status subresource, as a platform team would define it.
const TEAM_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: teams.test.example.com}
spec:
  group: test.example.com
  scope: Cluster
  names: {kind: Team, plural: teams, singular: team}
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

/// Each Team owns the Namespace its spec names; `spec.fail` makes the hook fail.
const TEAM_HOOK: &str = r#"
let team = request.parent;
if get_path(team, "spec.fail", false) { throw "told to fail"; }
#{
    children: [#{
        apiVersion: "v1", kind: "Namespace",
        metadata: #{ name: team.spec.namespace, labels: #{ team: name(team) } },
    }],
    status: #{ namespace: team.spec.namespace },
}
"#;

async fn install_teams(cluster: &mut Cluster, prefix: &str) -> String {
    let group = format!("{}.example.com", unique_name(prefix));
    cluster.install(TEAM_CRD, "Team", &group).await;
    format!("{group}/v1")
}

fn team_controller(name: &str, teams: &str, adopt: Option<&str>) -> Value {
    let mut rule = json!({"apiVersion": "v1", "resource": "namespaces",
        "updateStrategy": {"method": "InPlace"}});
    if let Some(adopt) = adopt {
        rule["adopt"] = json!(adopt);
    }
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": name},
        "spec": {
            "parentResource": {"apiVersion": teams, "resource": "teams"},
            "generateSelector": true,
            "childResources": [rule],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": TEAM_HOOK}}}
        }
    })
}

fn team(api_version: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": "Team", "metadata": {"name": name}, "spec": spec})
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Waits for the object's condition `kind` to have `status` (and `reason`), returning it.
async fn wait_condition(
    cluster: &Cluster,
    like: &Value,
    kind: &str,
    status: &str,
    reason: &str,
) -> Value {
    let object = cluster
        .wait_for(like, &format!("{kind}={status} ({reason})"), |o| {
            condition(o, kind).is_some_and(|c| c["status"] == status && c["reason"] == reason)
        })
        .await;
    condition(&object, kind).cloned().expect("just seen")
}

#[tokio::test]
async fn a_hand_made_namespace_is_not_taken_over_unless_the_rule_says_always() {
    let mut cluster = Cluster::new().await;
    let teams = install_teams(&mut cluster, "adopt").await;
    let name = unique_name("adopt");
    cluster.apply(&team_controller(&name, &teams, None)).await;

    // Someone made this Namespace by hand and keeps data in it.
    let precious = test_namespace(&cluster.client, "adopt-precious").await;
    let data = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "precious", "namespace": precious}, "data": {"keep": "me"}});
    cluster.apply(&data).await;

    let colliding = team(&teams, &unique_name("a"), json!({"namespace": precious}));
    cluster.apply(&colliding).await;
    let refused = wait_condition(&cluster, &colliding, "Synced", "False", "AdoptionRefused").await;
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&precious) && message.contains("adopt: Always"),
        "the condition names the object and the way out: {message}"
    );
    let event = wait_for_event(&cluster.client, None, "AdoptionRefused", |e| {
        crate::support::operator::regarding_name(e) == Some(object::name(&colliding))
    })
    .await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or_default()
            .contains(&precious),
        "{event:?}"
    );
    let untouched = cluster
        .get(&namespace(&precious))
        .await
        .expect("still there");
    assert!(
        untouched["metadata"]["ownerReferences"].is_null(),
        "not taken: {untouched}"
    );
    assert!(
        object::label(&untouched, "team").is_none(),
        "not written: {untouched}"
    );

    // Made together, as GitOps applies them: the Team's sync may run before the operator's
    // cache has the Namespace, and still must not take it.
    let together = unique_name("adopt-together");
    cluster.apply(&namespace(&together)).await;
    let racing = team(&teams, &unique_name("r"), json!({"namespace": together}));
    cluster.apply(&racing).await;
    wait_condition(&cluster, &racing, "Synced", "False", "AdoptionRefused").await;
    let raced = cluster
        .get(&namespace(&together))
        .await
        .expect("still there");
    assert!(
        raced["metadata"]["ownerReferences"].is_null(),
        "not taken: {raced}"
    );

    // A Team of a fresh name gets its Namespace, and says it synced.
    let fresh_name = unique_name("adopt-fresh");
    let fresh = team(&teams, &unique_name("b"), json!({"namespace": fresh_name}));
    cluster.apply(&fresh).await;
    let synced = wait_condition(&cluster, &fresh, "Synced", "True", "Synced").await;
    assert!(synced["lastTransitionTime"].is_string(), "{synced}");
    let made = cluster
        .wait_for(&namespace(&fresh_name), "the fresh Namespace", |_| true)
        .await;
    assert_eq!(object::controller_ref(&made).unwrap()["kind"], "Team");
    let fresh_status = cluster.get(&fresh).await.unwrap()["status"].clone();
    assert_eq!(
        fresh_status["namespace"], fresh_name,
        "the hook's status is kept beside the condition: {fresh_status}"
    );

    // Deleting the would-be parent leaves the hand-made Namespace and its data alone.
    cluster.delete(&colliding).await;
    cluster
        .wait_gone(&colliding, "the colliding Team gone")
        .await;
    let after = cluster.get(&namespace(&precious)).await.expect("kept");
    assert!(after["metadata"]["deletionTimestamp"].is_null(), "{after}");
    assert_eq!(
        cluster.get(&data).await.expect("kept")["data"]["keep"],
        "me"
    );

    // Told to, it takes the Namespace over.
    cluster
        .apply(&team_controller(&name, &teams, Some("Always")))
        .await;
    let taker = team(&teams, &unique_name("c"), json!({"namespace": precious}));
    cluster.apply(&taker).await;
    let taken = cluster
        .wait_for(&namespace(&precious), "the Namespace taken over", |ns| {
            object::controller_ref(ns).is_some()
        })
        .await;
    assert_eq!(
        object::controller_ref(&taken).unwrap()["name"],
        object::name(&taker)
    );
    wait_condition(&cluster, &taker, "Synced", "True", "Synced").await;
}

/// Fails while the target has the label `fail`; returns no status of its own.
const FLAKY_DECORATOR: &str = r#"
if get_path(request.object, "metadata.labels.fail") then error("told to fail") end
return { labels = { decorated = "yes" } }
"#;

#[tokio::test]
async fn a_failing_sync_shows_on_its_parent_and_target_and_clears_when_fixed() {
    let mut cluster = Cluster::new().await;
    let teams = install_teams(&mut cluster, "synced").await;
    let composite = unique_name("synced");
    cluster
        .apply(&team_controller(&composite, &teams, None))
        .await;
    // The decorator's targets are Teams of a type of their own: a composite replaces its
    // parents' whole status (Metacontroller's semantics), another writer's conditions too.
    let decorated_teams = install_teams(&mut cluster, "synced-d").await;
    let decorator = unique_name("synced-d");
    cluster
        .apply(&json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": decorator},
            "spec": {
                "resources": [{"apiVersion": decorated_teams, "resource": "teams"}],
                "hooks": {"sync": {"script": {"language": "lua", "inline": FLAKY_DECORATOR}}}
            }
        }))
        .await;
    let target_condition = format!("{decorator}.metascript.dev/Synced");

    let parent = team(
        &teams,
        &unique_name("t"),
        json!({"namespace": unique_name("synced-ns")}),
    );
    cluster.apply(&parent).await;
    wait_condition(&cluster, &parent, "Synced", "True", "Synced").await;
    let mut target = team(&decorated_teams, &unique_name("d"), json!({}));
    target["metadata"]["labels"] = json!({"fail": "yes"});
    cluster.apply(&target).await;
    let failing = wait_condition(&cluster, &target, &target_condition, "False", "HookFailed").await;
    assert!(
        failing["message"]
            .as_str()
            .unwrap_or_default()
            .contains("told to fail"),
        "{failing}"
    );
    assert!(
        failing["observedGeneration"].is_null(),
        "no generation on someone else's object: {failing}"
    );

    // The composite's hook fails: its condition turns False, the hook's status stays.
    merge(&cluster, &parent, json!({"spec": {"fail": true}})).await;
    let failed = wait_condition(&cluster, &parent, "Synced", "False", "HookFailed").await;
    assert_eq!(failed["observedGeneration"], 2, "{failed}");
    let status = cluster.get(&parent).await.unwrap()["status"].clone();
    assert!(status["namespace"].is_string(), "old status kept: {status}");

    // Both fixed: both True again.
    merge(&cluster, &parent, json!({"spec": {"fail": false}})).await;
    merge(
        &cluster,
        &target,
        json!({"metadata": {"labels": {"fail": null}}}),
    )
    .await;
    wait_condition(&cluster, &parent, "Synced", "True", "Synced").await;
    let decorated = cluster
        .wait_for(&target, "the target decorated", |t| {
            object::label(t, "decorated") == Some("yes")
        })
        .await;
    wait_condition(&cluster, &decorated, &target_condition, "True", "Synced").await;
}

async fn merge(cluster: &Cluster, object: &Value, patch: Value) {
    cluster
        .api(object)
        .patch(
            object::name(object),
            &Default::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap_or_else(|e| panic!("patching {}: {e}", object::ObjectKey::of(object)));
}
