//! Sync now (`metascript.dev/sync-requested-at`): a new value on a controller syncs everything
//! it acts on once, even what nothing changed for; on a target, that target; the same value
//! again does nothing.

use crate::support::operator::{apply, operator, quiet, wait_for};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::api::SYNC_REQUESTED_ANNOTATION;
use metascript::runtime::ControllerId;
use serde_json::{Value, json};

fn controller(name: &str, requested: Option<&str>) -> Value {
    let annotations = match requested {
        Some(at) => json!({SYNC_REQUESTED_ANNOTATION: at}),
        None => json!({}),
    };
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": {"sync-now": name}}}],
            "hooks": {"sync": {"script": {"language": "lua",
                "inline": "return { labels = { synced = 'yes' } }"}}}
        }
    })
}

#[tokio::test]
async fn a_requested_sync_runs_once_per_value() {
    let client = client().await;
    let metrics = operator().await.operator.metrics();
    let namespace = test_namespace(&client, "sync-now").await;
    let name = unique_name("sync-now");
    let id = ControllerId::new(metascript::kinds::decorator::KIND, &name);
    apply(&client, &controller(&name, None)).await;
    let targets: Vec<Value> = (0..3)
        .map(|i| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": format!("t{i}"), "namespace": namespace, "labels": {"sync-now": name}}})
        })
        .collect();
    for target in &targets {
        apply(&client, target).await;
    }
    for target in &targets {
        wait_for(&client, target, "the label", |o| {
            o["metadata"]["labels"]["synced"] == "yes"
        })
        .await;
    }
    let (writes, syncs) = quiet(&id).await;

    // On the controller: every target once, although nothing changed (no write).
    apply(&client, &controller(&name, Some("2026-11-25T01:00:00Z"))).await;
    eventually("a sync of each of the three targets", || async {
        (metrics.syncs_of(&id) >= syncs + 3).then_some(())
    })
    .await;
    let (writes_after, syncs_after) = quiet(&id).await;
    assert_eq!(syncs_after, syncs + 3, "each target exactly once");
    assert_eq!(writes_after, writes, "nothing changed, nothing written");

    // The same value again (another edit of the object) asks for nothing.
    let mut relabelled = controller(&name, Some("2026-11-25T01:00:00Z"));
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    apply(&client, &relabelled).await;
    let (_, syncs_same) = quiet(&id).await;
    assert_eq!(
        syncs_same, syncs_after,
        "the same value syncs nothing again"
    );

    // On a target: that target.
    let mut one = targets[0].clone();
    one["metadata"]["annotations"] = json!({SYNC_REQUESTED_ANNOTATION: "now"});
    apply(&client, &one).await;
    eventually("a sync of the annotated target", || async {
        (metrics.syncs_of(&id) > syncs_same).then_some(())
    })
    .await;
    let (_, syncs_one) = quiet(&id).await;
    assert_eq!(syncs_one, syncs_same + 1, "only the annotated target");
}
