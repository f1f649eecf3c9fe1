//! The runtime over the in-memory API: the operator's shared services, a registry per kind,
//! and a loop that plays the operator's dispatcher and workers one step at a time (route
//! every watch event, run every work item that is due now) until nothing is left to do.

use super::api::{FakeApi, Seen, Served};
use crate::api::{API_VERSION, ResourceRef};
use crate::hooks::WebhookClient;
use crate::hooks::egress::EgressPolicy;
use crate::runtime::context::{Context, Identities, OperatorConfig};
use crate::runtime::keys::WorkKey;
use crate::runtime::reads::access::AccessReviews;
use crate::runtime::registry::KindRuntime;
use crate::runtime::replicas::authority::Authority;
use crate::runtime::replicas::leader::Leadership;
use crate::runtime::report::events::Events;
use crate::runtime::watch::cache::{CacheMetrics, Informers};
use crate::runtime::watch::discovery::Discovery;
use crate::runtime::watch::event::{CacheEvent, ObjectEvent};
use crate::runtime::watch::schemas::LiveSchemas;
use crate::runtime::work::queue::WorkQueue;
use crate::runtime::write::apply::Applier;
use crate::runtime::write::own_writes::OwnWrites;
use crate::script::ScriptEngine;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The test type most tests act on: namespaced, with a status subresource.
pub(super) const WIDGETS: Served =
    Served::namespaced("example.com/v1", "Widget", "widgets").with_status();
pub(super) const CONFIG_MAPS: Served = Served::namespaced("v1", "ConfigMap", "configmaps");

/// Every type the fake serves: the controller objects', Events, and the tests' own.
const SERVED: &[Served] = &[
    Served::cluster(API_VERSION, "DecoratorController", "decoratorcontrollers").with_status(),
    Served::cluster(API_VERSION, "CompositeController", "compositecontrollers").with_status(),
    Served::cluster(API_VERSION, "MapController", "mapcontrollers").with_status(),
    Served::namespaced("events.k8s.io/v1", "Event", "events"),
    CONFIG_MAPS,
    WIDGETS,
];

/// How many rounds of routing and working `settle` allows before it calls the runtime
/// restless (a sync that keeps causing itself).
const MAX_ROUNDS: usize = 20;

/// How long a watch may take to show the cache a write (it is in-process: milliseconds).
const CACHE_DEADLINE: Duration = Duration::from_secs(5);

pub(super) struct Cluster {
    pub api: FakeApi,
    pub context: Arc<Context>,
    kinds: Vec<Arc<dyn KindRuntime>>,
    events: mpsc::UnboundedReceiver<CacheEvent>,
}

impl Cluster {
    /// The runtime of every kind, started against an empty fake API, its controller objects
    /// watched, as `Operator::start` does.
    pub(super) async fn start() -> Cluster {
        // `RUST_LOG=debug` shows what the runtime did.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
        let api = FakeApi::new(SERVED);
        let client = api.client();
        // A resync here syncs every item, so a test can see a sync of unchanged input write
        // nothing (the fingerprints would skip it).
        let config = OperatorConfig {
            full_resync: true,
            ..OperatorConfig::default()
        };
        let metrics = config.metrics.clone();
        let discovery = Discovery::new(client.clone());
        let (events_tx, events) = mpsc::unbounded_channel();
        let informers = Informers::new(client.clone(), events_tx, CacheMetrics::of(&metrics));
        let leadership = Arc::new(Leadership::always(metrics.leader.clone()));
        let authority = Arc::new(Authority {
            leadership: leadership.clone(),
            shards: None,
        });
        let (redeliver, _) = mpsc::unbounded_channel();
        let config_map_type = resolve(&discovery, "v1", "configmaps").await.resource;
        let kind_names = crate::kinds::ALL.iter().map(|kind| kind.name()).collect();
        let schemas = Arc::new(LiveSchemas::new(
            client.clone(),
            Arc::new(crate::schema::Schemas::with_builtins()),
        ));
        let context = Arc::new(Context {
            controller_selector: None,
            events: Events::new(client.clone(), None, metrics.clone(), kind_names),
            applier: Applier::new(
                metrics.clone(),
                authority.clone(),
                OwnWrites::new(redeliver),
                schemas.clone(),
                informers.clone(),
            ),
            identities: Identities::new(
                kube::Config::new("http://fake.invalid".parse().expect("a URL")),
                None,
            ),
            leadership,
            authority,
            recorder: None,
            metrics: metrics.clone(),
            client: client.clone(),
            discovery: discovery.clone(),
            informers,
            schemas,
            engine: ScriptEngine::new(),
            webhooks: WebhookClient::restricted(EgressPolicy::default(), 1 << 20),
            queue: WorkQueue::fair(
                |key: &WorkKey| key.controller.clone(),
                usize::MAX,
                usize::MAX,
            ),
            dependencies: Default::default(),
            config_map_type,
            access: Arc::new(AccessReviews::new(client, metrics)),
            config,
        });
        let mut kinds = Vec::new();
        for kind in crate::kinds::ALL {
            let entry = kind.runtime();
            let resolved = resolve(&discovery, API_VERSION, entry.name.plural()).await;
            context
                .informers
                .ensure(&resolved)
                .await
                .expect("the controller objects are watched");
            kinds.push((entry.registry)(resolved.resource));
        }
        Cluster {
            api,
            context,
            kinds,
            events,
        }
    }

