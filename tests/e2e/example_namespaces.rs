//! `scripts/namespace-as-a-service` on the plane, as docs/tutorial-namespaces.md walks it: a
//! Team gets its Namespace and, in it, a quota, its group's RoleBinding and a default-deny
//! NetworkPolicy, all owned by the Team; deleting the Team deletes the Namespace, and so all in
//! it (the data-loss case the tutorial warns of).

use crate::support::cluster::Cluster;
use crate::support::unique_name;
use metascript::object;
use serde_json::{Value, json};

const CRDS: &str = include_str!("../../scripts/namespace-as-a-service/crds.yaml");
const CONTROLLER: &str = include_str!("../../scripts/namespace-as-a-service/controller.lua.yaml");
const SYNC_LUA: &str = include_str!("../../scripts/namespace-as-a-service/sync.lua");

fn named(api_version: &str, kind: &str, namespace: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": namespace}})
}

#[tokio::test]
async fn a_team_owns_its_namespace_and_takes_it_along_when_deleted() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("teams"));
    cluster.install(CRDS, "Team", &group).await;
    // The shipped manifest, with the test's group and the script inline (no ConfigMap).
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
    let owned = |child: &Value| {
        object::controller_ref(child).and_then(|r| r.get("uid").and_then(Value::as_str))
            == Some(team_uid.as_str())
    };

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
