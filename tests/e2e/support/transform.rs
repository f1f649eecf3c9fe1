//! MapControllers as tests write them, and the configmap-transform example (a ConfigTemplate
//! parent rendering ConfigMaps) that several test modules run.

use super::cluster::Cluster;
use super::unique_name;
use serde_json::{Value, json};

pub const TRANSFORM_CRDS: &str = include_str!("../../../scripts/configmap-transform/crds.yaml");
pub const TRANSFORM_LUA: &str = include_str!("../../../scripts/configmap-transform/map.lua");

/// A MapController of one parent, input and output type (outputs updated in place).
pub fn map_controller(
    name: &str,
    parent: (&str, &str),
    input: &str,
    output: (&str, &str),
    hooks: Value,
) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
        "metadata": {"name": name},
        "spec": {
            "parentResource": {"apiVersion": parent.0, "resource": parent.1},
            "inputResources": [{"apiVersion": "v1", "resource": input}],
            "outputResources": [{"apiVersion": output.0, "resource": output.1, "updateStrategy": {"method": "InPlace"}}],
            "hooks": hooks
        }
    })
}

pub fn config_map(namespace: &str, name: &str, labels: Value, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": data
    })
}

/// Installs the ConfigTemplate CRD in a group of its own (named after `prefix`), returned.
pub async fn install_transform(cluster: &mut Cluster, prefix: &str) -> String {
    let group = format!("{}.example.com", unique_name(prefix));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    group
}

/// The example's MapController over the ConfigTemplates of `group`, with the map hook `script`
/// (Lua, inline).
pub fn transform_controller(name: &str, group: &str, script: &str) -> Value {
    map_controller(
        name,
        (&format!("{group}/v1"), "configtemplates"),
        "configmaps",
        ("v1", "configmaps"),
        json!({"map": {"script": {"language": "lua", "inline": script}}}),
    )
}

/// The ConfigTemplate `t` of `group` in `namespace`, selecting the ConfigMaps labelled
/// `render: yes` and prefixing their keys with `X_`.
pub fn config_template(group: &str, namespace: &str) -> Value {
    json!({
        "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
        "metadata": {"name": "t", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"render": "yes"}}, "keyPrefix": "X_"}
    })
}

/// Three source ConfigMaps (`one`, `two`, `three`, labelled `render: yes`) and a template
/// selecting them, once its status counts their three rendered outputs. Returns the template.
pub async fn render_three(cluster: &Cluster, group: &str, namespace: &str) -> Value {
    for source in ["one", "two", "three"] {
        cluster
            .apply(&config_map(
                namespace,
                source,
                json!({"render": "yes"}),
                json!({"k": source}),
            ))
            .await;
    }
    let template = config_template(group, namespace);
    cluster.apply(&template).await;
    cluster
        .wait_for(&template, "three rendered outputs counted", |t| {
            t["status"]["outputs"]["configmaps"]["total"] == 3
        })
        .await
}
