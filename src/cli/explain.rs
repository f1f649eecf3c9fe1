//! `metascript explain KIND/NAME`: who manages an object, from which script revision and which
//! version of what, what went wrong last, and what the hook would answer now (a dry run through
//! the same sync code as `render`, against the objects in the cluster).

use super::manifests::to_yaml;
use super::offline::OfflineCluster;
use crate::api::{DecoratorController, MapController};
use crate::controllers::decorator::{Decorator, Phase};
use crate::controllers::map::Mapper;
use crate::controllers::{PROVENANCE_ANNOTATION, SOURCE_ANNOTATION};
use crate::hooks::{CallScope, ConfigMapLookup, ControllerHooks, ScriptsDir};
use crate::object;
use crate::reads::{MemoryStore, ReadAccess};
use crate::resources::{ResourceType, StaticResolver};
use crate::script::ScriptEngine;
use crate::sync::{self, HookCall, HookRunner, MapFanOut};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use parking_lot::Mutex;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The object, as KIND/NAME: KIND is a kind, a plural or a singular, optionally with its
    /// group (`service/web-0`, `statefulsets.apps/web`, `ConfigTemplate/t`).
    pub object: String,
    /// Its namespace (for namespaced kinds).
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Kubeconfig to use; without it, $KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
    /// A directory of hook scripts: a file named like a hook's ConfigMap key is used instead of
    /// that key (as with `metascript run --scripts-dir`, for the dev loop).
    #[arg(long)]
    pub scripts_dir: Option<PathBuf>,
}

