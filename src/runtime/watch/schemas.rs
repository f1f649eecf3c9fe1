//! The schemas what controllers write is checked against before it is applied
//! ([`crate::schema`]): built-in types' from the bundle, and each custom type's from its
//! CustomResourceDefinition, followed by a watch of that one CRD from the first write of the
//! type on. A cluster may hold thousands of CRDs, with schemas of hundreds of kilobytes each;
//! controllers write a handful of types, and only theirs are kept.

use crate::resources::ResourceType;
use crate::schema::{Schemas, crd_essentials};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a first write of a custom type waits for its CRD to be read: a watch that cannot
/// start (RBAC narrowed, the API server slow) leaves the check to the API server meanwhile.
pub(crate) const FIRST_READ: Duration = Duration::from_secs(5);

pub struct LiveSchemas {
    client: kube::Client,
    schemas: Arc<Schemas>,
    /// CRD name → whether its first list is done.
    followed: Mutex<HashMap<String, watch::Receiver<bool>>>,
    /// CRDs whose first read took longer than [`FIRST_READ`].
    slow: Mutex<std::collections::HashSet<String>>,
    /// The watches, stopped with the operator.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// Bumped when a followed CRD changes or goes after its first read: what `spec.tests`
    /// found against the old schema may not hold any more.
    changes: watch::Sender<u64>,
}

impl Drop for LiveSchemas {
    fn drop(&mut self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

impl std::fmt::Debug for LiveSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSchemas")
            .field("followed", &self.followed.lock().len())
            .finish()
    }
}

impl LiveSchemas {
    pub(crate) fn new(client: kube::Client, schemas: Arc<Schemas>) -> LiveSchemas {
        // Off the async threads, and before the first write needs it.
        tokio::task::spawn_blocking(crate::schema::load_bundle);
        LiveSchemas {
            client,
            schemas,
            followed: Mutex::default(),
            slow: Mutex::default(),
            tasks: Mutex::default(),
            changes: watch::Sender::new(0),
        }
    }

    /// Changes of the followed CRDs after their first read (see `changes`).
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Built-in types' schemas judged for the Kubernetes version the API server says it runs,
    /// and the CRDs followed as they are asked for.
    pub async fn for_cluster(client: kube::Client) -> LiveSchemas {
        let server = client.apiserver_version().await.ok();
        let git_version = server.as_ref().map(|info| info.git_version.as_str());
        let builtins = Schemas::for_server(git_version);
        if builtins.builtins_elsewhere() {
            tracing::info!(server = ?git_version, bundled = crate::schema::BUNDLED_KUBERNETES, "the cluster runs another Kubernetes version than the built-in schemas bundled: unknown fields of built-in types are left to the API server");
        }
        LiveSchemas::new(client, Arc::new(builtins))
    }

    pub(crate) fn schemas(&self) -> &Schemas {
        &self.schemas
    }

    /// The schemas followed so far, for checks that run off the async runtime.
    pub(crate) fn shared(&self) -> Arc<dyn crate::schema::SchemaSource> {
        self.schemas.clone()
    }

    /// Makes sure the CRDs of these types are followed, and waits up to `wait` (at most
    /// [`FIRST_READ`]) for the first read of the new ones, all at once. Built-in types need
    /// nothing.
    pub(crate) async fn follow<'a>(
        &self,
        types: impl IntoIterator<Item = &'a ResourceType>,
        wait: Duration,
    ) {
        let mut waiting = Vec::new();
        for resource in types {
            let Some(name) = crd_name(resource) else {
                continue;
            };
            let mut followed = self.followed.lock();
            let ready = followed.entry(name.clone()).or_insert_with(|| {
                let (sender, receiver) = watch::channel(false);
                let task = tokio::spawn(follow_crd(
                    self.client.clone(),
                    name.clone(),
                    self.schemas.clone(),
                    sender,
                    self.changes.clone(),
                ));
                self.tasks.lock().push(task.abort_handle());
                receiver
            });
            if !*ready.borrow() && !self.slow.lock().contains(&name) {
                waiting.push((name, ready.clone()));
            }
        }
        let wait = wait.min(FIRST_READ);
        let reads = waiting.into_iter().map(|(name, mut ready)| async move {
            // Waited for once: later writes go on without it until its watch answers. Marked
            // on drop, so a caller that gives up first (a review's deadline) counts too.
            let mut unread = SlowUnlessRead {
                slow: &self.slow,
                name: Some(name),
            };
            if let Ok(Ok(_)) = tokio::time::timeout(wait, ready.wait_for(|read| *read)).await {
                unread.name = None;
            }
        });
        futures::future::join_all(reads).await;
    }
}

