//! How fast the operator converges a MapController with one parent and many inputs: the
//! configmap-transform example (a ConfigTemplate renders each selected ConfigMap into
//! `<name>-rendered`) on a fresh local control plane, with the operator running in this process.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo run --release --example bench_map -- --inputs 1000 --language rhai
//! ```
//!
//! Phases, each timed from the request that starts it until a watch (or a poll of the parent)
//! sees the end state:
//! 1. a plain client creates the N inputs (8 in flight); the operator is not running yet;
//! 2. the operator starts and the MapController is applied: until all N outputs exist (with the
//!    time each tenth of them was reached, which shows whether per-pair cost grows with the
//!    number of outputs) and until the parent's aggregated status counts N outputs;
//! 3. a resync of the converged cluster: it must make zero write requests; it skips every pair
//!    (their map calls were pure and nothing they saw changed), or with `--full-resync` maps
//!    every pair again, as resyncs did before they were fingerprinted;
//! 4. one input deleted, and one input relabelled out of the selector: until its output is gone;
//! 5. for comparison, after the operator has stopped: a plain client creates N ConfigMaps shaped
//!    like the outputs, sequentially and with as many in flight as the operator has workers, and
//!    applies them (server-side, what the operator does) at that concurrency, once alone and once
//!    while it caches their content from a watch (what a controller whose inputs are of the
//!    outputs' type pays, as the operator does here); each in a namespace of its own.
//!
//! The control plane runs as separate processes, so the operator's peak RSS is this process's
//! (which also holds the benchmark's own small watches); the plane's RSS is shown for context.

// Shared with the other benchmarks, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::apiserver::ApiserverCounts;
use common::{CpuClock, create_namespace, idle_cpu, init_tracing, memory, per_item, secs, settle};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, watcher};
use metascript::runtime::{ControllerId, Operator, OperatorConfig};
use metascript::testing::{ControlPlane, install_crds};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;

const CONTROLLER: &str = "configmap-transform-bench";
const TEMPLATE: &str = "bench-template";
const NAMESPACE: &str = "bench";
const MAP_LABEL: &str = "metascript.dev/map";
const MAP_KEY_LABEL: &str = "metascript.dev/map-key";
/// The label the parent selects its inputs by (the outputs inherit it, which exercises the
/// recursion guard: an output is controlled by the parent and so never an input).
const INPUT_LABEL: (&str, &str) = ("bench", "map-input");
const TRANSFORM_CRDS: &str = include_str!("../scripts/configmap-transform/crds.yaml");
/// Requests the plain client keeps in flight when it creates the inputs.
const CONCURRENCY: usize = 8;
/// How often a phase that is still waiting prints its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How often the parent's status is read while waiting for the aggregated count.
const POLL_EVERY: Duration = Duration::from_millis(250);

struct Args {
    inputs: usize,
    language: String,
    workers: usize,
    /// Upper bound for any one phase, so a pathological run fails instead of hanging.
    timeout: Duration,
    skip_plain: bool,
    /// Resyncs run every hook (`metascript run --full-resync`).
    full_resync: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        inputs: 1000,
        language: "rhai".into(),
        workers: 16,
        timeout: Duration::from_secs(20 * 60),
        skip_plain: false,
        full_resync: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--inputs" => args.inputs = value("--inputs")?.parse()?,
            "--language" => args.language = value("--language")?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--timeout-mins" => {
                args.timeout = Duration::from_secs(60 * value("--timeout-mins")?.parse::<u64>()?)
            }
            "--skip-plain" => args.skip_plain = true,
            "--full-resync" => args.full_resync = true,
            "-h" | "--help" => {
                println!(
                    "usage: bench_map [--inputs N] [--language rhai|lua] [--workers N] \
                     [--timeout-mins M] [--skip-plain] [--full-resync]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other} (try --help)"),
        }
    }
    anyhow::ensure!(
        matches!(args.language.as_str(), "rhai" | "lua"),
        "--language must be rhai or lua"
    );
    anyhow::ensure!(args.inputs >= 10, "--inputs must be at least 10");
    Ok(args)
}

fn script(language: &str) -> &'static str {
    match language {
        "rhai" => include_str!("../scripts/configmap-transform/map.rhai"),
        _ => include_str!("../scripts/configmap-transform/map.lua"),
    }
}

fn input_name(i: usize) -> String {
    format!("in-{i:05}")
}

fn input_data(i: usize) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("db-host".to_string(), format!("db-{i}.bench.svc")),
        ("db-port".to_string(), "5432".to_string()),
        ("log-level".to_string(), "info".to_string()),
    ])
}

