//! `metascript diff -f CONTROLLER.yaml`: what a controller revision would change in a live
//! cluster, before it is applied. The revision is synced over the cluster's objects through
//! the same pass as `render` (the operator's sync code), and each plan is compared with the
//! objects it writes to (`crate::plan::diff`). Nothing is written: the cluster is only listed.

use super::cluster::{self, ServedTypes};
use super::manifests::{self, to_yaml};
use super::offline::OfflineCluster;
use super::pass::{self, Pass, Synced, WorkId};
use super::places::Places;
use crate::object::{self, ObjectKey};
use crate::plan::diff::{ObjectChange, Summary, changes, describe};
use crate::resources::{ResourceResolver, ResourceType};
use crate::store::ObjectStore;
use anyhow::Context as _;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 when the diff was computed (with --exit-code: and nothing \
    would change), 1 with --exit-code when something would change, 2 on an error (a controller \
    that does not load, a hook that fails on some object, a cluster that cannot be read)."
)]
pub(crate) struct DiffArgs {
    /// Controller manifests, files or directories: the revision to preview. ConfigMaps in them
    /// are used instead of the cluster's (a revision of scripts kept in ConfigMaps); other
    /// objects are ignored, since the diff is against the cluster as it is.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Exit with status 1 when anything would change (for CI gates).
    #[arg(long)]
    pub exit_code: bool,
    /// A directory of hook scripts: a file named like a hook's ConfigMap key is used instead of
    /// that key (as with `metascript run --scripts-dir`).
    #[arg(long)]
    pub scripts_dir: Option<PathBuf>,
    /// Kubeconfig to use; without it, $KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

/// Everything a diff found.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// The work that would write something or fails; work that would write nothing is only
    /// counted.
    entries: Vec<Entry>,
    /// Controllers that cannot run at all, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed: Vec<String>,
    summary: Summary,
}

/// One piece of a controller's work: a target's or parent's sync, a map pair.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(flatten)]
    work: WorkId,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    changes: Vec<ObjectChange>,
    /// Why the sync fails (it would then write nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Report {
    fn has_changes(&self) -> bool {
        self.entries.iter().any(|entry| !entry.changes.is_empty())
    }
}

pub(super) fn run(args: DiffArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let report = match runtime.block_on(diff(&args)) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(2);
        }
    };
    match args.output {
        Format::Text => print!("{}", text(&report)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ),
    }
    if report.summary.errors > 0 {
        ExitCode::from(2)
    } else if args.exit_code && report.has_changes() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

async fn diff(args: &DiffArgs) -> anyhow::Result<Report> {
    let documents = manifests::load_objects(&args.files)?;
    let paths = manifests::paths(&documents);
    let mut given = OfflineCluster::from_documents(documents)?;
    if given.controllers.is_empty() {
        anyhow::bail!("no metascript.dev controller in the files given");
    }
    for warning in given.controllers.iter().flat_map(|c| c.warnings()) {
        eprintln!("warning: {warning}");
    }
    let (given_config_maps, ignored): (Vec<Value>, Vec<Value>) = given
        .objects
        .into_iter()
        .partition(|o| object::kind(o) == "ConfigMap" && object::api_version(o) == "v1");
    for object in ignored {
        eprintln!(
            "warning: {} ignored: the diff is against the cluster's objects (only controllers \
             and the ConfigMaps of their scripts are read from files)",
            ObjectKey::of(&object)
        );
    }
    let client = cluster::client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let served = ServedTypes::discover(&client).await?;
    let server = client.apiserver_version().await.ok();
    let git_version = server.as_ref().map(|info| info.git_version.as_str());
    given.schemas.serve_version(git_version);
    if given.schemas.builtins_elsewhere() {
        eprintln!(
            "warning: the cluster runs Kubernetes {}, and the built-in types' schemas bundled \
             are of {}: a field they do not declare is left to the API server",
            git_version.unwrap_or_default(),
            crate::schema::BUNDLED_KUBERNETES
        );
    }
    // What the plans write is checked against the cluster's CRDs, those given in files first
    // (a CRD being changed along with its controller).
    match cluster::crds(client.clone()).await {
        Ok(crds) => {
            for crd in crds {
                if !given.schemas.knows_crd(object::name(&crd)) {
                    given.schemas.add_crd(&crd);
                }
            }
        }
        Err(error) => eprintln!(
            "warning: the cluster's CustomResourceDefinitions cannot be listed ({error}): \
             outputs of custom types are checked only against the CRDs given in files"
        ),
    }
    let mut live = Live::default();
    let mut sources = given_config_maps.clone();
    for controller in &given.controllers {
        let spec = controller.controller.spec();
        for reference in &spec.types {
            // A type that does not resolve is the controller's load error, said by the pass.
            if let Ok(resource) = served.types.resolve(reference) {
                live.fetch(&client, &served, resource).await?;
            }
        }
        for source in cluster::hook_sources(&client, &spec).await? {
            // The files' ConfigMaps are the revision's; the cluster's only fill in.
            if !sources
                .iter()
                .any(|s| ObjectKey::of(s) == ObjectKey::of(&source))
            {
                sources.push(source);
            }
        }
    }
    let config_maps = pass::with_scripts_dir(args.scripts_dir.clone(), &sources);
    // A sync may read types no controller names up front (those of its customize hook's
    // related rules): they are listed when first asked for, and the pass run again.
    loop {
        let store = Recording {
            live: &live,
            missing: Mutex::default(),
        };
        let pass = Pass {
            objects: &live.objects,
            store: &store,
            resolver: &served.types,
            schemas: &given.schemas,
            config_maps: config_maps.as_ref(),
            clock: None,
        };
        let (synced, failed) = pass.run(&given.controllers);
        let missing = store.missing.into_inner();
        if missing.is_empty() {
            return Ok(report(synced, failed, &live.objects, &paths));
        }
        for resource in missing {
            live.fetch(&client, &served, resource).await?;
        }
    }
}