/// Marks a CRD slow when dropped before its first read was seen.
struct SlowUnlessRead<'a> {
    slow: &'a Mutex<std::collections::HashSet<String>>,
    name: Option<String>,
}

impl Drop for SlowUnlessRead<'_> {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            self.slow.lock().insert(name);
        }
    }
}

/// The name of the CRD that serves a type (`<plural>.<group>`); `None` for a built-in type,
/// whose schema is bundled.
fn crd_name(resource: &ResourceType) -> Option<String> {
    if crate::schema::is_builtin(&resource.api_version, &resource.kind) {
        return None;
    }
    let (group, _) = resource.api_version.rsplit_once('/')?;
    Some(format!("{}.{group}", resource.plural))
}

/// Keeps one CRD's schemas in `schemas` as the API server has them: replaced on every change,
/// dropped when the CRD is deleted (or was, while the watch was down).
async fn follow_crd(
    client: kube::Client,
    name: String,
    schemas: Arc<Schemas>,
    ready: watch::Sender<bool>,
    changes: watch::Sender<u64>,
) {
    let changed = || changes.send_modify(|count| *count += 1);
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watch_stream(api, config).default_backoff().boxed();
    let mut listed = false;
    let mut warned = false;
    // What the schemas were last read from: a CRD's status and metadata move without its
    // schemas (conditions, accepted names), and only a change of what is kept counts, whether
    // a watch event or a re-list after a break brings it.
    let mut kept: Option<serde_json::Value> = None;
    let take = |kept: &mut Option<serde_json::Value>, crd: CustomResourceDefinition| {
        let essentials = crd_essentials(crd);
        if kept.as_ref() != Some(&essentials) {
            schemas.add_crd(&essentials);
            if kept.replace(essentials).is_some() {
                changed();
            }
        }
    };
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => listed = false,
            Ok(Event::InitApply(crd)) => {
                listed = true;
                take(&mut kept, crd);
            }
            Ok(Event::Apply(crd)) => take(&mut kept, crd),
            Ok(Event::InitDone) => {
                if !listed {
                    schemas.remove_crd(&name);
                    if kept.take().is_some() {
                        changed();
                    }
                }
                ready.send_replace(true);
                warned = false;
            }
            Ok(Event::Delete(_)) => {
                schemas.remove_crd(&name);
                kept = None;
                changed();
            }
            Err(error) => {
                if !warned {
                    tracing::warn!(crd = %name, %error, "cannot watch a CustomResourceDefinition: what controllers write of its types is checked by the API server alone until it can");
                    warned = true;
                }
                // A write waits for no watch that fails.
                ready.send_replace(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::TypeInfo;

    fn resource(api_version: &str, kind: &str, plural: &str) -> ResourceType {
        ResourceType::from(TypeInfo {
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced: true,
            has_status: true,
        })
    }

    #[test]
    fn a_custom_type_is_served_by_the_crd_of_its_plural_and_group() {
        assert_eq!(
            crd_name(&resource("example.com/v1", "Gadget", "gadgets")).as_deref(),
            Some("gadgets.example.com")
        );
        assert_eq!(
            crd_name(&resource("apps/v1", "Deployment", "deployments")),
            None
        );
        assert_eq!(crd_name(&resource("v1", "Service", "services")), None);
    }
}
