//! A DecoratorController's sync path, step by step: each step edits the target and says what
//! the API must hold after the runtime settled.

use super::cluster::{CONFIG_MAPS, Cluster, WIDGETS};
use crate::api::ResourceRef;
use crate::runtime::watch::store::Swept;
use serde_json::{Value, json};

/// Attaches a ConfigMap `<widget>-<n>` for each `n` in `spec.children`, and fails when the
/// widget asks to.
const SYNC: &str = r#"
let widget = request.object;
if get_path(widget, "spec.fail", false) { throw "the widget asked to fail"; }
let maps = [];
for child in get_path(widget, "spec.children", []) {
    maps.push(#{
        apiVersion: "v1", kind: "ConfigMap",
        metadata: #{ name: `${name(widget)}-${child}`, namespace: namespace(widget) },
        data: #{ child: child },
    });
}
#{ attachments: maps }
"#;

/// Asks for no attachments until none is left, then lets the widget go.
const FINALIZE: &str = r#"
let left = get_path(request, ["attachments", "ConfigMap.v1"], #{});
#{ attachments: [], finalized: left.is_empty() }
"#;

pub(super) fn controller() -> Value {
    controller_running(SYNC)
}

/// The controller, its sync hook given.
pub(super) fn controller_running(sync: &str) -> Value {
    let inline = |code: &str| json!({"script": {"language": "rhai", "inline": code}});
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "decorate"},
        "spec": {
            "resources": [{"apiVersion": WIDGETS.api_version, "resource": WIDGETS.plural}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": inline(sync), "finalize": inline(FINALIZE)},
        }
    })
}

pub(super) fn widget(spec: Value) -> Value {
    json!({
        "apiVersion": WIDGETS.api_version, "kind": WIDGETS.kind,
        "metadata": {"name": "w", "namespace": "team"},
        "spec": spec,
    })
}

/// One edit of the target, and what follows.
struct Step {
    what: &'static str,
    spec: Value,
    /// The ConfigMaps in the widget's namespace afterwards.
    children: &'static [&'static str],
    /// The widget's `Synced` condition afterwards: written only by a failure and the
    /// sync that ends it.
    synced: Option<&'static str>,
}

/// The widget's `<controller>.metascript.dev/Synced` condition: its status and message (empty when there is none).
fn synced(cluster: &Cluster) -> (String, String) {
    let widget = cluster
        .api
        .get(WIDGETS.api_version, WIDGETS.plural, "team", "w");
    let conditions = widget
        .map(|w| w["status"]["conditions"].clone())
        .unwrap_or_default();
    let synced = conditions
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|c| c["type"].as_str().is_some_and(|t| t.ends_with("/Synced")))
        })
        .cloned()
        .unwrap_or_default();
    let text = |field: &str| synced[field].as_str().unwrap_or_default().to_string();
    (text("status"), text("message"))
}

#[tokio::test]
async fn a_decorator_follows_its_hook_and_writes_nothing_when_nothing_changed() {
    let mut cluster = Cluster::start().await;
    cluster.put(controller()).await;
    let steps = [
        Step {
            what: "the first sync attaches every child",
            spec: json!({"children": ["a", "b"]}),
            children: &["w-a", "w-b"],
            synced: None,
        },
        Step {
            what: "a child the hook leaves out is deleted",
            spec: json!({"children": ["a"]}),
            children: &["w-a"],
            synced: None,
        },
        Step {
            what: "a hook error leaves the children as they were",
            spec: json!({"children": [], "fail": true}),
            children: &["w-a"],
            synced: Some("False"),
        },
        Step {
            what: "the next good answer is applied",
            spec: json!({"children": ["c"]}),
            children: &["w-c"],
            synced: Some("True"),
        },
    ];
    for step in steps {
        cluster.writes();
        cluster.put(widget(step.spec)).await;
        let what = step.what;
        let writes = cluster.api.take_requests();
        assert_eq!(
            cluster.api.names("v1", CONFIG_MAPS.plural, "team"),
            step.children,
            "{what}: {writes:#?}"
        );
        let (status, message) = synced(&cluster);
        assert_eq!(
            status,
            step.synced.unwrap_or_default(),
            "{what}: {message} {writes:#?}"
        );
        if step.synced == Some("False") {
            assert!(
                message.contains("the widget asked to fail"),
                "{what}: {message}"
            );
            assert!(
                writes.iter().all(|w| !w.path.contains("/configmaps")),
                "{what}: no child written: {writes:#?}"
            );
            continue;
        }
        // From text, as a resync finds objects no longer recently used: the sync plans from
        // the widget's head and its hook reads the spec from the text.
        cluster.context.informers.forget_decoded();
        cluster.sync_again_all().await;
        assert_eq!(
            cluster.writes(),
            [],
            "{what}: an identical sync writes nothing"
        );
    }
}

