//! `metascript render`: one full sync pass over manifests, in memory, printing what the
//! operator would do.

use super::manifests::{self, to_yaml};
use super::offline::OfflineCluster;
use crate::controllers::Plan;
use crate::controllers::decorator::Decorator;
use crate::controllers::map::Mapper;
use crate::hooks::{CallScope, ConfigMapLookup, ControllerHooks, ScriptsDir};
use crate::object::{self, ObjectKey};
use crate::reads::{MemoryStore, ReadAccess};
use crate::resources::ResourceType;
use crate::script::ScriptEngine;
use crate::sync::{self, HookRunner, ObjectStore, SyncError};
use serde::Serialize;
use serde_json::Value;
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
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    map_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hook: Option<&'static str>,
    #[serde(flatten)]
    plan: Plan,
}

impl ObjectStore for OfflineCluster {
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.objects
            .iter()
            .filter(|o| resource.describes(o))
            .filter(|o| namespace.is_none() || object::namespace(o) == namespace)
            .map(|o| Arc::new(o.clone()))
            .collect()
    }
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
    let (entries, errors) = render(&cluster, args.scripts_dir.clone(), args.now);
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

    for controller in &cluster.decorators {
        let name = kube::ResourceExt::name_any(controller);
        let label = format!("DecoratorController/{name}");
        let planner = Decorator::new(controller, &cluster.resolver);
        let loaded = load(
            &engine,
            &name,
            planner,
            controller.spec.hooks.named(),
            &controller.spec.libraries,
            config_maps,
        );
        let (decorator, hooks) = match loaded {
            Ok(loaded) => loaded,
            Err(message) => {
                errors.push(format!("{label}: {message}"));
                continue;
            }
        };
        let runner = HookRunner {
            engine: &engine,
            hooks: &hooks,
            observer: None,
            // No Events: render shows what would be written, and Events are not part of it.
            scope: CallScope {
                clock,
                reads: Some(ReadAccess::new(store.clone(), decorator.reads.clone())),
                ..CallScope::default()
            },
        };
        for target in sorted.iter().filter(|o| decorator.target_type(o).is_some()) {
            let planned = if decorator.has_customize && sync::runs_hook(decorator.phase(target)) {
                sync::customize(&decorator, &runner, target)
                    .and_then(|rules| sync::resolve_related(&decorator, &cluster.resolver, rules))
            } else {
                Ok(Vec::new())
            }
            .and_then(|related| {
                sync::sync_decorator_target(&decorator, &runner, cluster, target, &related)
            });
            match planned {
                Ok(None) => {}
                Ok(Some((hook, plan))) => entries.push(Entry {
                    controller: label.clone(),
                    object: ObjectKey::of(target).to_string(),
                    input: None,
                    map_key: None,
                    hook: hook.map(|h| h.as_str()),
                    plan,
                }),
                Err(error) => errors.push(format!("{label}: {}: {error}", ObjectKey::of(target))),
            }
        }
    }

    for controller in &cluster.maps {
        let name = kube::ResourceExt::name_any(controller);
        let label = format!("MapController/{name}");
        let planner = Mapper::new(controller, &cluster.resolver);
        let loaded = load(
            &engine,
            &name,
            planner,
            controller.spec.hooks.named(),
            &controller.spec.libraries,
            config_maps,
        );
        let (mapper, hooks) = match loaded {
            Ok(loaded) => loaded,
            Err(message) => {
                errors.push(format!("{label}: {message}"));
                continue;
            }
        };
        let runner = HookRunner {
            engine: &engine,
            hooks: &hooks,
            observer: None,
            // No Events: render shows what would be written, and Events are not part of it.
            scope: CallScope {
                clock,
                reads: Some(ReadAccess::new(store.clone(), mapper.reads.clone())),
                ..CallScope::default()
            },
        };
        for parent in sorted.iter().filter(|o| mapper.parent.describes(o)) {
            let parent_key = ObjectKey::of(parent).to_string();
            let steps = match sync::sync_map_parent(&mapper, &runner, cluster, parent) {
                Ok(steps) => steps,
                Err(error) => {
                    errors.push(format!("{label}: {error}"));
                    continue;
                }
            };
            for step in steps {
                let input = step.input.as_ref().map(|i| ObjectKey::of(i).to_string());
                match step.result {
                    Ok(plan) => entries.push(Entry {
                        controller: label.clone(),
                        object: parent_key.clone(),
                        input,
                        map_key: (!step.map_key.is_empty()).then_some(step.map_key),
                        hook: step.hook.map(|h| h.as_str()),
                        plan,
                    }),
                    Err(error) => {
                        errors.push(describe_step_error(&label, &parent_key, input, &error))
                    }
                }
            }
        }
    }
    (entries, errors)
}

/// A controller's planner and compiled hooks, or why it cannot run.
fn load<P>(
    engine: &ScriptEngine,
    name: &str,
    planner: Result<P, crate::resources::ResolveError>,
    hooks: Vec<(crate::api::HookKind, &crate::api::Hook)>,
    libraries: &[crate::api::Library],
    config_maps: &dyn ConfigMapLookup,
) -> Result<(P, ControllerHooks), String> {
    let planner = planner.map_err(|e| e.to_string())?;
    let hooks = ControllerHooks::load(engine, name, hooks, libraries, config_maps)
        .map_err(|e| e.to_string())?;
    Ok((planner, hooks))
}

/// Controllers given more than once under the same kind and name.
fn duplicate_names(cluster: &OfflineCluster) -> Vec<String> {
    let names = cluster
        .decorators
        .iter()
        .map(|c| format!("DecoratorController {}", kube::ResourceExt::name_any(c)))
        .chain(
            cluster
                .maps
                .iter()
                .map(|c| format!("MapController {}", kube::ResourceExt::name_any(c))),
        );
    let mut seen = std::collections::BTreeMap::new();
    for name in names {
        *seen.entry(name).or_insert(0) += 1;
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(name, _)| name)
        .collect()
}

fn describe_step_error(
    label: &str,
    parent: &str,
    input: Option<String>,
    error: &SyncError,
) -> String {
    match input {
        Some(input) => format!("{label}: {parent}, input {input}: {error}"),
        None => format!("{label}: {parent}: {error}"),
    }
}
