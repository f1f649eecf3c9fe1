//! `metascript explain KIND/NAME`: who manages an object, from which script revision and which
//! version of what, what went wrong last, and what the hook would answer now (a dry run through
//! the same sync code as `render`, against the objects in the cluster).

use super::cluster::{self, ServedTypes, api, value};
use super::manifests::to_yaml;
use super::offline::{OfflineCluster, OfflineController};
use super::pass;
use crate::api::{RolloutStatus, SYNC_REQUESTED_ANNOTATION, ScriptStatus};
use crate::hooks::{ControllerHooks, HookCall, HookRunner, WebhookClient};
use crate::object;
use crate::plan::{Offline, PROVENANCE_ANNOTATION, Planner, SOURCE_ANNOTATION};
use crate::reads::ReadAccess;
use crate::resources::{ResourceResolver, ResourceType};
use crate::script::{CallScope, ScriptEngine};
use crate::store::MemoryStore;
use anyhow::Context as _;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use parking_lot::Mutex;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub(crate) struct ExplainArgs {
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

/// Everything `explain` reads from the cluster.
struct Snapshot {
    served: ServedTypes,
    /// Every controller of every kind.
    controllers: Vec<OfflineController>,
}

pub(super) async fn explain(args: &ExplainArgs) -> anyhow::Result<String> {
    let client = cluster::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let (kind, name) = args
        .object
        .split_once('/')
        .with_context(|| format!("{:?}: expected KIND/NAME", args.object))?;
    let served = ServedTypes::discover(&client).await?;
    let snapshot = Snapshot {
        controllers: served.controllers(&client).await?,
        served,
    };
    let (resource, api_resource) = snapshot.served.find(kind).with_context(|| {
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
    if let Some(at) = object::annotation(&object, SYNC_REQUESTED_ANNOTATION) {
        out.push_str(&format!(
            "  sync last requested: {at} ({SYNC_REQUESTED_ANNOTATION})\n"
        ));
    }
    out.push_str(&written_by(&client, &snapshot, &object, args.scripts_dir.as_ref()).await?);
    out.push_str(&managed_by);
    let acting = acting_on(&snapshot, &resource, &object);
    if acting.is_empty() {
        out.push_str("\nNo metascript controller acts on it.\n");
    }
    out.push_str(&events(&client, &object).await?);
    for controller in acting {
        out.push_str(
            &dry_run(
                &client,
                &snapshot,
                &object,
                controller,
                args.scripts_dir.as_ref(),
            )
            .await?,
        );
    }
    Ok(out)
}

/// The provenance a child or output carries, checked against the controller's current script
/// and the source's current version.
async fn written_by(
    client: &kube::Client,
    snapshot: &Snapshot,
    object: &Value,
    scripts_dir: Option<&PathBuf>,
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
    let in_cluster = match snapshot.controller(controller) {
        Some(named) => hook_digest(client, snapshot, named, hook, scripts_dir).await?,
        None => None,
    };
    let reported = reported_digest(snapshot, controller, hook);
    let rollout = snapshot
        .controller(controller)
        .and_then(|named| named.controller.status())
        .and_then(|status| status.rollout.as_ref());
    match rollout {
        Some(rollout) if rollout.candidate.is_some() => out.push_str(&revision_now(
            script,
            in_cluster.as_deref(),
            reported.as_ref(),
            rollout,
        )),
        Some(rollout) if rollout.halted.is_some() => {
            out.push_str(&held_back(script, reported.as_ref(), rollout))
        }
        _ => out.push_str(&script_now(
            script,
            in_cluster.as_deref(),
            reported.as_ref(),
        )),
    }
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

impl Snapshot {
    /// The controller named `<kind>/<name>` (as provenance names it).
    fn controller(&self, named: &str) -> Option<&OfflineController> {
        let (kind, name) = named.split_once('/')?;
        self.controllers
            .iter()
            .find(|c| c.kind.name().as_str() == kind && c.controller.name() == name)
    }
}

/// A controller as the cluster (or `--scripts-dir`) holds its hooks now: its planner and
/// compiled hooks, or why it cannot run (the outer error is the cluster's).
async fn load_now(
    engine: &ScriptEngine,
    client: &kube::Client,
    snapshot: &Snapshot,
    controller: &OfflineController,
    scripts_dir: Option<&PathBuf>,
) -> anyhow::Result<Result<(Box<dyn Planner>, ControllerHooks), String>> {
    let sources = cluster::hook_sources(client, &controller.controller.spec()).await?;
    let lookup = pass::with_scripts_dir(scripts_dir.cloned(), &sources);
    Ok(pass::load(
        engine,
        controller,
        &snapshot.served.types,
        lookup.as_ref(),
    ))
}

/// The digest of a controller's `hook` as the cluster (or `--scripts-dir`) holds it now, when
/// its hooks load.
async fn hook_digest(
    client: &kube::Client,
    snapshot: &Snapshot,
    controller: &OfflineController,
    hook: &str,
    scripts_dir: Option<&PathBuf>,
) -> anyhow::Result<Option<String>> {
    let engine = ScriptEngine::new();
    let loaded = load_now(&engine, client, snapshot, controller, scripts_dir).await?;
    Ok(loaded.ok().and_then(|(_, hooks)| {
        let loaded = hooks.iter().find(|loaded| loaded.kind.as_str() == hook)?;
        Some(loaded.digest().to_string())
    }))
}

/// What `status.scripts.<hook>` of a controller named `<kind>/<name>` reports running.
fn reported_digest(snapshot: &Snapshot, controller: &str, hook: &str) -> Option<ScriptStatus> {
    let status = snapshot.controller(controller)?.controller.status()?;
    status.scripts.get(hook).cloned()
}

/// How the script that wrote an object (`wrote`, a digest prefix) stands against the one the
/// cluster holds now (`in_cluster`, loaded from its ConfigMap or inline field) and the one the
/// operator last reported running (its status, written every status interval, so it can lag
/// behind an edit the operator already runs).
fn script_now(wrote: &str, in_cluster: Option<&str>, reported: Option<&ScriptStatus>) -> String {
    let short = |digest: &str| digest[..digest.len().min(12)].to_string();
    match (in_cluster, reported) {
        (Some(now), _) if now.starts_with(wrote) => {
            "  that is the script in the cluster now\n".to_string()
        }
        (Some(now), Some(running)) if running.digest == now => format!(
            "  the script running now is {} (this object has not needed a write since)\n",
            short(now)
        ),
        (Some(now), Some(running)) => format!(
            "  the cluster now holds script {}; the operator's status still reports {} (it is \
             written every status interval), and this object has not been written since\n",
            short(now),
            short(&running.digest)
        ),
        (Some(now), None) => format!(
            "  the cluster now holds script {} (the operator reports none running)\n",
            short(now)
        ),
        (None, Some(running)) if running.digest.starts_with(wrote) => {
            "  that is the script the operator reports running (its source does not load here)\n"
                .to_string()
        }
        (None, Some(running)) => format!(
            "  the operator reports script {} running (its source does not load here)\n",
            short(&running.digest)
        ),
        (None, None) => "  the controller has no such hook now\n".to_string(),
    }
}

/// During a staged rollout, which revision wrote the object: the serving one (whose scripts
/// the status reports) or the candidate (whose scripts the cluster holds now). A canary's
/// candidate writes only the objects of its share; a shadow writes none.
fn revision_now(
    wrote: &str,
    in_cluster: Option<&str>,
    reported: Option<&ScriptStatus>,
    rollout: &RolloutStatus,
) -> String {
    let candidate = rollout.candidate.as_deref().unwrap_or_default();
    let by_serving = reported.is_some_and(|running| running.digest.starts_with(wrote));
    let by_candidate = in_cluster.is_some_and(|now| now.starts_with(wrote));
    let strategy = rollout.strategy;
    match (by_serving, by_candidate) {
        (true, true) => format!(
            "  both revision {} (serving) and candidate revision {candidate} ({strategy:?}) run \
             this script\n",
            rollout.serving
        ),
        (true, false) => format!(
            "  that is serving revision {}'s script: candidate revision {candidate} \
             ({strategy:?}) has not written this object\n",
            rollout.serving
        ),
        (false, true) => format!(
            "  that is candidate revision {candidate}'s script ({strategy:?}): it serves this \
             object; revision {} serves the rest\n",
            rollout.serving
        ),
        (false, false) => format!(
            "  neither serving revision {} nor candidate revision {candidate} ({strategy:?}) runs \
             this script now; this object has not been written since\n",
            rollout.serving
        ),
    }
}

/// With the newest revision held back (rolled back, aborted, undone), the script in the
/// cluster does not run: the serving revision, which the status reports, does.
fn held_back(wrote: &str, reported: Option<&ScriptStatus>, rollout: &RolloutStatus) -> String {
    let Some(halted) = &rollout.halted else {
        return String::new();
    };
    let by_serving = reported.is_some_and(|running| running.digest.starts_with(wrote));
    format!(
        "  the cluster holds revision {} ({}), held back: it does not run; serving revision {} \
         does{}\n",
        halted.revision,
        halted.reason,
        rollout.serving,
        match by_serving {
            true => ", and wrote this object",
            false => ", and has not written this object since",
        }
    )
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
        .served
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

/// The controllers that act on the object now.
fn acting_on<'a>(
    snapshot: &'a Snapshot,
    resource: &ResourceType,
    object: &Value,
) -> Vec<&'a OfflineController> {
    snapshot
        .controllers
        .iter()
        .filter(|c| {
            c.controller
                .planner(&snapshot.served.types)
                .is_ok_and(|planner| planner.acts_on(resource, object))
        })
        .collect()
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
    acting: &OfflineController,
    scripts_dir: Option<&PathBuf>,
) -> anyhow::Result<String> {
    let controller = &acting.controller;
    let spec = controller.spec();
    let namespace = object::namespace(object);
    let mut out = format!("\n{}:\n", acting.label());
    // The spec in the cluster is held back: a dry run of it would show what does not run.
    let held = controller
        .status()
        .and_then(|status| status.rollout.as_ref())
        .filter(|rollout| rollout.candidate.is_none())
        .and_then(|rollout| Some((rollout, rollout.halted.as_ref()?)));
    if let Some((rollout, halted)) = held {
        out.push_str(&format!(
            "  no dry run: its spec in the cluster is revision {}, held back ({}: {}); serving \
             revision {} runs from its snapshot (metascript rollout status)\n",
            halted.revision, halted.reason, halted.message, rollout.serving
        ));
        return Ok(out);
    }
    if let Some(at) = object::annotation(&acting.object, SYNC_REQUESTED_ANNOTATION) {
        out.push_str(&format!(
            "  a sync of everything it acts on last requested: {at}\n"
        ));
    }
    // The objects the hook may see: of the controller's types, in the object's namespace.
    let mut objects = vec![object.clone()];
    for reference in &spec.types {
        let Ok(resource) = snapshot.served.types.resolve(reference) else {
            continue;
        };
        if snapshot.served.api_resource(&resource).is_none() {
            continue;
        }
        let listed = snapshot.served.list(client, &resource, namespace).await?;
        objects.extend(
            listed
                .into_iter()
                .filter(|o| object::uid(o).is_none() || object::uid(o) != object::uid(object)),
        );
    }
    let engine = ScriptEngine::new();
    let (planner, hooks) = match load_now(&engine, client, snapshot, acting, scripts_dir).await? {
        Ok(loaded) => loaded,
        Err(error) => {
            out.push_str(&format!("  it cannot run: {error}\n"));
            return Ok(out);
        }
    };
    let cluster = OfflineCluster {
        resolver: snapshot.served.types.clone(),
        objects,
        ..OfflineCluster::default()
    };
    let calls: Mutex<Vec<String>> = Mutex::default();
    let observe = |call: &HookCall| {
        // Secrets are shown with their keys only, whoever runs explain.
        let response = match call.response {
            Ok(response) => to_yaml(&crate::cases::record::redact(response)),
            Err(error) => format!("error: {error}\n"),
        };
        calls.lock().push(format!(
            "  {} hook request:\n{}  response:\n{}",
            call.hook,
            indent(&to_yaml(&crate::cases::record::redact(
                &call.request.to_value()
            ))),
            indent(&response)
        ));
    };
    // `get` and `list` see what was fetched above: namespaced types in the object's namespace.
    // No Events: explain runs the hooks to show them, not on the cluster's behalf.
    let scope = CallScope::reading(ReadAccess::new(
        Arc::new(MemoryStore::new(cluster.objects.iter().cloned())),
        planner.reads(),
    ));
    let runner = HookRunner {
        engine: &engine,
        hooks: &hooks,
        webhooks: WebhookClient::unrestricted(),
        observer: Some(&observe),
        scope: &scope,
    };
    let offline = Offline {
        runner: &runner,
        store: &cluster,
        resolver: &snapshot.served.types,
        schemas: &crate::schema::NoSchemas,
    };
    for role in planner.explain(&offline, object) {
        let mut text = format!("  {}\n", role.summary);
        for call in std::mem::take(&mut *calls.lock()) {
            text.push_str(&call);
        }
        let written: String = match &role.outcome {
            Ok(plans) => plans
                .iter()
                .flatten()
                .filter(|plan| !plan.is_noop() || plan.resync_after_seconds.is_some())
                .map(to_yaml)
                .collect(),
            Err(_) => String::new(),
        };
        match role.outcome {
            Err(error) => text.push_str(&format!("  the sync would fail: {error}\n")),
            Ok(_) if written.trim().is_empty() => {
                text.push_str("  the operator would now write nothing\n")
            }
            Ok(_) => text.push_str(&format!(
                "  the operator would now write:\n{}",
                indent(&written)
            )),
        }
        // Whoever runs explain sees no value of a Secret the hooks were handed: not in the
        // redacted Secrets, nor wherever else a hook copied it.
        out.push_str(&scope.secrets.scrub(&text));
    }
    Ok(out)
}

fn indent(text: &str) -> String {
    text.lines().map(|line| format!("    {line}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(digest: &str) -> ScriptStatus {
        ScriptStatus {
            digest: digest.into(),
            source: "inline".into(),
            stale: false,
        }
    }

    #[test]
    fn the_script_in_the_cluster_is_named_before_the_status_catches_up() {
        // The operator already wrote with the edited script; its status still names the old.
        let lagging = running("aaaa000000000000");
        assert_eq!(
            script_now("bbbb0000", Some("bbbb000000000000"), Some(&lagging)),
            "  that is the script in the cluster now\n"
        );
        // The object was written by the old script; the new one runs and has not needed it.
        let caught_up = running("bbbb000000000000");
        assert!(
            script_now("aaaa0000", Some("bbbb000000000000"), Some(&caught_up)).contains(
                "the script running now is bbbb00000000 (this object has not needed a write since)"
            )
        );
        // Edited, not yet reported: neither is called running. (A source that does not load is
        // not "in the cluster": the status is all there is, below.)
        let text = script_now("aaaa0000", Some("cccc000000000000"), Some(&lagging));
        assert!(
            text.contains("the cluster now holds script cccc00000000"),
            "{text}"
        );
        assert!(text.contains("status still reports aaaa00000000"), "{text}");
    }

    #[test]
    fn without_the_source_the_status_is_what_there_is() {
        let reported = running("aaaa000000000000");
        assert!(
            script_now("aaaa0000", None, Some(&reported)).contains("the operator reports running")
        );
        assert!(
            script_now("bbbb0000", None, Some(&reported))
                .contains("reports script aaaa00000000 running")
        );
        assert_eq!(
            script_now("aaaa0000", None, None),
            "  the controller has no such hook now\n"
        );
    }
    #[test]
    fn a_held_back_revision_is_not_taken_for_the_one_running() {
        let rollout: RolloutStatus = serde_json::from_value(serde_json::json!({
            "strategy": "Canary", "serving": "rev-old",
            "halted": {"revision": "rev-new", "reason": "Undone", "message": "m"}
        }))
        .unwrap();
        let running = running("aaaa000000000000");
        let text = held_back("aaaa0000", Some(&running), &rollout);
        assert!(
            text.contains("revision rev-new (Undone), held back: it does not run; serving revision rev-old does, and wrote this object"),
            "{text}"
        );
        assert!(!text.contains("status"), "{text}");
        let other = held_back("bbbb0000", Some(&running), &rollout);
        assert!(
            other.contains("has not written this object since"),
            "{other}"
        );
    }

    #[test]
    fn during_a_rollout_the_revision_that_wrote_an_object_is_named() {
        let serving = ScriptStatus {
            digest: "aaaa000000000000".into(),
            ..ScriptStatus::default()
        };
        let rollout = RolloutStatus {
            strategy: crate::api::RolloutStrategy::Canary,
            serving: "rev-serving".into(),
            candidate: Some("rev-new".into()),
            ..RolloutStatus::default()
        };
        let by_candidate = revision_now(
            "bbbb0000",
            Some("bbbb000000000000"),
            Some(&serving),
            &rollout,
        );
        assert!(
            by_candidate
                .contains("candidate revision rev-new's script (Canary): it serves this object"),
            "{by_candidate}"
        );
        let by_serving = revision_now(
            "aaaa0000",
            Some("bbbb000000000000"),
            Some(&serving),
            &rollout,
        );
        assert!(
            by_serving.contains("serving revision rev-serving's script"),
            "{by_serving}"
        );
        let neither = revision_now(
            "cccc0000",
            Some("bbbb000000000000"),
            Some(&serving),
            &rollout,
        );
        assert!(neither.contains("neither"), "{neither}");
    }
}
