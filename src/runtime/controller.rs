//! What loading and running a controller means regardless of its kind: resolving and watching
//! its types, compiling its hooks (keeping the last good version when a new one fails),
//! running script work off the async threads, and writing its status.

use super::operator::{Shared, WorkKey};
use super::routes::{Routes, push_unique};
use super::scripts::CachedConfigMaps;
use super::status::{self, Health};
use crate::api::{ControllerStatus, Hook, HookKind, ResourceRef, ScriptStatus};
use crate::hooks::{ConfigMapLookup, ControllerHooks, ScriptsDir};
use crate::resources::ResourceType;
use crate::sync::{self, HookRunner};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a sync failed: an Event reason and the message.
#[derive(Debug)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

impl From<sync::SyncError> for Failure {
    fn from(error: sync::SyncError) -> Self {
        Failure {
            reason: error.reason(),
            message: error.to_string(),
        }
    }
}

impl Failure {
    pub fn new(reason: &'static str, message: impl ToString) -> Failure {
        Failure {
            reason,
            message: message.to_string(),
        }
    }
}

/// Where a controller's scripts come from: a change there reloads the controller, even one
/// that has not loaded yet.
#[derive(Clone, Debug, Default)]
pub struct ScriptSources {
    /// ConfigMaps (namespace, name) named by `configMapRef`.
    pub config_maps: Vec<(String, String)>,
    /// ConfigMap keys a dev-loop file of the same name replaces.
    pub script_keys: Vec<String>,
}

impl ScriptSources {
    pub fn of(hooks: &[(HookKind, Hook)]) -> ScriptSources {
        let references = hooks
            .iter()
            .filter_map(|(_, hook)| hook.script.as_ref()?.config_map_ref.clone());
        ScriptSources {
            config_maps: references.clone().map(|r| (r.namespace, r.name)).collect(),
            script_keys: references.map(|r| r.key).collect(),
        }
    }

    pub fn add_routes(&self, reload: &WorkKey, routes: &mut Routes) {
        for config_map in &self.config_maps {
            push_unique(
                routes.config_maps.entry(config_map.clone()).or_default(),
                reload,
            );
        }
        for key in &self.script_keys {
            push_unique(routes.script_keys.entry(key.clone()).or_default(), reload);
        }
    }
}

/// A controller that could not be loaded: why, and what would reload it.
#[derive(Clone, Debug)]
pub struct Unloaded {
    pub health: Health,
    pub sources: ScriptSources,
}

/// A controller's hooks, compiled.
pub struct Prepared {
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// True when the newest scripts failed and the previous version keeps running.
    pub stale: bool,
}

