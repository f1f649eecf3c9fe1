//! What a sync's read of its own object leaves in the cache's recently used set: nothing; a
//! read of some of its fields; and the orphans a parent may adopt, read by their labels first.

use super::api::{FakeApi, Served};
use crate::store::ObjectStore;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::mpsc;

const CONFIG_MAPS: Served = Served::namespaced("v1", "ConfigMap", "configmaps");

#[tokio::test]
async fn a_syncs_read_is_not_kept_decoded() {
    let api = FakeApi::new(&[CONFIG_MAPS]);
    api.put(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": "a"},
        "data": {"k": "v"},
    }));
    let (events, _received) = mpsc::unbounded_channel();
    let (informers, resolved) = api.informers("configmaps", events).await;
    informers.ensure(&resolved).await.unwrap();
    let resource = &resolved.resource;
    let read = || {
        informers
            .read_for_sync(resource, Some("ns"), "a", None)
            .unwrap()
    };

    let first = read();
    assert!(first.text().is_none());
    assert_eq!(first.object["data"]["k"], "v");
    // Not kept: the next read decodes the text again, whole or not.
    assert!(!Arc::ptr_eq(&first.object, &read().object));
    let whole = read().whole();
    assert!(!Arc::ptr_eq(&whole, &read().object));
    assert_eq!(whole, first.object);
}

#[tokio::test]
async fn a_read_of_some_fields_holds_the_text_and_is_made_whole_from_it() {
    let api = FakeApi::new(&[CONFIG_MAPS]);
    let whole = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "ns", "name": "a", "labels": {"x": "1"}},
        "data": {"k": "v"},
    });
    api.put(whole.clone());
    let (events, _received) = mpsc::unbounded_channel();
    let (informers, resolved) = api.informers("configmaps", events).await;
    informers.ensure(&resolved).await.unwrap();
    let resource = &resolved.resource;
    let only: &[&str] = &["apiVersion", "kind", "metadata"];
    let read = || {
        informers
            .read_for_sync(resource, Some("ns"), "a", Some(only))
            .unwrap()
    };

    let partial = read();
    assert_eq!(partial.object["metadata"]["labels"]["x"], "1");
    assert!(partial.object.get("data").is_none());
    let text = partial.text().expect("the whole object's text").clone();
    let decoded: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(decoded["data"], whole["data"]);

    // Made whole from the text it holds, and still not kept.
    let whole_read = partial.whole();
    assert_eq!(*whole_read, decoded);
    assert_eq!(whole_read["data"], whole["data"]);
    let again = read();
    assert!(again.object.get("data").is_none());
    assert!(again.text().is_some());
}

#[tokio::test]
async fn a_parent_is_handed_only_the_orphans_its_selector_matches() {
    let api = FakeApi::new(&[CONFIG_MAPS]);
    let config_map = |name: &str, app: &str, owners: serde_json::Value| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": name, "labels": {"app": app},
                         "ownerReferences": owners},
            "data": {"k": "v"},
        })
    };
    let controller = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "p",
                             "controller": true}]);
    api.put(config_map("mine", "web", json!([])));
    api.put(config_map("other-app", "db", json!([])));
    api.put(config_map("owned", "web", controller));
    let (events, _received) = mpsc::unbounded_channel();
    let (informers, resolved) = api.informers("configmaps", events).await;
    informers.ensure(&resolved).await.unwrap();
    let selector =
        crate::selector::LabelSelector::from_json(&json!({"matchLabels": {"app": "web"}})).unwrap();
    // Each by name, and whole (the claim and the hooks read all of it).
    let orphans = || -> Vec<(String, serde_json::Value)> {
        ObjectStore::orphans(&*informers, &resolved.resource, Some("ns"), &selector)
            .iter()
            .map(|o| (crate::object::name(o).to_string(), o["data"].clone()))
            .collect()
    };
    let mine = [("mine".to_string(), json!({"k": "v"}))];

    assert_eq!(orphans(), mine);
    // Read from text, as a cold cache holds them: the same.
    informers.forget_decoded();
    assert_eq!(orphans(), mine);
}
