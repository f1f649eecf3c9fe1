//! A periodic resync skips the work items whose outcome cannot have changed: those whose last
//! sync was pure (a script that used no clock or randomness) and saw exactly what the cache
//! holds now. A hook that reads the clock runs on every resync; changes still reach every item
//! they concern (a watch event, a script edit), and after each the item is skipped again.
//! Counted per controller, so the other tests sharing the operator do not show up.

use crate::support::cluster::Cluster;
use crate::support::manifests::{self, inline_sync};
use crate::support::operator::{apply, operator, quiet, wait_for};
use crate::support::transform::{
    TRANSFORM_LUA, config_map, install_transform, render_three, transform_controller,
};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::runtime::ControllerId;
use serde_json::{Value, json};

/// Copies a target's data into an attachment and labels the target; `prelude` runs first.
fn decorator(name: &str, prelude: &str, label: &str) -> Value {
    let script = format!(
        r#"{prelude}
        let cm = request.object;
        #{{
            labels: #{{ "example.com/decorated": "{label}" }},
            attachments: [#{{
                apiVersion: "v1", kind: "ConfigMap",
                metadata: #{{ name: `${{name(cm)}}-copy` }},
                data: get_path(cm, "data", #{{}}),
            }}],
        }}"#
    );
    let mut controller =
        manifests::decorator(name, ("v1", "configmaps"), inline_sync("rhai", &script));
    controller["spec"]["attachments"] = json!([
        {"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}
    ]);
    controller
}

/// What a resync of a controller did once it settled: (syncs, writes, skipped), each counted
/// from before the resync.
async fn resync(controller: &ControllerId) -> (u64, u64, u64) {
    let operator = &operator().await.operator;
    let (writes, syncs) = quiet(controller).await;
    let skipped = operator.metrics().resync_skipped_of(controller);
    operator.resync(controller);
    let (writes_after, syncs_after) = quiet(controller).await;
    (
        syncs_after - syncs,
        writes_after - writes,
        operator.metrics().resync_skipped_of(controller) - skipped,
    )
}

#[tokio::test]
async fn a_decorator_resync_skips_pure_syncs_and_reruns_clock_readers() {
    let client = client().await;
    // The operator installs the CRDs.
    operator().await;
    let namespace = test_namespace(&client, "resync").await;
    let pure = ControllerId::new(
        metascript::kinds::decorator::KIND,
        unique_name("resync-pure"),
    );
    let clock = ControllerId::new(
        metascript::kinds::decorator::KIND,
        unique_name("resync-clock"),
    );
    apply(&client, &decorator(&pure.name, "", "yes")).await;
    // Reads the clock and ignores it: the output never changes, yet nothing proves that.
    apply(&client, &decorator(&clock.name, "let t = now();", "yes")).await;
    for controller in [&pure, &clock] {
        for target in ["a", "b", "c"] {
            let name = format!("{}-{target}", controller.name);
            let labels = json!({"test-controller": controller.name});
            apply(
                &client,
                &config_map(&namespace, &name, labels, json!({"k": target})),
            )
            .await;
        }
    }
    for controller in [&pure, &clock] {
        for target in ["a", "b", "c"] {
            let copy = config_map(
                &namespace,
                &format!("{}-{target}-copy", controller.name),
                json!({}),
                json!({}),
            );
            wait_for(&client, &copy, "the attachment", |o| {
                o["data"]["k"] == target
            })
            .await;
        }
    }

    let (syncs, writes, skipped) = resync(&pure).await;
    assert_eq!(
        (syncs, writes, skipped),
        (0, 0, 3),
        "a resync of pure, converged targets runs nothing"
    );
    let (syncs, writes, skipped) = resync(&clock).await;
    assert!(
        syncs >= 3,
        "a hook that reads the clock runs on every resync ({syncs} syncs)"
    );
    assert_eq!(
        (writes, skipped),
        (0, 0),
        "and still writes nothing when its answer is the same"
    );

    // Someone edits an attachment: its watch event repairs it, as without fingerprints, and
    // the repaired target is skipped by the next resync.
    let copy = config_map(
        &namespace,
        &format!("{}-a-copy", pure.name),
        json!({}),
        json!({"k": "edited"}),
    );
    apply(&client, &copy).await;
    wait_for(&client, &copy, "the attachment repaired", |o| {
        o["data"]["k"] == "a"
    })
    .await;
    assert_eq!(resync(&pure).await, (0, 0, 3));

    // A script edit re-syncs every target; then they are skipped again.
    apply(&client, &decorator(&pure.name, "", "v2")).await;
    for target in ["a", "b", "c"] {
        let like = config_map(
            &namespace,
            &format!("{}-{target}", pure.name),
            json!({}),
            json!({}),
        );
        wait_for(&client, &like, "the edited script's label", |o| {
            o["metadata"]["labels"]["example.com/decorated"] == "v2"
        })
        .await;
    }
    assert_eq!(resync(&pure).await, (0, 0, 3));
}

#[tokio::test]
async fn a_map_resync_skips_pure_pairs_and_still_repairs_outputs() {
    let client = client().await;
    let mut cluster = Cluster::new().await;
    let group = install_transform(&mut cluster, "resync-map").await;
    let namespace = test_namespace(&client, "resync-map").await;
    let map = ControllerId::new(metascript::kinds::map::KIND, unique_name("resync-map"));
    let controller = |script: &str| transform_controller(&map.name, &group, script);
    apply(&client, &controller(TRANSFORM_LUA)).await;
    render_three(&cluster, &group, &namespace).await;
    // The parent's aggregated status was written after the pairs synced: not a change to them.
    assert_eq!(
        resync(&map).await,
        (0, 0, 3),
        "a resync of pure, converged pairs runs nothing"
    );

    // Someone edits an output: its watch event re-maps the pair, which repairs it.
    let output =
        |data: Value| config_map(&namespace, "one-rendered", json!({"render": "yes"}), data);
    cluster.apply(&output(json!({"X_k": "edited"}))).await;
    cluster
        .wait_for(&output(json!({})), "the output repaired", |o| {
            o["data"]["X_k"] == "one"
        })
        .await;
    assert_eq!(resync(&map).await, (0, 0, 3));

    // An input changes: only its pair runs (an event), and a resync then skips all three.
    cluster
        .apply(&config_map(
            &namespace,
            "two",
            json!({"render": "yes"}),
            json!({"k": "2"}),
        ))
        .await;
    eventually("the changed input rendered", || async {
        let rendered = cluster
            .get(&config_map(
                &namespace,
                "two-rendered",
                json!({}),
                json!({}),
            ))
            .await?;
        (rendered["data"]["X_k"] == "2").then_some(())
    })
    .await;
    assert_eq!(resync(&map).await, (0, 0, 3));

    // A script edit maps every pair again; then they are skipped again.
    let edited = TRANSFORM_LUA.replace(
        "local prefix = get_path(template, \"spec.keyPrefix\", \"\")",
        "local prefix = \"EDITED_\" .. get_path(template, \"spec.keyPrefix\", \"\")",
    );
    assert_ne!(edited, TRANSFORM_LUA, "the script edit applies");
    apply(&client, &controller(&edited)).await;
    for source in ["one", "two", "three"] {
        let rendered = config_map(
            &namespace,
            &format!("{source}-rendered"),
            json!({}),
            json!({}),
        );
        cluster
            .wait_for(&rendered, "rendered by the edited script", |o| {
                o["data"]["EDITED_X_k"].is_string()
            })
            .await;
    }
    assert_eq!(resync(&map).await, (0, 0, 3));
}