/// Resolves and watches every type a controller names, then compiles its hooks. When the new
/// scripts do not compile but `previous` hooks exist, those keep running and are marked stale.
pub async fn prepare(
    shared: &Arc<Shared>,
    name: &str,
    generation: Option<i64>,
    types: Vec<ResourceRef>,
    hooks: Vec<(HookKind, Hook)>,
    previous: Option<Arc<ControllerHooks>>,
) -> Result<Prepared, Health> {
    let fail = |reason: &str, message: String| Health {
        generation,
        ready: Err((reason.to_string(), message.clone())),
        scripts_loaded: Err((reason.to_string(), message)),
        scripts: BTreeMap::new(),
    };
    let mut types = types;
    if !ScriptSources::of(&hooks).config_maps.is_empty() {
        types.push(ResourceRef {
            api_version: shared.config_map_type.api_version.clone(),
            resource: shared.config_map_type.plural.clone(),
        });
    }
    for reference in &types {
        let resolved = shared
            .discovery
            .resolve(reference)
            .await
            .map_err(|error| fail("ResolveFailed", error.to_string()))?;
        shared
            .informers
            .ensure(&resolved)
            .await
            .map_err(|error| fail("WatchFailed", error.to_string()))?;
    }
    let cached = CachedConfigMaps {
        informers: &shared.informers,
        config_maps: &shared.config_map_type,
    };
    let local;
    let lookup: &dyn ConfigMapLookup = match &shared.config.scripts_dir {
        Some(dir) => {
            local = ScriptsDir {
                dir: dir.clone(),
                fallback: &cached,
            };
            &local
        }
        None => &cached,
    };
    let named = hooks.iter().map(|(kind, hook)| (*kind, hook));
    let (hooks, scripts_loaded, stale) = match (
        ControllerHooks::load(&shared.engine, name, named, lookup),
        previous,
    ) {
        (Ok(hooks), _) => (Arc::new(hooks), Ok(()), false),
        (Err(error), Some(previous)) => {
            tracing::warn!(controller = name, %error, "script failed to load; the previous version keeps running");
            (
                previous,
                Err(("ScriptError".to_string(), error.to_string())),
                true,
            )
        }
        (Err(error), None) => return Err(fail("ScriptError", error.to_string())),
    };
    let scripts = hooks
        .iter()
        .map(|hook| {
            (
                hook.kind.to_string(),
                ScriptStatus {
                    digest: hook.script.digest().to_string(),
                    source: hook.script.origin().to_string(),
                    stale,
                },
            )
        })
        .collect();
    Ok(Prepared {
        hooks,
        health: Health {
            generation,
            ready: scripts_loaded.clone(),
            scripts_loaded,
            scripts,
        },
        stale,
    })
}

/// What a controller runs: its planner (Decorator, Mapper), hooks and the generation they
/// came from.
pub struct Version<P> {
    pub planner: Arc<P>,
    pub hooks: Arc<ControllerHooks>,
    pub generation: Option<i64>,
}

/// The outcome of loading a controller object: the version to run, its health, and where its
/// scripts come from.
pub struct Loaded<P> {
    pub version: Version<P>,
    pub prepared: Prepared,
    pub sources: ScriptSources,
}

/// Loads a controller object: types, watches and hooks, then the planner `build` makes. When the
/// newest scripts fail but a `previous` version runs, that whole version keeps running, planner
/// included, so a hook added by the broken edit is not half enabled. `None` when nothing can
/// run (already recorded as not loaded).
#[allow(clippy::too_many_arguments)]
pub async fn load_version<P>(
    shared: &Arc<Shared>,
    key: &WorkKey,
    object: &Value,
    generation: Option<i64>,
    types: Vec<ResourceRef>,
    hooks: Vec<(HookKind, Hook)>,
    previous: Option<Version<P>>,
    build: impl FnOnce() -> Result<P, crate::resources::ResolveError>,
) -> Option<Loaded<P>> {
    let name = crate::object::name(object);
    let sources = ScriptSources::of(&hooks);
    let previous_hooks = previous.as_ref().map(|p| p.hooks.clone());
    let prepared = match prepare(shared, name, generation, types, hooks, previous_hooks).await {
        Ok(prepared) => prepared,
        Err(health) => {
            not_loaded(shared, key, object, Unloaded { health, sources }).await;
            return None;
        }
    };
    let version = match previous {
        Some(previous) if prepared.stale => Version {
            hooks: prepared.hooks.clone(),
            ..previous
        },
        _ => match build() {
            Ok(planner) => Version {
                planner: Arc::new(planner),
                hooks: prepared.hooks.clone(),
                generation,
            },
            Err(error) => {
                let health = Health {
                    ready: Err(("ResolveFailed".into(), error.to_string())),
                    ..prepared.health
                };
                not_loaded(shared, key, object, Unloaded { health, sources }).await;
                return None;
            }
        },
    };
    Some(Loaded {
        version,
        prepared,
        sources,
    })
}

/// `resyncPeriodSeconds` as a period (none when unset or not positive).
pub fn resync_period(seconds: Option<i64>) -> Option<std::time::Duration> {
    seconds
        .filter(|s| *s > 0)
        .map(|s| std::time::Duration::from_secs(s as u64))
}

