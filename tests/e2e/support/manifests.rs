//! Controller manifests many tests share.

use serde_json::{Value, json};

/// A DecoratorController of the objects of one type (`api_version`, `resource`) labelled
/// `test-controller: <name>`, so only its own test's objects are its targets; `hooks` as given.
pub fn decorator(name: &str, (api_version, resource): (&str, &str), hooks: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{
                "apiVersion": api_version, "resource": resource,
                "labelSelector": {"matchLabels": {"test-controller": name}}
            }],
            "hooks": hooks
        }
    })
}

/// Hooks of only a sync hook, its script inline.
pub fn inline_sync(language: &str, code: &str) -> Value {
    json!({"sync": {"script": {"language": language, "inline": code}}})
}

/// The service-per-pod example's controller: StatefulSets labelled for it that ask for
/// service-per-pod (its two annotations), Services attached and updated in place.
pub fn service_per_pod(name: &str, hooks: Value) -> Value {
    let mut controller = decorator(name, ("apps/v1", "statefulsets"), hooks);
    controller["spec"]["resources"][0]["annotationSelector"] = json!({"matchExpressions": [
        {"key": "service-per-pod-label", "operator": "Exists"},
        {"key": "service-per-pod-ports", "operator": "Exists"}
    ]});
    controller["spec"]["attachments"] = json!([{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}]);
    controller
}
