//! What loading and running a controller means regardless of its kind: resolving and watching
//! its types, compiling its hooks (keeping the last good version when a new one fails),
//! running script work off the async threads, and writing its status.

use super::operator::{Shared, WorkKey};
use super::scripts::CachedConfigMaps;
use super::status::{self, Health};
use crate::api::{ControllerStatus, Hook, HookKind, ResourceRef, ScriptStatus};
use crate::hooks::{ConfigMapLookup, ControllerHooks, ScriptsDir};
use crate::resources::ResourceType;
use crate::sync::{self, HookRunner};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
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

/// A controller's hooks, compiled, with where their scripts come from.
pub struct Prepared {
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// ConfigMaps (namespace, name) whose change reloads the hooks.
    pub config_maps: Vec<(String, String)>,
    /// ConfigMap keys a dev-loop file of the same name replaces.
    pub script_keys: Vec<String>,
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
    let references = hooks
        .iter()
        .filter_map(|(_, hook)| hook.script.as_ref()?.config_map_ref.clone());
    let config_maps: Vec<(String, String)> =
        references.clone().map(|r| (r.namespace, r.name)).collect();
    let script_keys: Vec<String> = references.map(|r| r.key).collect();
    let mut types = types;
    if !config_maps.is_empty() {
        types.push(ResourceRef {
            api_version: "v1".into(),
            resource: "configmaps".into(),
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
    let cached = CachedConfigMaps(&shared.informers);
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
        config_maps,
        script_keys,
    })
}

/// The digests of the hooks running, to tell whether a reload changed anything.
pub fn digests(hooks: &ControllerHooks) -> BTreeMap<String, String> {
    hooks
        .iter()
        .map(|hook| (hook.kind.to_string(), hook.script.digest().to_string()))
        .collect()
}

/// Runs script work on tokio's blocking pool, never on the runtime's threads.
pub async fn blocking<T: Send + 'static>(
    shared: &Arc<Shared>,
    hooks: &Arc<ControllerHooks>,
    work: impl FnOnce(&Shared, &HookRunner) -> Result<T, sync::SyncError> + Send + 'static,
) -> Result<T, Failure> {
    let (shared, hooks) = (shared.clone(), hooks.clone());
    tokio::task::spawn_blocking(move || {
        let runner = HookRunner {
            engine: &shared.engine,
            hooks: &hooks,
            clock: None,
            logs: None,
        };
        work(&shared, &runner).map_err(Failure::from)
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
    shared.applier.writes.record();
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
