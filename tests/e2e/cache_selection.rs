//! What an operator caches follows what its controllers select: a decorator whose rule has a
//! label selector caches the objects it matches, not its type's, and follows an edit of the
//! selector; a controller that needs the whole type (a finalize hook) caches it whole. Read
//! from the metrics of an operator process serving only this test's controllers.

use crate::support::operator::{OWN_OPERATOR_LABEL, apply, wait_for};
use crate::support::process::{OperatorProcess, labelled_config_map};
use crate::support::{client, eventually, test_namespace, unique_name};
use serde_json::{Value, json};

const CACHED: &str = r#"metascript_cached_objects{resource="ConfigMap.v1"}"#;
const SELECTED_WATCHES: &str = r#"metascript_watches{resource="ConfigMap.v1",selection="labels"}"#;
const WHOLE_WATCHES: &str = r#"metascript_watches{resource="ConfigMap.v1",selection="all"}"#;

/// A decorator of the ConfigMaps labelled `app: <app>`, labelling them `seen: <app>`.
fn decorator(instance: &str, app: &str, finalize: bool) -> Value {
    let sync = json!({"script": {"language": "rhai",
        "inline": format!(r#"#{{ labels: #{{ "seen": "{app}" }}, finalized: true }}"#)}});
    let mut hooks = json!({"sync": sync});
    if finalize {
        hooks["finalize"] = sync.clone();
    }
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": instance, "labels": {OWN_OPERATOR_LABEL: instance}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": {"app": app}}}],
            "hooks": hooks
        }
    })
}

async fn wait_seen(client: &kube::Client, namespace: &str, name: &str, app: &str) {
    let like = labelled_config_map(namespace, name, json!({}));
    wait_for(client, &like, &format!("{name} seen by {app}"), |o| {
        o["metadata"]["labels"]["seen"] == app
    })
    .await;
}

/// Waits until the operator's metric `sample` is `value`.
async fn metric_is(operator: &OperatorProcess, sample: &str, value: f64) {
    eventually(&format!("{sample} = {value}"), || async {
        (operator.metric(sample)? == value).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_decorator_caches_only_what_its_selector_matches_and_follows_an_edit() {
    let client = client().await;
    let instance = unique_name("cache-select");
    let operator = OperatorProcess::start(&instance, &[]).await;
    let namespace = test_namespace(&client, "cache-select").await;
    // Label values unique to this test: the selectors are cluster-wide.
    let special = format!("{instance}-special");
    let other = format!("{instance}-other");
    for index in 0..30 {
        apply(
            &client,
            &labelled_config_map(&namespace, &format!("plain-{index}"), json!({})),
        )
        .await;
    }
    for name in ["special-0", "special-1", "special-2"] {
        apply(
            &client,
            &labelled_config_map(&namespace, name, json!({"app": special})),
        )
        .await;
    }
    for name in ["other-0", "other-1"] {
        apply(
            &client,
            &labelled_config_map(&namespace, name, json!({"app": other})),
        )
        .await;
    }

    apply(&client, &decorator(&instance, &special, false)).await;
    for name in ["special-0", "special-1", "special-2"] {
        wait_seen(&client, &namespace, name, &special).await;
    }
    metric_is(&operator, CACHED, 3.0).await;
    assert_eq!(operator.metric(SELECTED_WATCHES), Some(1.0));
    assert_eq!(operator.metric(WHOLE_WATCHES), Some(0.0));

    // An object that comes to match enters the cache and is decorated.
    apply(
        &client,
        &labelled_config_map(&namespace, "plain-0", json!({"app": special})),
    )
    .await;
    wait_seen(&client, &namespace, "plain-0", &special).await;
    metric_is(&operator, CACHED, 4.0).await;

    // A new selector: its objects are decorated, and the old selection leaves the cache once
    // the new version serves.
    apply(&client, &decorator(&instance, &other, false)).await;
    for name in ["other-0", "other-1"] {
        wait_seen(&client, &namespace, name, &other).await;
    }
    metric_is(&operator, CACHED, 2.0).await;
    assert_eq!(operator.metric(SELECTED_WATCHES), Some(1.0));

    // A finalize hook must see objects that stop matching: the type is cached whole.
    apply(&client, &decorator(&instance, &other, true)).await;
    metric_is(&operator, WHOLE_WATCHES, 1.0).await;
    metric_is(&operator, SELECTED_WATCHES, 0.0).await;
    let cached = operator.metric(CACHED).expect("metrics answer");
    assert!(cached >= 37.0, "every ConfigMap is cached: {cached}");
}