/// The cluster's objects of the types listed so far.
#[derive(Default)]
struct Live {
    objects: Vec<Value>,
    listed: HashSet<ResourceType>,
}

impl Live {
    /// Lists every object of a type, in every namespace, once. A type the cluster does not
    /// serve has no objects.
    async fn fetch(
        &mut self,
        client: &kube::Client,
        served: &ServedTypes,
        resource: ResourceType,
    ) -> anyhow::Result<()> {
        if self.listed.contains(&resource) {
            return Ok(());
        }
        if served.api_resource(&resource).is_some() {
            let listed = served
                .list(client, &resource, None)
                .await
                .with_context(|| "the diff reads every object of the types it syncs")?;
            self.objects.extend(listed);
        }
        self.listed.insert(resource);
        Ok(())
    }
}

/// The listed objects, noting every type a sync asks for that was not listed yet.
struct Recording<'a> {
    live: &'a Live,
    missing: Mutex<HashSet<ResourceType>>,
}

impl ObjectStore for Recording<'_> {
    fn list(&self, resource: &ResourceType, namespace: Option<&str>) -> crate::store::Listed {
        if !self.live.listed.contains(resource) {
            self.missing.lock().insert(resource.clone());
            return Default::default();
        }
        self.live
            .objects
            .iter()
            .filter(|o| resource.describes(o))
            .filter(|o| namespace.is_none() || resource.scope_of(o) == namespace)
            .map(|o| Arc::new(o.clone()))
            .collect()
    }
}

/// Each sync's plan compared with the objects it writes to; a failure about a line of a script
/// in the manifest `paths` names its place there.
fn report(
    synced: Vec<Synced>,
    failed: Vec<String>,
    objects: &[Value],
    paths: &[PathBuf],
) -> Report {
    let mut places = Places::default();
    let by_key: BTreeMap<ObjectKey, &Value> =
        objects.iter().map(|o| (ObjectKey::of(o), o)).collect();
    let mut report = Report {
        summary: Summary {
            errors: failed.len(),
            ..Summary::default()
        },
        failed,
        ..Report::default()
    };
    for Synced {
        controller,
        field_manager,
        step,
        unchecked,
    } in synced
    {
        for note in unchecked {
            eprintln!("warning: {controller}: {}: {note}", step.subject());
        }
        let (changes, error) = match &step.result {
            Ok(plan) => {
                let subject = by_key.get(&step.object).copied().unwrap_or(&Value::Null);
                (
                    changes(plan, subject, &field_manager, |key| {
                        by_key.get(key).copied()
                    }),
                    None,
                )
            }
            Err(error) => (
                Vec::new(),
                Some(places.failure(paths.iter().map(PathBuf::as_path), error)),
            ),
        };
        report.summary.add(&changes, error.is_some());
        if changes.is_empty() && error.is_none() {
            continue;
        }
        report.entries.push(Entry {
            work: WorkId::of(controller, &step),
            changes,
            error,
        });
    }
    report
}

