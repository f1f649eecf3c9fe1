//! The step table a parent-owning kind's sync path is played through: each step writes objects
//! as a user would and says what the API must hold once the runtime settled and reported.
//! The parent is the Widget `team/w`, its children ConfigMaps it controls.

use super::cluster::{CONFIG_MAPS, Cluster, WIDGETS};
use serde_json::Value;

/// What every failing hook of these tests throws.
pub(super) const FAILURE: &str = "asked to fail";

/// One edit, and what follows.
pub(super) struct Step {
    pub what: &'static str,
    /// Written in this order as a user would, before the runtime settles.
    pub put: Vec<Value>,
    /// The ConfigMaps the parent controls afterwards.
    pub children: &'static [&'static str],
    /// Fields of the parent's status afterwards (each compared whole).
    pub status: Value,
    /// The parent's `Synced` condition afterwards ("" when it has none).
    pub synced: &'static str,
}

/// Plays the steps: after each one, the children, the status and the `Synced` condition are
/// as it says; a failing step writes no child, and any other step is followed by a resync
/// that must write nothing.
pub(super) async fn play(cluster: &mut Cluster, steps: Vec<Step>) {
    for step in steps {
        let what = step.what;
        cluster.writes();
        for object in step.put {
            cluster.api.put(object);
        }
        settle_and_report(cluster).await;
        let writes = cluster.api.take_requests();
        assert_eq!(children(cluster), step.children, "{what}: {writes:#?}");
        let parent = parent(cluster);
        for (field, expected) in step.status.as_object().into_iter().flatten() {
            assert_eq!(
                parent["status"][field], *expected,
                "{what}: status.{field} in {parent:#}"
            );
        }
        let (status, message) = synced(&parent);
        assert_eq!(status, step.synced, "{what}: {message} {writes:#?}");
        if step.synced == "False" {
            assert!(message.contains(FAILURE), "{what}: {message}");
            assert!(
                writes.iter().all(|w| !w.path.contains("/configmaps")),
                "{what}: no child written: {writes:#?}"
            );
            continue;
        }
        cluster.sync_again_all().await;
        settle_and_report(cluster).await;
        assert_eq!(
            cluster.writes(),
            [],
            "{what}: an identical sync writes nothing"
        );
    }
}

/// Runs the runtime until it is quiet, then the status loop once (a MapController's parent
/// counts and `Synced` condition are written there), and lets the runtime act on that.
async fn settle_and_report(cluster: &mut Cluster) {
    cluster.settle().await;
    for kind in crate::kinds::ALL {
        let kind = cluster.kind(kind.name()).clone();
        kind.write_statuses(&cluster.context).await;
    }
    cluster.settle().await;
}

fn parent(cluster: &Cluster) -> Value {
    let parent = cluster
        .api
        .get(WIDGETS.api_version, WIDGETS.plural, "team", "w");
    parent.expect("the parent exists")
}

/// The names of the ConfigMaps the parent controls.
fn children(cluster: &Cluster) -> Vec<String> {
    let parent = parent(cluster);
    let names = cluster.api.names("v1", CONFIG_MAPS.plural, "team");
    names
        .into_iter()
        .filter(|name| {
            let child = cluster.api.get("v1", CONFIG_MAPS.plural, "team", name);
            child.is_some_and(|child| crate::object::is_controlled_by(&child, &parent))
        })
        .collect()
}

/// The parent's `Synced` condition: its status and message (empty when there is none).
fn synced(parent: &Value) -> (String, String) {
    let conditions = parent["status"]["conditions"].as_array();
    let synced = conditions
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Synced")
        .cloned()
        .unwrap_or_default();
    let text = |field: &str| synced[field].as_str().unwrap_or_default().to_string();
    (text("status"), text("message"))
}
