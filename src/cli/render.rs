//! `metascript render`: one full sync pass over manifests, in memory, printing what the
//! operator would do.

use super::manifests::{self, to_yaml};
use super::offline::{OfflineCluster, OfflineController};
use crate::hooks::{ConfigMapLookup, ControllerHooks, HookRunner, ScriptsDir};
use crate::object::ObjectKey;
use crate::plan::{Offline, Plan, Planner, strip_provenance};
use crate::reads::ReadAccess;
use crate::resources::ResourceResolver;
use crate::script::{CallScope, ScriptEngine};
use crate::store::{MemoryStore, ObjectStore};
use crate::validate;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Manifest files or directories: controllers, CRDs, ConfigMaps and the objects they act on.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
    /// A directory of hook scripts: a file named like a hook's ConfigMap key is used instead of
    /// that key (the same rule as `metascript run --scripts-dir`).
    #[arg(long)]
    pub scripts_dir: Option<PathBuf>,
    /// Fixes what scripts see as `now()` (RFC 3339), for output that does not change with time.
    #[arg(long)]
    pub now: Option<jiff::Timestamp>,
    /// Leaves out the provenance annotations the operator adds to what it applies. They name
    /// each script's digest, so without them the plans of a hook's Rhai and Lua flavours (or of
    /// a script before and after a refactoring) can be compared with `diff`.
    #[arg(long)]
    pub no_provenance: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// One sync's outcome as printed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    controller: String,
    object: String,
    /// What else identifies the work (`input`, `mapKey`).
    #[serde(flatten)]
    detail: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hook: Option<&'static str>,
    #[serde(flatten)]
    plan: Plan,
}

pub fn run(args: RenderArgs) -> ExitCode {
    let cluster = match manifests::load_objects(&args.files)
        .map_err(|e| e.to_string())
        .and_then(|docs| OfflineCluster::from_documents(docs).map_err(|e| e.to_string()))
    {
        Ok(cluster) => cluster,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    for duplicate in duplicate_names(&cluster) {
        eprintln!(
            "warning: {duplicate} appears more than once; in a cluster the last one applied \
             would replace the others, here each is rendered"
        );
    }
    for controller in &cluster.controllers {
        for path in controller.controller.spec().on_delete_by_default {
            eprintln!(
                "warning: {}: {path}: {}",
                controller.label(),
                validate::ON_DELETE_BY_DEFAULT
            );
        }
    }
    let (mut entries, errors) = render(&cluster, args.scripts_dir.clone(), args.now);
    if args.no_provenance {
        for entry in &mut entries {
            strip_provenance(&mut entry.plan);
        }
    }
    let printed = match args.output {
        Format::Yaml => to_yaml(&entries),
        Format::Json => serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n",
    };
    print!("{printed}");
    for error in &errors {
        eprintln!("error: {error}");
    }
    if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every controller's sync pass over the cluster, in a stable order: the plans, and the errors
/// of the syncs that failed (which plan nothing).
fn render(
    cluster: &OfflineCluster,
    scripts_dir: Option<PathBuf>,
    now: Option<jiff::Timestamp>,
) -> (Vec<Entry>, Vec<String>) {
    let engine = ScriptEngine::new();
    let local;
    let config_maps: &dyn ConfigMapLookup = match scripts_dir {
        Some(dir) => {
            local = ScriptsDir {
                dir,
                fallback: &cluster.objects,
            };
            &local
        }
        None => &cluster.objects,
    };
    let clock = Some(now.unwrap_or_else(jiff::Timestamp::now));
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    let mut sorted: Vec<&Value> = cluster.objects.iter().collect();
    // What the hooks' `get` and `list` see: the manifests.
    let store: Arc<dyn ObjectStore + Send + Sync> =
        Arc::new(MemoryStore::new(cluster.objects.iter().cloned()));
    sorted.sort_by_key(|o| ObjectKey::of(o));
    for controller in &cluster.controllers {
        let label = controller.label();
        let (planner, hooks) = match load(&engine, controller, &cluster.resolver, config_maps) {
            Ok(loaded) => loaded,
            Err(message) => {
                errors.push(format!("{label}: {message}"));
                continue;
            }
        };
        // No Events: render shows what would be written, and Events are not part of it.
        let scope = CallScope {
            clock,
            ..CallScope::reading(ReadAccess::new(store.clone(), planner.reads()))
        };
        let runner = HookRunner {
            engine: &engine,
            hooks: &hooks,
            observer: None,
            scope: &scope,
        };
        let offline = Offline {
            runner: &runner,
            store: cluster,
            resolver: &cluster.resolver,
        };
        for object in &sorted {
            for step in planner.sync_offline(&offline, object) {
                match step.result {
                    Ok(plan) => entries.push(Entry {
                        controller: label.clone(),
                        object: step.object.to_string(),
                        detail: step.detail.into_iter().collect(),
                        hook: step.hook.map(|h| h.as_str()),
                        plan,
                    }),
                    Err(error) => {
                        let detail: String = step
                            .detail
                            .iter()
                            .map(|(name, value)| format!(", {name} {value}"))
                            .collect();
                        errors.push(format!("{label}: {}{detail}: {error}", step.object));
                    }
                }
            }
        }
    }
    (entries, errors)
}

/// A controller's planner and compiled hooks, or why it cannot run.
fn load(
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

/// Controllers given more than once under the same kind and name.
fn duplicate_names(cluster: &OfflineCluster) -> Vec<String> {
    let mut seen = BTreeMap::new();
    for controller in &cluster.controllers {
        *seen
            .entry(controller.label().replace('/', " "))
            .or_insert(0) += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(name, _)| name)
        .collect()
}