fn input(i: usize) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": input_name(i), "namespace": NAMESPACE,
            "labels": {INPUT_LABEL.0: INPUT_LABEL.1, "tier": "backend"}
        },
        "data": input_data(i)
    }))
    .expect("a valid ConfigMap")
}

/// What the map hook renders from input `i` under [`template`], built here so the plain client
/// writes objects of the same shape and size (labels, annotations, data, and the controller
/// reference to a parent in their namespace, which any controller of them sets) as the operator
/// does. The operator's provenance annotations are left out: they are its own feature's cost.
fn output_like(namespace: &str, i: usize, owner: &Value) -> ConfigMap {
    let data = input_data(i);
    let rendered: BTreeMap<String, String> = data
        .iter()
        .map(|(key, value)| {
            let base = match key.as_str() {
                "db-host" => "DATABASE_HOST",
                "db-port" => "DATABASE_PORT",
                other => other,
            };
            (format!("APP_{base}"), value.clone())
        })
        .collect();
    let checksum = hex::encode(Sha256::digest(
        serde_json::to_vec(&data).unwrap_or_default(),
    ));
    let map_key = &hex::encode(Sha256::digest(input_name(i)))[..32];
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": format!("{}-rendered", input_name(i)), "namespace": namespace,
            "labels": {INPUT_LABEL.0: INPUT_LABEL.1, "tier": "backend",
                       MAP_LABEL: CONTROLLER, MAP_KEY_LABEL: map_key},
            "annotations": {
                "config.example.com/rendered-from": input_name(i),
                "config.example.com/source-checksum": checksum
            },
            "ownerReferences": [owner]
        },
        "data": rendered
    }))
    .expect("a valid ConfigMap")
}

fn template(namespace: &str) -> Value {
    json!({
        "apiVersion": "config.example.com/v1", "kind": "ConfigTemplate",
        "metadata": {"name": TEMPLATE, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {INPUT_LABEL.0: INPUT_LABEL.1}},
            "rename": {"db-host": "DATABASE_HOST", "db-port": "DATABASE_PORT"},
            "keyPrefix": "APP_"
        }
    })
}

fn template_api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.example.com", "v1", "ConfigTemplate"),
        "configtemplates",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

fn map_controller(language: &str) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
        "metadata": {"name": CONTROLLER},
        "spec": {
            "parentResource": {"apiVersion": "config.example.com/v1", "resource": "configtemplates"},
            "inputResources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "outputResources": [{"apiVersion": "v1", "resource": "configmaps",
                                 "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"map": {"script": {"language": language, "inline": script(language)}}}
        }
    })
}

/// Applies the ConfigTemplate in `namespace`; returns it as the server has it.
async fn apply_template(client: &kube::Client, namespace: &str) -> anyhow::Result<Value> {
    let applied = template_api(client, namespace)
        .patch(
            TEMPLATE,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(template(namespace)),
        )
        .await?;
    Ok(serde_json::to_value(applied)?)
}

/// Installs the ConfigTemplate CRD of the example and waits until it is served.
async fn install_template_crd(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let documents: Vec<Value> = serde_saphyr::from_multiple(TRANSFORM_CRDS)?;
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        let crd: CustomResourceDefinition = serde_json::from_value(document)?;
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let established = crds
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "CRD {name} never became Established"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Write {
    Create,
    Apply,
}

/// Writes `objects` with `in_flight` requests at a time; returns how long that took.
async fn write_all(
    api: &Api<ConfigMap>,
    objects: Vec<ConfigMap>,
    in_flight: usize,
    how: Write,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    futures::stream::iter(objects)
        .map(|object| {
            let api = api.clone();
            async move {
                match how {
                    Write::Create => api.create(&PostParams::default(), &object).await,
                    Write::Apply => {
                        // Force and one field manager, as the operator applies its outputs.
                        let params = PatchParams::apply("bench").force();
                        api.patch(&object.name_any(), &params, &Patch::Apply(&object))
                            .await
                    }
                }
            }
        })
        .buffer_unordered(in_flight)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(started.elapsed())
}

/// What a controller of a namespace's ConfigMaps pays before it does anything: a watch of
/// their content (the API server encodes every object for it) and a cache the events are
/// decoded into. The operator pays it for its inputs' type, which here is also its outputs'.
struct ContentCache {
    task: tokio::task::JoinHandle<()>,
}

impl ContentCache {
    fn start(client: &kube::Client, namespace: &str) -> ContentCache {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        let task = tokio::spawn(async move {
            let mut cache: HashMap<String, ConfigMap> = HashMap::new();
            let mut events =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                        cache.insert(object.name_any(), object);
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        cache.remove(&object.name_any());
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    Err(error) => tracing::warn!(%error, "benchmark watch failed; retrying"),
                }
            }
        });
        ContentCache { task }
    }
}