/// Records a controller that did not load: reported in its status and as an Event, retried
/// with backoff, and reloaded as soon as one of its script sources changes.
pub async fn not_loaded(shared: &Shared, key: &WorkKey, object: &Value, unloaded: Unloaded) {
    let name = crate::object::name(object);
    tracing::warn!(controller = name, ready = ?unloaded.health.ready, "controller not loaded");
    if let Err((_, message)) = &unloaded.health.ready {
        shared
            .event(
                object,
                EventType::Warning,
                "LoadFailed",
                "Load",
                message.clone(),
            )
            .await;
    }
    shared
        .unloaded
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone(), unloaded);
    shared.rebuild_routes();
    shared.queue.retry_later(key.clone());
}

/// Bookkeeping once a controller is loaded: backoff reset, no longer reported as unloaded, and
/// an Event when its newest scripts failed and the previous version keeps running.
pub async fn loaded(shared: &Shared, key: &WorkKey, object: &Value, prepared: &Prepared) {
    shared.queue.forget(key);
    shared
        .unloaded
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(key);
    shared.rebuild_routes();
    if let (true, Err((_, message))) = (prepared.stale, &prepared.health.scripts_loaded) {
        shared
            .event(
                object,
                EventType::Warning,
                "ScriptError",
                "Load",
                format!("{message} (the previous version keeps running)"),
            )
            .await;
    }
}

/// The digests of the hooks running, to tell whether a reload changed anything.
pub fn digests(hooks: &ControllerHooks) -> BTreeMap<String, String> {
    hooks
        .iter()
        .map(|hook| (hook.kind.to_string(), hook.script.digest().to_string()))
        .collect()
}

/// Runs script work on tokio's blocking pool, never on the runtime's threads (and counts it).
pub async fn blocking<T: Send + 'static>(
    shared: &Arc<Shared>,
    hooks: &Arc<ControllerHooks>,
    work: impl FnOnce(&Shared, &HookRunner) -> Result<T, sync::SyncError> + Send + 'static,
) -> Result<T, Failure> {
    let (shared, hooks) = (shared.clone(), hooks.clone());
    shared.metrics.syncs.inc();
    tokio::task::spawn_blocking(move || {
        let runner = HookRunner {
            engine: &shared.engine,
            hooks: &hooks,
            clock: None,
            logs: None,
        };
        let started = std::time::Instant::now();
        let result = work(&shared, &runner).map_err(Failure::from);
        shared
            .metrics
            .sync_seconds
            .observe(started.elapsed().as_secs_f64());
        result
    })
    .await
    .map_err(|e| Failure::new("SyncFailed", format!("sync task failed: {e}")))?
}

/// Writes a controller's status when it differs from what was last written.
pub async fn write_status(
    shared: &Shared,
    key: &WorkKey,
    resource: &ResourceType,
    name: &str,
    health: &Health,
    counts: (u64, u64, u64),
) {
    let previous = shared
        .written_status
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .cloned()
        .or_else(|| current_status(shared, resource, name));
    let status = status::status(previous.as_ref(), health, counts);
    if previous.as_ref() == Some(&status) {
        return;
    }
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &resource.api_resource());
    // Replaces the whole status, so hooks removed from the spec leave no stale entries.
    let patch: Patch<Value> = Patch::Json(
        serde_json::from_value(json!([{"op": "add", "path": "/status", "value": status}]))
            .expect("a valid JSON patch"),
    );
    shared.metrics.writes.inc();
    match api
        .patch_status(name, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => {
            shared
                .written_status
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), status);
        }
        Err(error) => tracing::warn!(controller = name, %error, "cannot write controller status"),
    }
}

/// The status the controller object carries now, as seen by the cache.
fn current_status(
    shared: &Shared,
    resource: &ResourceType,
    name: &str,
) -> Option<ControllerStatus> {
    let object = shared.informers.get(resource, None, name)?;
    serde_json::from_value(object.get("status")?.clone()).ok()
}
