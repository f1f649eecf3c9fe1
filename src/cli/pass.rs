//! One sync pass of controllers over a set of objects, in memory, through the same sync code as
//! the operator (each kind's [`Planner::sync_offline`]): `render` prints it over manifests,
//! `diff` compares it with a live cluster.

use super::offline::OfflineController;
use crate::hooks::{ConfigMapLookup, ControllerHooks, HookRunner, ScriptsDir, WebhookClient};
use crate::object::ObjectKey;
use crate::plan::outputs::OutputViolation;
use crate::plan::{Offline, Planner, Step};
use crate::reads::ReadAccess;
use crate::resources::ResourceResolver;
use crate::runtime::ControllerId;
use crate::schema::SchemaSource;
use crate::script::{CallScope, ScriptEngine};
use crate::store::{MemoryStore, ObjectStore};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// What a pass runs over.
pub(super) struct Pass<'a> {
    /// The objects each controller is offered, and what its hooks' `get` and `list` see.
    pub objects: &'a [Value],
    /// What planning reads (children, related objects, inputs); holds at least `objects`.
    pub store: &'a dyn ObjectStore,
    pub resolver: &'a dyn ResourceResolver,
    /// What the objects a plan writes are checked against.
    pub schemas: &'a dyn SchemaSource,
    /// Where scripts and webhook credentials are read from.
    pub config_maps: &'a dyn ConfigMapLookup,
    /// What scripts see as `now()`; the wall clock when `None`.
    pub clock: Option<jiff::Timestamp>,
}

/// Which piece of a controller's work an entry of `render` or `diff` is about, as printed.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WorkId {
    pub controller: String,
    pub object: String,
    /// What else identifies the work (`input`, `mapKey`).
    #[serde(flatten)]
    pub detail: std::collections::BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hook: Option<&'static str>,
}

impl WorkId {
    pub(super) fn of(controller: String, step: &Step) -> WorkId {
        WorkId {
            controller,
            object: step.object.to_string(),
            detail: step.detail.iter().cloned().collect(),
            hook: step.hook.map(|h| h.as_str()),
        }
    }
}

/// One piece of a controller's work and what it planned.
pub(super) struct Synced {
    /// `DecoratorController/<name>`.
    pub controller: String,
    /// The controller's server-side apply field manager, as the operator's writes use it.
    pub field_manager: String,
    pub step: Step,
    /// The rules of what the step writes that could not be checked, to be said.
    pub unchecked: Vec<OutputViolation>,
}

impl Pass<'_> {
    /// Every controller's sync over every object, controllers in the order given, objects by
    /// key; and the controllers that could not run, with why.
    pub(super) fn run(&self, controllers: &[OfflineController]) -> (Vec<Synced>, Vec<String>) {
        let engine = ScriptEngine::new();
        let mut sorted: Vec<&Value> = self.objects.iter().collect();
        sorted.sort_by_key(|o| ObjectKey::of(o));
        let reads: Arc<dyn ObjectStore + Send + Sync> =
            Arc::new(MemoryStore::new(self.objects.iter().cloned()));
        let mut synced = Vec::new();
        let mut failed = Vec::new();
        for controller in controllers {
            let label = controller.label();
            let field_manager =
                ControllerId::new(controller.kind.name(), controller.controller.name())
                    .field_manager();
            let (planner, hooks) = match load(&engine, controller, self.resolver, self.config_maps)
            {
                Ok(loaded) => loaded,
                Err(message) => {
                    failed.push(format!("{label}: {message}"));
                    continue;
                }
            };
            // No Events: a pass shows what would be written, and Events are not part of it.
            let scope = CallScope {
                clock: self.clock,
                ..CallScope::reading(ReadAccess::new(reads.clone(), planner.reads()))
            };
            let runner = HookRunner {
                engine: &engine,
                hooks: &hooks,
                webhooks: WebhookClient::unrestricted(),
                observer: None,
                scope: &scope,
            };
            let offline = Offline {
                runner: &runner,
                store: self.store,
                resolver: self.resolver,
                schemas: self.schemas,
            };
            for object in &sorted {
                let (steps, mut unchecked) = offline.sync(planner.as_ref(), object);
                // Said once, with the pass's first step about the object.
                synced.extend(steps.into_iter().map(|step| Synced {
                    controller: label.clone(),
                    field_manager: field_manager.clone(),
                    step,
                    unchecked: std::mem::take(&mut unchecked),
                }));
            }
        }
        (synced, failed)
    }
}

/// A controller's planner and compiled hooks, or why it cannot run.
pub(super) fn load(
    engine: &ScriptEngine,
    controller: &OfflineController,
    resolver: &dyn ResourceResolver,
    config_maps: &dyn ConfigMapLookup,
) -> Result<(Box<dyn Planner>, ControllerHooks), String> {
    let controller = &controller.controller;
    let planner = controller.planner(resolver).map_err(|e| e.to_string())?;
    let spec = controller.spec();
    let hooks = ControllerHooks::load_spec(engine, &controller.name(), &spec, config_maps)
        .map_err(|e| e.to_string())?;
    Ok((planner, hooks))
}

/// `config_maps`, with the keys a `--scripts-dir` has files for read from those files.
pub(super) fn with_scripts_dir<'a>(
    scripts_dir: Option<PathBuf>,
    config_maps: &'a dyn ConfigMapLookup,
) -> Box<dyn ConfigMapLookup + 'a> {
    match scripts_dir {
        Some(dir) => Box::new(ScriptsDir {
            dir,
            fallback: config_maps,
        }),
        None => Box::new(config_maps),
    }
}