impl Drop for ContentCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Counts, from a metadata watch, the operator's outputs in a namespace. A watch rather than
/// polling lists: it sees the moment the last output appears, and costs the apiserver far less
/// than listing 10,000 objects four times a second.
struct OutputCount {
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl OutputCount {
    fn start(client: &kube::Client, namespace: &str) -> OutputCount {
        // Metadata only: the count needs names, not data.
        let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().labels(&format!("{MAP_LABEL}={CONTROLLER}"));
        let (tx, count) = watch::channel(0);
        let task = tokio::spawn(async move {
            let mut present: HashSet<String> = HashSet::new();
            let mut init: HashSet<String> = HashSet::new();
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init) => init.clear(),
                    Ok(watcher::Event::InitApply(object)) => {
                        init.insert(object.name_any());
                    }
                    Ok(watcher::Event::InitDone) => present = std::mem::take(&mut init),
                    Ok(watcher::Event::Apply(object)) => {
                        present.insert(object.name_any());
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        present.remove(&object.name_any());
                    }
                    Err(error) => {
                        // The watcher restarts by itself; a failure only delays the count.
                        tracing::warn!(%error, "benchmark watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
                tx.send_replace(present.len());
            }
        });
        OutputCount { count, task }
    }

    fn now(&self) -> usize {
        *self.count.borrow()
    }

    /// Waits until `done(count)` holds, printing progress (with `status()`) every
    /// [`PROGRESS_EVERY`]; returns when it was seen.
    async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(usize) -> bool,
        status: &dyn Fn() -> String,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let waited = tokio::time::timeout(PROGRESS_EVERY, self.count.wait_for(|c| done(*c)))
                .await
                .map(|seen| seen.is_ok());
            match waited {
                Ok(true) => return Ok(Instant::now()),
                Ok(false) => anyhow::bail!("the watch counting {what} stopped"),
                Err(_) if Instant::now() < deadline => {
                    println!("    ... {what}: {} outputs; {}", self.now(), status())
                }
                Err(_) => anyhow::bail!(
                    "timed out after {timeout:?} waiting for {what}: {} outputs; {}",
                    self.now(),
                    status()
                ),
            }
        }
    }
}

impl Drop for OutputCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The operator's counters, for progress lines.
fn operator_status(operator: &Operator) -> String {
    format!(
        "{} map calls, {} writes, {} queued",
        operator.syncs(),
        operator.writes(),
        operator.queued()
    )
}

