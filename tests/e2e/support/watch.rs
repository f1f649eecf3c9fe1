//! Waiting on sets of objects with a watch: the moment the last object changes is seen at once,
//! with no polling interval to tune and no list requests piling up on the apiserver.

use super::WAIT;
use futures::StreamExt as _;
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Resource, ResourceExt as _};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;

/// Watches the objects of `api` (those carrying `labels`, a label selector, if given) until
/// `done` holds for all of them at once, and returns them, sorted by name. Panics after
/// [`WAIT`] with `what` and the names last seen.
pub async fn watch_until<K>(
    api: Api<K>,
    labels: Option<&str>,
    what: &str,
    done: impl Fn(&[K]) -> bool,
) -> Vec<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut config = watcher::Config::default();
    if let Some(labels) = labels {
        config = config.labels(labels);
    }
    let mut events = std::pin::pin!(watcher(api, config));
    let mut objects: BTreeMap<String, K> = BTreeMap::new();
    let mut init: BTreeMap<String, K> = BTreeMap::new();
    // Only a complete view is judged: between Init and InitDone `objects` is the previous list
    // (or nothing yet), and "no Pods left" must not pass on a list not yet read.
    let mut listed = false;
    let waited = tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            // A watch error is retried by the watcher itself; WAIT bounds the whole wait.
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Init => {
                    init.clear();
                    listed = false;
                }
                watcher::Event::InitApply(object) => {
                    init.insert(object.name_any(), object);
                }
                watcher::Event::InitDone => {
                    objects = std::mem::take(&mut init);
                    listed = true;
                }
                watcher::Event::Apply(object) => {
                    objects.insert(object.name_any(), object);
                }
                watcher::Event::Delete(object) => {
                    objects.remove(&object.name_any());
                }
            }
            if !listed {
                continue;
            }
            let current: Vec<K> = objects.values().cloned().collect();
            if done(&current) {
                return Some(current);
            }
        }
        None
    })
    .await;
    match waited {
        Ok(Some(objects)) => objects,
        Ok(None) => panic!("the watch for {what} ended"),
        Err(_) => panic!(
            "timed out after {WAIT:?} waiting for {what}; last seen: {:?}",
            objects.keys().collect::<Vec<_>>()
        ),
    }
}
