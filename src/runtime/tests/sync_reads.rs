//! What a sync's read of its own object leaves in the cache's recently used set: nothing,
//! unless the sync writes the object.

use super::api::{FakeApi, Served};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::mpsc;

const CONFIG_MAPS: Served = Served::namespaced("v1", "ConfigMap", "configmaps");

#[tokio::test]
async fn a_syncs_read_stays_decoded_only_when_the_sync_keeps_it() {
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
    let read = || informers.read_for_sync(resource, Some("ns"), "a").unwrap();

    let first = read();
    assert_eq!(first.object["data"]["k"], "v");
    // Not kept: the next read decodes the text again.
    assert!(!Arc::ptr_eq(&first.object, &read().object));

    informers.keep(resource, &first);
    let kept = read();
    assert!(Arc::ptr_eq(&first.object, &kept.object));
    // Read from the recently used set, it is kept there already.
    informers.keep(resource, &kept);
    assert!(Arc::ptr_eq(&first.object, &read().object));
}
