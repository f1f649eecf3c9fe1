//! `scripts/namespace-as-a-service` on the plane, as docs/tutorial-namespaces.md walks it: a
//! Team gets its Namespace and, in it, a quota, its group's RoleBinding and a default-deny
//! NetworkPolicy, all owned by the Team; deleting the Team deletes the Namespace, and so all in
//! it (the data-loss case the tutorial warns of).

use crate::support::cluster::Cluster;
use crate::support::unique_name;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use metascript::object;
use serde_json::{Value, json};

const CRDS: &str = include_str!("../../scripts/namespace-as-a-service/crds.yaml");
const CONTROLLER: &str = include_str!("../../scripts/namespace-as-a-service/controller.lua.yaml");
const SYNC_LUA: &str = include_str!("../../scripts/namespace-as-a-service/sync.lua");

fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": namespace}})
}

/// The shipped controller, with the test's own group and the script inline (no ConfigMap), and
/// a Team of it: the cluster, the Team, its Namespace's name and the Team's uid.
async fn a_team() -> (Cluster, Value, String, String) {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("teams"));
    cluster.install(CRDS, "Team", &group).await;
    let mut controller: Value = serde_saphyr::from_str(CONTROLLER).expect("the manifest parses");
    controller["metadata"]["name"] = json!(unique_name("namespace-as-a-service"));
    controller["spec"]["parentResource"]["apiVersion"] = json!(format!("{group}/v1"));
    controller["spec"]["hooks"]["sync"] =
        json!({"script": {"language": "lua", "inline": SYNC_LUA}});
    cluster.apply(&controller).await;

    let ns = unique_name("payments");
    let team = json!({
        "apiVersion": format!("{group}/v1"), "kind": "Team",
        "metadata": {"name": ns},
        "spec": {"group": "payments-devs", "quota": {"pods": "50"}}
    });
    cluster.apply(&team).await;
    let team_uid = cluster.wait_for(&team, "the Team", |_| true).await["metadata"]["uid"]
        .as_str()
        .expect("a uid")
        .to_string();
    (cluster, team, ns, team_uid)
}

/// Whether `child`'s controller is the object of uid `owner`.
fn owned_by(child: &Value, owner: &str) -> bool {
    object::controller_ref(child).and_then(|r| r.get("uid").and_then(Value::as_str)) == Some(owner)
}

#[tokio::test]
async fn a_team_owns_its_namespace_and_takes_it_along_when_deleted() {
    let (cluster, team, ns, team_uid) = a_team().await;
    let owned = |child: &Value| owned_by(child, &team_uid);

    let namespace = named("v1", "Namespace", "", &ns);
    let namespace = cluster.wait_for(&namespace, "the Namespace", owned).await;
    assert_eq!(
        object::label(&namespace, "pod-security.kubernetes.io/enforce"),
        Some("restricted")
    );
    let quota = named("v1", "ResourceQuota", &ns, "team-quota");
    let quota = cluster.wait_for(&quota, "the quota", owned).await;
    assert_eq!(quota["spec"]["hard"]["pods"], "50");
    assert_eq!(quota["spec"]["hard"]["requests.cpu"], "4");
    let editors = named(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        &ns,
        "team-editors",
    );
    let editors = cluster.wait_for(&editors, "the RoleBinding", owned).await;
    assert_eq!(editors["subjects"][0]["name"], "payments-devs");
    let deny = named("networking.k8s.io/v1", "NetworkPolicy", &ns, "default-deny");
    let deny = cluster.wait_for(&deny, "the NetworkPolicy", owned).await;
    assert_eq!(deny["spec"]["podSelector"], json!({}));
    cluster
        .wait_for(&team, "the Namespace's phase in status", |t| {
            t["status"]["phase"] == "Active" && t["status"]["namespace"] == ns.as_str()
        })
        .await;

    // Deleting the Team sets the Namespace terminating (garbage collection), which deletes
    // everything in it; waiting for the namespace controller to finish would only time it.
    cluster.delete(&team).await;
    let terminating = cluster
        .wait_for(&namespace, "the Namespace terminating", |n| {
            n["metadata"]["deletionTimestamp"].is_string()
        })
        .await;
    assert_eq!(terminating["metadata"]["uid"], namespace["metadata"]["uid"]);
}

#[tokio::test]
async fn a_namespace_deleted_under_its_team_comes_back_and_its_refusals_raise_no_warning() {
    let (cluster, team, ns, team_uid) = a_team().await;
    let owned = |child: &Value| owned_by(child, &team_uid);
    let namespace = named("v1", "Namespace", "", &ns);
    let quota = named("v1", "ResourceQuota", &ns, "team-quota");
    cluster.wait_for(&quota, "the quota", owned).await;
    let first = cluster.wait_for(&namespace, "the Namespace", owned).await;

    // An object only the test lets go keeps the Namespace terminating once it is deleted. The
    // namespace controller deletes the Team's children in it; the Team's sync makes them again,
    // and the API server refuses every create there.
    let mut hold = named("v1", "ConfigMap", &ns, "hold");
    hold["metadata"]["finalizers"] = json!(["test.metascript.dev/hold"]);
    cluster.apply(&hold).await;
    cluster.delete(&namespace).await;
    let synced_reason = |team: &Value| {
        team["status"]["conditions"]
            .as_array()
            .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Synced"))
            .map(|synced| synced["reason"].clone())
    };
    cluster
        .wait_for(&team, "the Team's Synced condition", |t| {
            synced_reason(t) == Some(json!("NamespaceTerminating"))
        })
        .await;

    // Once the Namespace is gone, the Team's retry makes it again, with its children.
    hold["metadata"]["finalizers"] = json!([]);
    cluster.apply(&hold).await;
    let again = cluster
        .wait_for(&namespace, "the Namespace made again", |n| {
            owned(n) && n["metadata"]["uid"] != first["metadata"]["uid"]
        })
        .await;
    assert!(again["metadata"]["deletionTimestamp"].is_null());
    cluster
        .wait_for(&quota, "the quota made again", owned)
        .await;
    cluster
        .wait_for(&team, "the Team synced again", |t| {
            synced_reason(t) == Some(json!("Synced"))
        })
        .await;

    // The refusals were expected: none of them was a Warning Event about the Team. (A create
    // racing the Namespace's own, once it is gone, may be: `ApplyFailed`, not found.)
    let events: Api<Event> = Api::all(cluster.client.clone());
    let about_team = ListParams::default().fields(&format!("involvedObject.uid={team_uid}"));
    let warnings: Vec<_> = events
        .list(&about_team)
        .await
        .expect("listing the Team's events")
        .items
        .into_iter()
        .filter(|event| {
            event.type_.as_deref() == Some("Warning")
                && matches!(
                    event.reason.as_deref(),
                    Some("NamespaceTerminating" | "Forbidden")
                )
        })
        .map(|event| (event.reason, event.message))
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
}
