//! A MapController's sync path, step by step: the Widget is the parent, and selects ConfigMaps
//! as inputs; each input maps to ConfigMaps the parent owns. ConfigMaps are both input and
//! output, as in `scripts/configmap-transform`: the outputs carry no `feeds` label, and a
//! parent is never fed what it controls anyway.

use super::cluster::{CONFIG_MAPS, WIDGETS};
use super::decorator::widget;
use super::steps::{self, Step};
use serde_json::{Value, json};

/// Maps an input to a ConfigMap `<input>-<suffix>` for each suffix in its comma-separated
/// `data.outputs`; fails when the input asks to.
const MAP: &str = r#"
let input = request.input;
if get_path(input, "data.fail", "") == "true" { throw "the input asked to fail"; }
let outputs = [];
for suffix in get_path(input, "data.outputs", "").split(",") {
    if suffix == "" { continue; }
    outputs.push(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: `${name(input)}-${suffix}` },
        data: #{ from: name(input) },
    });
}
#{ outputs: outputs }
"#;

fn controller() -> Value {
    let configmaps = json!({"apiVersion": "v1", "resource": CONFIG_MAPS.plural});
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
        "metadata": {"name": "mapper"},
        "spec": {
            "parentResource": {"apiVersion": WIDGETS.api_version, "resource": WIDGETS.plural},
            "inputResources": [configmaps],
            "outputResources": [configmaps],
            "hooks": {"map": {"script": {"language": "rhai", "inline": MAP}}},
        }
    })
}

/// The parent: it selects the ConfigMaps labelled `feeds: w`.
fn parent() -> Value {
    widget(json!({"selector": {"matchLabels": {"feeds": "w"}}}))
}

/// An input ConfigMap, selected by the parent or not.
fn input(name: &str, selected: bool, data: Value) -> Value {
    let labels = match selected {
        true => json!({"feeds": "w"}),
        false => json!({}),
    };
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "team", "labels": labels},
        "data": data,
    })
}

/// The parent's counts: selected inputs and owned outputs.
fn counts(inputs: u64, outputs: u64) -> Value {
    json!({
        "inputs": {"configmaps": {"total": inputs}},
        "outputs": {"configmaps": {"total": outputs}},
    })
}

#[tokio::test]
async fn a_map_follows_its_hook_and_writes_nothing_when_nothing_changed() {
    let mut cluster = super::cluster::Cluster::start().await;
    cluster.put(controller()).await;
    let steps = vec![
        Step {
            what: "the first sync maps every selected input and counts them",
            put: vec![
                parent(),
                input("a", true, json!({"outputs": "x,y"})),
                input("b", true, json!({"outputs": "x"})),
                input("c", false, json!({"outputs": "x"})),
            ],
            children: &["a-x", "a-y", "b-x"],
            status: counts(2, 3),
            synced: "True",
        },
        Step {
            what: "an output the hook leaves out is deleted",
            put: vec![input("a", true, json!({"outputs": "x"}))],
            children: &["a-x", "b-x"],
            status: counts(2, 2),
            synced: "True",
        },
        Step {
            what: "a hook error leaves the input's outputs as they were",
            put: vec![input("a", true, json!({"outputs": "", "fail": "true"}))],
            children: &["a-x", "b-x"],
            status: counts(2, 2),
            synced: "False",
        },
        Step {
            what: "the next good answer is applied",
            put: vec![input("a", true, json!({"outputs": "z"}))],
            children: &["a-z", "b-x"],
            status: counts(2, 2),
            synced: "True",
        },
        Step {
            what: "the outputs of an input no longer selected are deleted",
            put: vec![input("b", false, json!({"outputs": "x"}))],
            children: &["a-z"],
            status: counts(1, 1),
            synced: "True",
        },
    ];
    steps::play(&mut cluster, steps).await;
}