/// Polls the parent until its aggregated status says `inputs` selected and `outputs` owned.
async fn parent_counts(
    api: &Api<DynamicObject>,
    inputs: usize,
    outputs: usize,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        let parent = serde_json::to_value(api.get(TEMPLATE).await?)?;
        let count = |path: &str| parent.pointer(path).cloned().unwrap_or(Value::Null);
        let last = (
            count("/status/inputs/configmaps/total"),
            count("/status/outputs/configmaps/total"),
        );
        if last == (json!(inputs), json!(outputs)) {
            return Ok(Instant::now());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the parent's status never counted {inputs} inputs and {outputs} outputs; last \
             seen {last:?}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = parse_args()?;
    let n = args.inputs;
    let language = args.language.as_str();
    let timeout = args.timeout;
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |what: &str, value: String, note: String| {
        println!("  {what}: {value} {note}");
        rows.push((what.to_string(), value, note));
    };

    println!(
        "bench_map: {n} inputs, {language}, {} workers (pid {})",
        args.workers,
        std::process::id()
    );
    // Awaited on the main thread (not spawned): the plane's processes die with the thread that
    // started them.
    let started = Instant::now();
    let plane = ControlPlane::start().await?;
    println!("control plane up in {}", secs(started.elapsed()));
    let client = plane.client().await?;
    install_crds(&client).await?;
    install_template_crd(&client).await?;
    create_namespace(&client, NAMESPACE).await?;

    // 1. The inputs, and the parent selecting them, before the operator runs.
    let inputs: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let created = write_all(
        &inputs,
        (0..n).map(input).collect(),
        CONCURRENCY,
        Write::Create,
    )
    .await?;
    row(
        "plain client creates the N inputs",
        secs(created),
        format!(
            "({}, {CONCURRENCY} in flight)",
            per_item(created, n, "object")
        ),
    );
    let templates = template_api(&client, NAMESPACE);
    apply_template(&client, NAMESPACE).await?;

    // 2. Convergence. The operator gets its own client (its own connections), as it would in
    // its own process; it starts before the controller exists, so the timing below is the
    // controller's work, not the operator's start-up.
    let mut outputs = OutputCount::start(&client, NAMESPACE);
    let cpu = CpuClock::new(&plane);
    let started = Instant::now();
    let operator = Operator::start(
        plane.config().await?,
        OperatorConfig {
            workers: args.workers,
            full_resync: args.full_resync,
            ..OperatorConfig::default()
        },
        &metascript::kinds::runtime(),
    )
    .await?;
    println!("operator started in {}", secs(started.elapsed()));
    let status = || operator_status(&operator);
    let controllers = common::controllers(&client, "metascript.dev", "MapController");
    let started = Instant::now();
    let converge_cpu = cpu.now();
    let converge_api = ApiserverCounts::scrape(&client).await?;
    controllers
        .patch(
            CONTROLLER,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(map_controller(language)),
        )
        .await?;
    // The time each tenth of the outputs was reached: a per-pair cost that grows with the
    // outputs already there shows as later tenths taking longer than earlier ones.
    let mut tenths = Vec::new();
    for tenth in 1..=10 {
        let target = n * tenth / 10;
        let at = outputs
            .until("outputs", timeout, |c| c >= target, &status)
            .await?;
        tenths.push(at - started);
    }
    let all_outputs = tenths[9];
    let all_outputs_cpu = cpu.since(&converge_cpu);
    let controller = ControllerId::new(metascript::kinds::map::KIND, CONTROLLER);
    let check_seconds = operator.metrics().output_check_seconds_of(&controller);
    let operator_cpu = cpu.operator_since(&converge_cpu);
    let checked = match operator_cpu > 0.0 {
        true => format!(
            "output schema checks {check_seconds:.3} s, {:.1}% of the operator's CPU",
            100.0 * check_seconds / operator_cpu
        ),
        false => format!("output schema checks {check_seconds:.3} s"),
    };
    let all_outputs_api = ApiserverCounts::scrape(&client).await?.since(&converge_api);
    let status_done = parent_counts(&templates, n, n, timeout).await? - started;
    let settled = settle(&operator, Duration::from_secs(4), timeout).await?;
    let (syncs, writes) = (operator.syncs(), operator.writes());
    row(
        "MapController applied → all N outputs exist",
        secs(all_outputs),
        format!(
            "({}; {all_outputs_cpu}; {checked}; {all_outputs_api})",
            per_item(all_outputs, n, "object")
        ),
    );
    row(
        "MapController applied → parent status counts N",
        secs(status_done),
        String::new(),
    );
    row(
        "MapController applied → operator idle",
        secs(settled - started),
        format!("({syncs} map calls, {writes} writes)"),
    );
    let mut previous = Duration::ZERO;
    let per_tenth: Vec<String> = tenths
        .iter()
        .map(|at| {
            let took = *at - previous;
            previous = *at;
            format!("{:.1}", took.as_secs_f64())
        })
        .collect();
    row(
        "seconds per tenth of the outputs",
        per_tenth.join(" / "),
        String::new(),
    );

    // 3. A resync of the converged cluster must write nothing. The operator's CPU time is
    // counted until the work is done and a 2 s quiet wait after it, whose idle cost (watches,
    // the status loop) is measured first on its own.
    let quiet = Duration::from_secs(2);
    let idle = idle_cpu(&cpu, quiet).await;
    let skipped_before = operator.metrics().resync_skipped_of(&controller);
    let (syncs_before, writes_before) = (operator.syncs(), operator.writes());
    let cpu_before = cpu.now();
    let started = Instant::now();
    operator.resync_all();
    let drained = settle(&operator, quiet, timeout).await?;
    let resync_cpu = cpu.operator_since(&cpu_before);
    let resync_writes = operator.writes() - writes_before;
    row(
        "resync of the converged cluster",
        format!("{resync_writes} writes"),
        format!(
            "({} map calls, {} pairs skipped, work done in {}; operator CPU {resync_cpu:.2} s incl. the 2 s quiet wait, which alone costs {idle:.2} s idle; {})",
            operator.syncs() - syncs_before,
            operator.metrics().resync_skipped_of(&controller) - skipped_before,
            secs(drained - started),
            cpu.since(&cpu_before)
        ),
    );

    // 4. Inputs leaving: deleted, and relabelled out of the selector.
    let started = Instant::now();
    inputs.delete(&input_name(0), &Default::default()).await?;
    let gone = outputs
        .until("outputs after a deletion", timeout, |c| c < n, &status)
        .await?;
    row(
        "input deleted → its output deleted",
        secs(gone - started),
        String::new(),
    );
    let started = Instant::now();
    inputs
        .patch(
            &input_name(1),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {INPUT_LABEL.0: "elsewhere"}}})),
        )
        .await?;
    let detached = outputs
        .until("outputs after a relabel", timeout, |c| c < n - 1, &status)
        .await?;
    let remaining = outputs_api(&client, NAMESPACE);
    for i in [0, 1] {
        let name = format!("{}-rendered", input_name(i));
        anyhow::ensure!(
            remaining.get_opt(&name).await?.is_none(),
            "{name} should be gone"
        );
    }
    row(
        "input relabelled out of the selector → its output deleted",
        secs(detached - started),
        String::new(),
    );
    let recounted = parent_counts(&templates, n - 2, n - 2, timeout).await? - started;
    row(
        "… → parent status counts N-2",
        secs(recounted),
        String::new(),
    );

    let operator_memory = memory("self");
    let plane_memory: Vec<(&str, Option<(f64, f64)>)> = plane
        .pids()
        .into_iter()
        .map(|(name, pid)| (name, memory(&pid.to_string())))
        .collect();
    // Stopped before the comparison: its cluster-wide ConfigMap watch would otherwise cache
    // (and route) the comparison's objects too.
    drop(outputs);
    operator.shutdown().await;

    // 5. The plain client writing output-shaped ConfigMaps, for comparison.
    if !args.skip_plain {
        for (namespace, in_flight, how, watched, what) in [
            (
                "plain-seq",
                1,
                Write::Create,
                false,
                "plain client creates N outputs, sequentially",
            ),
            (
                "plain-par",
                args.workers,
                Write::Create,
                false,
                "plain client creates N outputs, as many in flight as the operator's workers",
            ),
            (
                "plain-ssa",
                args.workers,
                Write::Apply,
                false,
                "plain client applies N outputs (SSA), as many in flight as the operator's workers",
            ),
            (
                "plain-ssa-cached",
                args.workers,
                Write::Apply,
                true,
                "… the same while it caches their content from a watch (as the operator must: its inputs are ConfigMaps)",
            ),
        ] {
            create_namespace(&client, namespace).await?;
            let cache = watched.then(|| ContentCache::start(&client, namespace));
            // The parent the outputs name as their controller (no MapController selects it now).
            let parent = apply_template(&client, namespace).await?;
            let owner = metascript::object::owner_reference(&parent);
            let objects = (0..n).map(|i| output_like(namespace, i, &owner)).collect();
            // Timed like the operator: until a metadata watch sees every object (the watch
            // and its events cost the API server here as they do while the operator runs).
            let mut written = OutputCount::start(&client, namespace);
            let before = cpu.now();
            let api_before = ApiserverCounts::scrape(&client).await?;
            let started = Instant::now();
            write_all(&outputs_api(&client, namespace), objects, in_flight, how).await?;
            let took = written
                .until(what, timeout, |c| c >= n, &String::new)
                .await?
                - started;
            row(
                what,
                secs(took),
                format!(
                    "({}; {}; {})",
                    per_item(took, n, "object"),
                    cpu.since(&before),
                    ApiserverCounts::scrape(&client).await?.since(&api_before)
                ),
            );
            if matches!(how, Write::Apply) {
                row(
                    if watched {
                        "operator converge / plain SSA with a cache of the outputs"
                    } else {
                        "operator converge / plain SSA at the same concurrency"
                    },
                    format!("{:.2}x", all_outputs.as_secs_f64() / took.as_secs_f64()),
                    String::new(),
                );
            }
            drop(cache);
        }
    }

    println!();
    println!(
        "| {n} inputs, {language}, {} workers | value | note |",
        args.workers
    );
    println!("|---|---|---|");
    for (what, value, note) in &rows {
        println!("| {what} | {value} | {note} |");
    }
    if let Some((peak, _)) = operator_memory {
        println!(
            "| operator process peak RSS (VmHWM; includes the bench's watch) | {peak:.0} MiB | |"
        );
    }
    for (name, memory) in plane_memory {
        if let Some((peak, now)) = memory {
            println!(
                "| {name} RSS (peak / at end of phase 4) | {peak:.0} / {now:.0} MiB | separate process |"
            );
        }
    }
    anyhow::ensure!(
        resync_writes == 0,
        "a resync of the converged cluster made {resync_writes} write requests; expected none"
    );
    Ok(())
}

fn outputs_api(client: &kube::Client, namespace: &str) -> Api<ConfigMap> {
    Api::namespaced(client.clone(), namespace)
}