    /// Writes an object as a user would, then lets the runtime act on it.
    pub(super) async fn put(&mut self, object: Value) -> Value {
        let written = self.api.put(object);
        self.settle().await;
        written
    }

    /// Deletes an object as a user would, then lets the runtime act on it.
    pub(super) async fn delete(
        &mut self,
        api_version: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) {
        self.api.remove(api_version, plural, namespace, name);
        self.settle().await;
    }

    /// The registry of a kind, as the operator drives it.
    pub(super) fn kind(&self, name: crate::api::KindName) -> &Arc<dyn KindRuntime> {
        self.kinds
            .iter()
            .find(|kind| kind.kind() == name)
            .expect("a registered kind")
    }

    /// Runs the runtime until it is quiet: the caches hold what the API holds, every event is
    /// routed and every work item due now has run. Retries that back off stay queued.
    pub(super) async fn settle(&mut self) {
        for _ in 0..MAX_ROUNDS {
            self.caught_up().await;
            let mut busy = false;
            while let Ok(event) = self.events.try_recv() {
                let event = ObjectEvent::from(event);
                busy = true;
                for kind in &self.kinds {
                    kind.route(&self.context, &event);
                }
            }
            while let Ok(Some(key)) =
                tokio::time::timeout(Duration::from_millis(2), self.context.queue.next()).await
            {
                busy = true;
                let kind = self
                    .kinds
                    .iter()
                    .find(|kind| kind.kind() == key.controller.kind);
                kind.expect("a registered kind")
                    .work(&self.context, &key)
                    .await;
                self.context.queue.done(&key);
            }
            if !busy {
                return;
            }
        }
        panic!("the runtime did not settle in {MAX_ROUNDS} rounds");
    }

    /// Syncs every item of every controller again, as a periodic resync would.
    pub(super) async fn sync_again_all(&mut self) {
        for kind in &self.kinds {
            for name in kind.names() {
                kind.resync(&self.context, &name);
            }
        }
        self.settle().await;
    }

    /// The writes sent since the last call (reads and watches left out).
    pub(super) fn writes(&self) -> Vec<Seen> {
        self.api
            .take_requests()
            .into_iter()
            .filter(|seen| seen.method != axum::http::Method::GET)
            .collect()
    }

    /// Waits until every watched type's cache holds what the API holds.
    async fn caught_up(&self) {
        let deadline = tokio::time::Instant::now() + CACHE_DEADLINE;
        while !self.cache_matches() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the watch caches did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn cache_matches(&self) -> bool {
        let informers = &self.context.informers;
        let mut cached = 0;
        for served in SERVED {
            let reference = ResourceRef {
                api_version: served.api_version.into(),
                resource: served.plural.into(),
            };
            let Some(resolved) = self.context.discovery.cached(&reference) else {
                continue;
            };
            if !informers.is_watched(&resolved.resource) {
                continue;
            }
            cached += informers.len(&resolved.resource);
            for name in self.api.all_names(served.api_version, served.plural) {
                let (namespace, name) = name;
                let stored = self
                    .api
                    .get(served.api_version, served.plural, &namespace, &name);
                // Read without keeping it decoded: a test can then sync objects read from text.
                let in_cache = informers
                    .read_for_sync(&resolved.resource, Some(&namespace), &name, None)
                    .map(|read| read.object);
                let version = |object: &Value| object["metadata"]["resourceVersion"].clone();
                if stored.as_ref().map(version) != in_cache.as_deref().map(version) {
                    return false;
                }
                cached -= 1;
            }
        }
        cached == 0
    }
}

async fn resolve(
    discovery: &Discovery,
    api_version: &str,
    plural: &str,
) -> crate::runtime::watch::discovery::ResolvedType {
    let reference = ResourceRef {
        api_version: api_version.into(),
        resource: plural.into(),
    };
    discovery.resolve(&reference).await.expect("a served type")
}
