//! `metascript render`: one full sync pass over manifests, in memory, printing what the
//! operator would do.

use super::manifests::{self, to_yaml};
use super::offline::OfflineCluster;
use super::pass::{self, Pass, Synced, WorkId};
use super::places::Places;
use crate::plan::{Plan, strip_provenance};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct RenderArgs {
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
pub(crate) enum Format {
    Yaml,
    Json,
}

/// One sync's outcome as printed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(flatten)]
    work: WorkId,
    #[serde(flatten)]
    plan: Plan,
}

pub(super) fn run(args: RenderArgs) -> ExitCode {
    let mut paths = Vec::new();
    let cluster = match manifests::load_objects(&args.files)
        .map_err(|e| e.to_string())
        .and_then(|docs| {
            paths = manifests::paths(&docs);
            OfflineCluster::from_documents(docs).map_err(|e| e.to_string())
        }) {
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
    for warning in cluster.controllers.iter().flat_map(|c| c.warnings()) {
        eprintln!("warning: {warning}");
    }
    let (mut entries, errors) = render(&cluster, &paths, args.scripts_dir.clone(), args.now);
    if args.no_provenance {
        for entry in &mut entries {
            strip_provenance(&mut entry.plan);
        }
    }
    let printed = match args.output {
        Format::Yaml => to_yaml(&entries),
        Format::Json => serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n",
    };
    // Every sync failed: the errors are the answer, and an empty YAML list before them would
    // read as "nothing to do". JSON stays a document for the pipes it feeds.
    if !entries.is_empty() || errors.is_empty() || matches!(args.output, Format::Json) {
        print!("{printed}");
    }
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
/// of the syncs that failed (which plan nothing), at their places in the manifest `paths`.
fn render(
    cluster: &OfflineCluster,
    paths: &[PathBuf],
    scripts_dir: Option<PathBuf>,
    now: Option<jiff::Timestamp>,
) -> (Vec<Entry>, Vec<String>) {
    let config_maps = pass::with_scripts_dir(scripts_dir, &cluster.objects);
    let pass = Pass {
        objects: &cluster.objects,
        store: cluster,
        resolver: &cluster.resolver,
        schemas: &cluster.schemas,
        config_maps: config_maps.as_ref(),
        clock: Some(now.unwrap_or_else(jiff::Timestamp::now)),
    };
    let (synced, mut errors) = pass.run(&cluster.controllers);
    let mut entries = Vec::new();
    let mut places = Places::default();
    for Synced {
        controller,
        step,
        unchecked,
        ..
    } in synced
    {
        let subject = step.subject();
        for note in unchecked {
            eprintln!("warning: {controller}: {subject}: {note}");
        }
        let work = WorkId::of(controller, &step);
        match step.result {
            Ok(plan) => entries.push(Entry { work, plan }),
            Err(error) => {
                // The place first, where terminals and editors look for it.
                let what = format!("{}: {subject}: {}", work.controller, error.with_body());
                errors.push(
                    match places.locate(paths.iter().map(PathBuf::as_path), &error) {
                        Some(place) => format!("{place}: {what}"),
                        None => what,
                    },
                );
            }
        }
    }
    (entries, errors)
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