pub fn run(args: ExplainArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(explain(&args)) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Everything `explain` reads from the cluster.
struct Snapshot {
    types: StaticResolver,
    resources: Vec<(ResourceType, kube::api::ApiResource)>,
    decorators: Vec<DecoratorController>,
    maps: Vec<MapController>,
}

async fn explain(args: &ExplainArgs) -> anyhow::Result<String> {
    let kube =
        super::run::kube_config_for(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let client = kube::Client::try_from(kube)?;
    let (kind, name) = args
        .object
        .split_once('/')
        .with_context(|| format!("{:?}: expected KIND/NAME", args.object))?;
    let snapshot = snapshot(&client).await?;
    let (resource, api_resource) = snapshot.find(kind).with_context(|| {
        format!("no kind, plural or singular {kind:?} is served by the cluster")
    })?;
    let namespace = resource.namespaced.then_some(args.namespace.as_str());
    let api = api(&client, &api_resource, namespace);
    let found = api
        .get_opt(name)
        .await?
        .with_context(|| format!("{} {name} not found", resource.kind))?;
    let managed_by = managers(&serde_json::to_value(&found)?);
    let object = value(found, &api_resource);

    let mut out = String::new();
    let key = object::ObjectKey::of(&object);
    out.push_str(&format!(
        "{key}\n  uid {}, resourceVersion {}\n",
        object::uid(&object).unwrap_or("-"),
        object::str_at(&object, "/metadata/resourceVersion").unwrap_or("-")
    ));
    out.push_str(&written_by(&client, &snapshot, &object).await?);
    out.push_str(&managed_by);
    let acting = acting_on(&snapshot, &resource, &object);
    if acting.is_empty() {
        out.push_str("\nNo DecoratorController or MapController acts on it.\n");
    }
    out.push_str(&events(&client, &object).await?);
    for role in acting {
        out.push_str(&dry_run(&client, &snapshot, &object, role, args.scripts_dir.as_ref()).await?);
    }
    Ok(out)
}

impl Snapshot {
    /// A served type by kind, plural or singular (case-insensitive), optionally `.group`.
    fn find(&self, wanted: &str) -> Option<(ResourceType, kube::api::ApiResource)> {
        let wanted = wanted.to_lowercase();
        let (name, group) = match wanted.split_once('.') {
            Some((name, group)) => (name.to_string(), Some(group.to_string())),
            None => (wanted.clone(), None),
        };
        self.resources
            .iter()
            .find(|(resource, api)| {
                let names = [
                    resource.kind.to_lowercase(),
                    api.plural.clone(),
                    api.plural.trim_end_matches('s').to_string(),
                ];
                names.contains(&name) && group.as_ref().is_none_or(|g| api.group == *g)
            })
            .cloned()
    }
}

async fn snapshot(client: &kube::Client) -> anyhow::Result<Snapshot> {
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the cluster's types")?;
    let mut types = StaticResolver::with_builtins();
    let mut resources = Vec::new();
    for group in discovery.groups() {
        // The preferred version first, so a bare kind finds it.
        for (api, capabilities) in group.recommended_resources() {
            let resolved = crate::runtime::discovery::resolved_type(api.clone(), &capabilities);
            types.insert(resolved.resource.clone());
            resources.push((resolved.resource, api));
        }
    }
    let decorators = Api::<DecoratorController>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    let maps = Api::<MapController>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    Ok(Snapshot {
        types,
        resources,
        decorators,
        maps,
    })
}

fn api(
    client: &kube::Client,
    resource: &kube::api::ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// An object as hooks see it: plain JSON with apiVersion and kind, without managedFields (the
/// operator's caches drop them too).
fn value(object: DynamicObject, api: &kube::api::ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = api.api_version.clone().into();
    value["kind"] = api.kind.clone().into();
    if let Some(metadata) = object::metadata_mut(&mut value) {
        metadata.remove("managedFields");
    }
    value
}

/// The provenance a child or output carries, checked against the controller's current script
/// and the source's current version.
async fn written_by(
    client: &kube::Client,
    snapshot: &Snapshot,
    object: &Value,
) -> anyhow::Result<String> {
    let annotation = |key: &str| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
    };
    let Some(provenance) = annotation(PROVENANCE_ANNOTATION) else {
        return Ok(String::new());
    };
    let mut out = String::from("\nWritten by metascript:\n");
    let parts: Vec<&str> = provenance.split(' ').collect();
    let [controller, hook, script] = parts[..] else {
        out.push_str(&format!(
            "  {PROVENANCE_ANNOTATION}: {provenance} (unreadable)\n"
        ));
        return Ok(out);
    };
    out.push_str(&format!(
        "  controller {controller}, hook {hook}, script {script}\n"
    ));
    let current = current_digest(snapshot, controller, hook);
    out.push_str(&match current {
        Some(digest) if digest.starts_with(script) => {
            "  that is the script running now\n".to_string()
        }
        Some(digest) => format!(
            "  the script running now is {} (this object has not needed a write since)\n",
            &digest[..digest.len().min(12)]
        ),
        None => "  the controller reports no such hook now\n".to_string(),
    });
    if let Some(source) = annotation(SOURCE_ANNOTATION)
        && let Some((uid, version)) = source.split_once('@')
    {
        out.push_str(&format!(
            "  computed from uid {uid} at resourceVersion {version}"
        ));
        if let Some(owner) = owner(client, snapshot, object).await? {
            let now = object::str_at(&owner, "/metadata/resourceVersion").unwrap_or_default();
            let same = object::uid(&owner) == Some(uid);
            out.push_str(&match (same, now == version) {
                (true, true) => {
                    format!(" ({} is unchanged since)\n", object::ObjectKey::of(&owner))
                }
                (true, false) => format!(
                    " ({} has changed since: now at {now})\n",
                    object::ObjectKey::of(&owner)
                ),
                (false, _) => " (its owner is now another object)\n".to_string(),
            });
        } else {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The digest `status.scripts.<hook>` of a controller named `<kind>/<name>` reports.
fn current_digest(snapshot: &Snapshot, controller: &str, hook: &str) -> Option<String> {
    let (kind, name) = controller.split_once('/')?;
    let status = match kind {
        "decorator" => snapshot
            .decorators
            .iter()
            .find(|c| kube::ResourceExt::name_any(*c) == name)?
            .status
            .clone()?,
        "map" => snapshot
            .maps
            .iter()
            .find(|c| kube::ResourceExt::name_any(*c) == name)?
            .status
            .clone()?,
        _ => return None,
    };
    Some(status.scripts.get(hook)?.digest.clone())
}

/// The object's controller owner, read from the cluster.
async fn owner(
    client: &kube::Client,
    snapshot: &Snapshot,
    object: &Value,
) -> anyhow::Result<Option<Value>> {
    let Some(reference) = object::controller_ref(object) else {
        return Ok(None);
    };
    let (Some(api_version), Some(kind), Some(name)) = (
        object::str_at(reference, "/apiVersion"),
        object::str_at(reference, "/kind"),
        object::str_at(reference, "/name"),
    ) else {
        return Ok(None);
    };
    let Some((resource, api_resource)) = snapshot
        .resources
        .iter()
        .find(|(r, _)| r.kind == kind && r.api_version == api_version)
        .cloned()
    else {
        return Ok(None);
    };
    let namespace = resource.scope_of(object);
    let found = api(client, &api_resource, namespace).get_opt(name).await?;
    Ok(found.map(|o| value(o, &api_resource)))
}

/// The field managers of metascript controllers that write to the object.
fn managers(object: &Value) -> String {
    let managers: Vec<&str> = object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.get("manager").and_then(Value::as_str))
        .filter(|manager| manager.starts_with("metascript.dev/"))
        .collect();
    if managers.is_empty() {
        return String::new();
    }
    format!("\nFields written by: {}\n", managers.join(", "))
}

/// How a controller acts on the object.
#[derive(Clone, Copy)]
enum Role<'a> {
    Target(&'a DecoratorController),
    Input(&'a MapController),
    Parent(&'a MapController),
}

fn acting_on<'a>(snapshot: &'a Snapshot, resource: &ResourceType, object: &Value) -> Vec<Role<'a>> {
    let mut roles = Vec::new();
    for controller in &snapshot.decorators {
        if let Ok(decorator) = Decorator::new(controller, &snapshot.types)
            && decorator.target_type(object).is_some()
            && decorator.phase(object) != Phase::Idle
        {
            roles.push(Role::Target(controller));
        }
    }
    for controller in &snapshot.maps {
        let Ok(mapper) = Mapper::new(controller, &snapshot.types) else {
            continue;
        };
        if mapper.parent == *resource {
            roles.push(Role::Parent(controller));
        }
        if mapper.inputs.contains(resource) {
            roles.push(Role::Input(controller));
        }
    }
    roles
}

/// The Events about the object, newest last.
async fn events(client: &kube::Client, object: &Value) -> anyhow::Result<String> {
    let namespace = object::namespace(object).unwrap_or("default");
    let uid = object::uid(object).unwrap_or_default();
    let mut events: Vec<Event> = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
        .filter(|e| e.reporting_controller.as_deref() == Some("metascript.dev/operator"))
        .collect();
    if events.is_empty() {
        return Ok("\nNo Events from metascript about it.\n".to_string());
    }
    events.sort_by_key(|e| {
        e.series
            .as_ref()
            .map(|s| s.last_observed_time.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    });
    let mut out = String::from("\nEvents from metascript (newest last):\n");
    for event in events.iter().rev().take(5).rev() {
        let count = event.series.as_ref().map_or(1, |s| s.count);
        let related = event
            .related
            .as_ref()
            .map(|r| {
                format!(
                    " [{} {}]",
                    r.kind.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                )
            })
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} {} x{count}{related}: {}\n",
            event.type_.as_deref().unwrap_or_default(),
            event.reason.as_deref().unwrap_or_default(),
            event.note.as_deref().unwrap_or_default()
        ));
    }
    Ok(out)
}

/// What the hook would get now and answer, through the same sync code as `render`, over the
/// objects it would see (read from the cluster).
async fn dry_run(
    client: &kube::Client,
    snapshot: &Snapshot,
    object: &Value,
    role: Role<'_>,
    scripts_dir: Option<&PathBuf>,
) -> anyhow::Result<String> {
    let (label, hooks, libraries, types, reads, namespace) = match role {
        Role::Target(c) => (
            format!("DecoratorController/{}", kube::ResourceExt::name_any(c)),
            c.spec.hooks.named(),
            &c.spec.libraries,
            c.spec
                .attachments
                .iter()
                .map(|a| a.resource_ref())
                .chain(c.spec.reads.iter().cloned())
                .collect::<Vec<_>>(),
            &c.spec.reads,
            object::namespace(object),
        ),
        Role::Input(c) | Role::Parent(c) => (
            format!("MapController/{}", kube::ResourceExt::name_any(c)),
            c.spec.hooks.named(),
            &c.spec.libraries,
            std::iter::once(c.spec.parent_resource.clone())
                .chain(c.spec.input_resources.iter().cloned())
                .chain(c.spec.output_resources.iter().map(|o| o.resource_ref()))
                .chain(c.spec.reads.iter().cloned())
                .collect(),
            &c.spec.reads,
            object::namespace(object),
        ),
    };
    let mut out = format!("\n{label}:\n");
    // The objects the hook may see: of the controller's types, in the object's namespace.
    let mut objects = vec![object.clone()];
    for reference in &types {
        let Ok(resource) = crate::resources::ResourceResolver::resolve(&snapshot.types, reference)
        else {
            continue;
        };
        let Some((_, api_resource)) = snapshot.resources.iter().find(|(r, _)| *r == resource)
        else {
            continue;
        };
        let listed = api(client, api_resource, resource.scope(namespace))
            .list(&ListParams::default())
            .await?;
        objects.extend(listed.items.into_iter().map(|o| value(o, api_resource)));
    }
    let config_maps: Vec<Value> = {
        let mut found = Vec::new();
        let references = hooks
            .iter()
            .filter_map(|(_, hook)| hook.script.as_ref()?.config_map_ref.as_ref())
            .chain(libraries.iter().filter_map(|l| l.config_map_ref.as_ref()));
        for reference in references {
            if let Some(config_map) =
                Api::<ConfigMap>::namespaced(client.clone(), &reference.namespace)
                    .get_opt(&reference.name)
                    .await?
            {
                let mut value = serde_json::to_value(config_map)?;
                value["apiVersion"] = "v1".into();
                value["kind"] = "ConfigMap".into();
                found.push(value);
            }
        }
        found
    };
    let engine = ScriptEngine::new();
    let name = label.split_once('/').map(|(_, n)| n).unwrap_or_default();
    let local;
    let lookup: &dyn ConfigMapLookup = match scripts_dir {
        Some(dir) => {
            local = ScriptsDir {
                dir: dir.clone(),
                fallback: &config_maps,
            };
            &local
        }
        None => &config_maps,
    };
    let hooks = match ControllerHooks::load(&engine, name, hooks, libraries, lookup) {
        Ok(hooks) => hooks,
        Err(error) => {
            out.push_str(&format!("  its hooks do not load: {error}\n"));
            return Ok(out);
        }
    };
    let cluster = OfflineCluster {
        resolver: snapshot.types.clone(),
        objects,
        ..OfflineCluster::default()
    };
    let calls: Mutex<Vec<String>> = Mutex::default();
    let observe = |call: &HookCall| {
        let response = match call.response {
            Ok(response) => to_yaml(response),
            Err(error) => format!("error: {error}\n"),
        };
        calls.lock().push(format!(
            "  {} hook request:\n{}  response:\n{}",
            call.hook,
            indent(&to_yaml(call.request)),
            indent(&response)
        ));
    };
    // `get` and `list` see what was fetched above: namespaced types in the object's namespace.
    let reads = ReadAccess::new(
        Arc::new(MemoryStore::new(cluster.objects.iter().cloned())),
        crate::resources::resolve_reads(reads, &snapshot.types)?,
    );
    let runner = HookRunner {
        engine: &engine,
        hooks: &hooks,
        observer: Some(&observe),
        // No Events: explain runs the hooks to show them, not on the cluster's behalf.
        scope: CallScope {
            reads: Some(reads),
            ..CallScope::default()
        },
    };
    let planned = match role {
        Role::Target(controller) => {
            let decorator = Decorator::new(controller, &snapshot.types)?;
            out.push_str(&format!("  target, phase {:?}\n", decorator.phase(object)));
            let related = if decorator.has_customize && sync::runs_hook(decorator.phase(object)) {
                sync::customize(&decorator, &runner, object)
                    .and_then(|rules| sync::resolve_related(&decorator, &snapshot.types, rules))
            } else {
                Ok(Vec::new())
            };
            related
                .and_then(|related| {
                    sync::sync_decorator_target(&decorator, &runner, &cluster, object, &related)
                })
                .map(|planned| planned.map(|(_, plan)| to_yaml(&plan)))
        }
        Role::Input(controller) => {
            let mapper = Mapper::new(controller, &snapshot.types)?;
            let parents: Vec<&Value> = cluster
                .objects
                .iter()
                .filter(|p| mapper.parent.describes(p))
                .filter(|p| {
                    mapper
                        .parent_selector(p)
                        .is_ok_and(|selector| mapper.selects_input(p, &selector, object))
                })
                .collect();
            out.push_str(&format!("  input of {} parent(s)\n", parents.len()));
            let mut plans = String::new();
            let mut failed = None;
            for parent in parents {
                let fan_out = MapFanOut::read(&mapper, &cluster, parent)?;
                let groups = fan_out.groups(&mapper);
                let observed = groups
                    .get(&Mapper::map_key(object))
                    .cloned()
                    .unwrap_or_default();
                match sync::map_input(&mapper, &runner, parent, object, &observed) {
                    Ok(plan) => plans.push_str(&to_yaml(&plan)),
                    Err(error) => failed = Some(error),
                }
            }
            match failed {
                Some(error) => Err(error),
                None => Ok(Some(plans)),
            }
        }
        Role::Parent(controller) => {
            let mapper = Mapper::new(controller, &snapshot.types)?;
            let fan_out = MapFanOut::read(&mapper, &cluster, object)?;
            out.push_str(&format!(
                "  parent of {} selected input(s), {} output(s), {} detached group(s)\n",
                fan_out.inputs.len(),
                fan_out.outputs.len(),
                fan_out.detached(&mapper).len()
            ));
            Ok(None)
        }
    };
    for call in calls.into_inner() {
        out.push_str(&call);
    }
    match planned {
        Ok(Some(plan)) if !plan.trim().is_empty() && plan.trim() != "{}" => {
            out.push_str(&format!(
                "  the operator would now write:\n{}",
                indent(&plan)
            ));
        }
        Ok(_) => out.push_str("  the operator would now write nothing\n"),
        Err(error) => out.push_str(&format!("  the sync would fail: {error}\n")),
    }
    Ok(out)
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    {line}\n")).collect()
}