/// The report as people read it: per piece of work, each object with `+` (create), `~`
/// (update, its fields below), `-` (delete); then a summary line.
fn text(report: &Report) -> String {
    let mut out = String::new();
    for failed in &report.failed {
        out.push_str(&format!("{failed}\n  cannot run\n\n"));
    }
    for entry in &report.entries {
        let work = &entry.work;
        let detail: String = work
            .detail
            .iter()
            .map(|(name, value)| format!(", {name} {value}"))
            .collect();
        let hook = work
            .hook
            .map(|hook| format!(" ({hook})"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{} {}{detail}{hook}:\n",
            work.controller, work.object
        ));
        if let Some(error) = &entry.error {
            out.push_str(&format!("  the sync fails: {error}\n"));
        }
        for change in &entry.changes {
            out.push_str(&object_change(change));
        }
        out.push('\n');
    }
    let summary = &report.summary;
    let mut counts = Vec::new();
    for (count, what) in [
        (summary.create, "to create"),
        (summary.update, "to change"),
        (summary.delete, "to delete"),
        (summary.claim, "to adopt or release"),
        (
            summary.errors,
            if summary.errors == 1 {
                "error"
            } else {
                "errors"
            },
        ),
    ] {
        if count > 0 {
            counts.push(format!("{count} {what}"));
        }
    }
    if counts.is_empty() || counts.len() == 1 && summary.errors > 0 {
        counts.insert(0, "no changes".into());
    }
    out.push_str(&format!(
        "{} ({} evaluated)\n",
        counts.join(", "),
        summary.evaluated
    ));
    out
}

fn object_change(change: &ObjectChange) -> String {
    let mut out = describe(change);
    if let Some(created) = &change.object {
        out.extend(
            to_yaml(created)
                .lines()
                .map(|line| format!("      {line}\n")),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Plan, Step, SyncError};
    use serde_json::json;

    fn target(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns", "labels": {"rev": "a"}}})
    }

    fn synced(name: &str, result: Result<Plan, SyncError>) -> Synced {
        Synced {
            controller: "DecoratorController/d".into(),
            field_manager: "metascript.dev/decorator-d".into(),
            step: Step {
                object: ObjectKey::of(&target(name)),
                detail: Vec::new(),
                hook: None,
                result,
            },
            unchecked: Vec::new(),
        }
    }

    /// Work that writes nothing is counted, not listed; a failing sync is listed and counted as
    /// an error, which the exit status follows.
    #[test]
    fn the_report_lists_changes_and_errors_and_counts_everything() {
        let relabel = Plan {
            metadata_patch: Some(json!({"metadata": {"labels": {"rev": "b"}}})),
            ..Plan::default()
        };
        let failure = SyncError::Watch {
            controller: "d".into(),
            message: "forbidden".into(),
        };
        let report = report(
            vec![
                synced("same", Ok(Plan::default())),
                synced("changed", Ok(relabel)),
                synced("failing", Err(failure)),
            ],
            Vec::new(),
            &[target("same"), target("changed"), target("failing")],
            &[],
        );
        assert_eq!(
            report.summary,
            Summary {
                evaluated: 3,
                update: 1,
                errors: 1,
                ..Summary::default()
            }
        );
        let listed: Vec<&str> = report
            .entries
            .iter()
            .map(|e| e.work.object.as_str())
            .collect();
        assert_eq!(
            listed,
            ["ConfigMap.v1 ns/changed", "ConfigMap.v1 ns/failing"]
        );
        let printed = text(&report);
        assert!(
            printed.contains(
                "DecoratorController/d ConfigMap.v1 ns/changed:\n  ~ ConfigMap.v1 ns/changed \
                 (change)\n      metadata.labels.rev: \"a\" -> \"b\"\n"
            ),
            "{printed}"
        );
        assert!(printed.contains("  the sync fails: "), "{printed}");
        assert!(
            printed.ends_with("1 to change, 1 error (3 evaluated)\n"),
            "{printed}"
        );
    }

    #[test]
    fn nothing_to_change_says_so() {
        let report = report(
            vec![synced("same", Ok(Plan::default()))],
            Vec::new(),
            &[],
            &[],
        );
        assert!(!report.has_changes());
        assert_eq!(text(&report), "no changes (1 evaluated)\n");
    }
}
