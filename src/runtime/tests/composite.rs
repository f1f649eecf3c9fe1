//! A CompositeController's sync path, step by step: the Widget is the parent, ConfigMaps its
//! children, claimed by a generated selector.

use super::cluster::WIDGETS;
use super::decorator::widget;
use super::steps::{self, Step};
use serde_json::{Value, json};

/// Returns a ConfigMap `<widget>-<n>` for each `n` in `spec.children`, with their count as
/// the parent's status; fails when the widget asks to.
const SYNC: &str = r#"
let widget = request.parent;
if get_path(widget, "spec.fail", false) { throw "the widget asked to fail"; }
let maps = [];
for child in get_path(widget, "spec.children", []) {
    maps.push(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: `${name(widget)}-${child}` },
        data: #{ child: child },
    });
}
#{ children: maps, status: #{ made: maps.len() } }
"#;

fn controller() -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": "compose"},
        "spec": {
            "parentResource": {"apiVersion": WIDGETS.api_version, "resource": WIDGETS.plural},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "generateSelector": true,
            "hooks": {"sync": {"script": {"language": "rhai", "inline": SYNC}}},
        }
    })
}

#[tokio::test]
async fn a_composite_follows_its_hook_and_writes_nothing_when_nothing_changed() {
    let mut cluster = super::cluster::Cluster::start().await;
    cluster.put(controller()).await;
    let steps = vec![
        Step {
            what: "the first sync creates every child and writes the status",
            put: vec![widget(json!({"children": ["a", "b"]}))],
            children: &["w-a", "w-b"],
            status: json!({"made": 2}),
            synced: "True",
        },
        Step {
            what: "a child the hook leaves out is deleted",
            put: vec![widget(json!({"children": ["a"]}))],
            children: &["w-a"],
            status: json!({"made": 1}),
            synced: "True",
        },
        Step {
            what: "a hook error leaves the children and the status as they were",
            put: vec![widget(json!({"children": [], "fail": true}))],
            children: &["w-a"],
            status: json!({"made": 1}),
            synced: "False",
        },
        Step {
            what: "the next good answer is applied",
            put: vec![widget(json!({"children": ["c"]}))],
            children: &["w-c"],
            status: json!({"made": 1}),
            synced: "True",
        },
    ];
    steps::play(&mut cluster, steps).await;
}