#[tokio::test]
async fn a_deleted_target_is_finalized_before_it_goes() {
    let mut cluster = Cluster::start().await;
    cluster.put(controller()).await;
    cluster.put(widget(json!({"children": ["a"]}))).await;
    let held = cluster
        .api
        .get(WIDGETS.api_version, WIDGETS.plural, "team", "w");
    let finalizers = held.map(|w| w["metadata"]["finalizers"].clone());
    assert_eq!(
        finalizers,
        Some(json!(["metascript.dev/decorator-decorate"])),
        "a controller with a finalize hook holds its targets"
    );
    cluster
        .delete(WIDGETS.api_version, WIDGETS.plural, "team", "w")
        .await;
    assert_eq!(
        cluster.api.names("v1", CONFIG_MAPS.plural, "team"),
        Vec::<String>::new()
    );
    assert_eq!(
        cluster
            .api
            .names(WIDGETS.api_version, WIDGETS.plural, "team"),
        Vec::<String>::new()
    );
}

/// A controller `<name>` of the widgets labelled `pick: <name>` that labels each with
/// `seen: <seen>`.
fn picking(name: &str, seen: &str) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": WIDGETS.api_version, "resource": WIDGETS.plural,
                           "labelSelector": {"matchLabels": {"pick": name}}}],
            "hooks": {"sync": {"script": {"language": "rhai",
                "inline": format!("#{{ labels: #{{ seen: \"{seen}\" }} }}")}}},
        }
    })
}

#[tokio::test]
async fn a_new_version_of_a_label_scoped_controller_syncs_every_object_its_watch_holds() {
    let mut cluster = Cluster::start().await;
    cluster.put(picking("yes", "1")).await;
    // `c` is another controller's, in the same cache.
    cluster.put(picking("other", "1")).await;
    let widgets = [
        ("team", "a", "yes"),
        ("other", "b", "yes"),
        ("team", "c", "other"),
    ];
    for (namespace, name, pick) in widgets {
        cluster
            .put(json!({
                "apiVersion": WIDGETS.api_version, "kind": WIDGETS.kind,
                "metadata": {"name": name, "namespace": namespace, "labels": {"pick": pick}},
            }))
            .await;
    }
    let seen = |cluster: &Cluster| -> Vec<Value> {
        widgets
            .iter()
            .map(|(namespace, name, _)| {
                let widget = cluster
                    .api
                    .get(WIDGETS.api_version, WIDGETS.plural, namespace, name);
                widget.map_or(Value::Null, |w| w["metadata"]["labels"]["seen"].clone())
            })
            .collect()
    };
    assert_eq!(seen(&cluster), [json!("1"), json!("1"), json!("1")]);
    // The controller's watch holds `a` and `b`: a sweep names them without reading them.
    let reference = ResourceRef {
        api_version: WIDGETS.api_version.into(),
        resource: WIDGETS.plural.into(),
    };
    let resolved = cluster.context.discovery.cached(&reference).unwrap();
    let informers = &cluster.context.informers;
    let same_watch = informers.select(&resolved, "pick=yes").await.unwrap();
    let named: Vec<String> = informers
        .sweep(&resolved.resource, std::slice::from_ref(&same_watch))
        .into_iter()
        .filter_map(|swept| match swept {
            Swept::Selected(key) => Some(key.to_string()),
            Swept::Kept(_) => None,
        })
        .collect();
    assert_eq!(named.len(), 2, "{named:?}");
    drop(same_watch);

    // Nothing in the widgets changed: only the sweep of the new version's load queues them,
    // by the keys its label-selected watch holds them under, and not the other's.
    cluster.put(picking("yes", "2")).await;
    assert_eq!(seen(&cluster), [json!("2"), json!("2"), json!("1")]);
}
