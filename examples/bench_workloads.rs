//! How the operator behaves when the workloads it decorates really run: the service-per-pod
//! example (its own controller manifest and script) over N StatefulSets of R replicas on a
//! cluster plane (every kube-controller-manager controller, kube-scheduler, kwok simulating the
//! Nodes), so the StatefulSets' Pods are created, scheduled, Running and Ready, each Service the
//! operator makes selects a real Pod, and rollouts and scaling churn them. The operator runs in
//! this process.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo run --release --example bench_workloads -- --statefulsets 200 --replicas 5 --nodes 10
//! ```
//!
//! Phases, each timed from the request that starts it until a watch sees the end state:
//! 1. before the operator exists, a plain client creates 2N StatefulSets of R replicas (N
//!    targets and N for the yardstick, which the controller does not select): until all 2NR
//!    Pods are Ready, which is the plane's own work;
//! 2. the yardstick: a plain client makes exactly the writes the operator must make for the
//!    example (R Service applies and one StatefulSet patch per target, 16 targets in flight), to
//!    the yardstick StatefulSets, whose Pods then get their Services as the targets' will;
//! 3. the operator starts and the controller is applied: until every target has its R Services
//!    and its marker label, and until every Service has its own Pod as a ready endpoint (the
//!    EndpointSlice controller's work on top); the convergence is reported as a multiple of 2;
//! 4. steady state: the converged cluster left alone (Node leases renewing, nothing changing)
//!    for `--steady-seconds`: the operator's syncs, writes (must be zero), CPU and memory;
//! 5. churn: a rolling restart of every target (a pod-template annotation, as `kubectl rollout
//!    restart` sets) replaces all NR Pods one by one, each StatefulSet's status changing at
//!    every step: until every StatefulSet has rolled; the Services do not change, so the
//!    operator must write nothing;
//! 6. scale down: every target from R to R-2 replicas (at least 1): until the surplus Services
//!    are gone; then back up to R: until every Service is back with its Pod Ready behind it.
//!
//! `--ignore-status-changes` sets the controller's `ignoreStatusChanges` (the example's hook reads
//! only the StatefulSet's metadata and spec), so the status churn of phases 5 and 6 re-runs no
//! hook; without it every status change of a target is a sync (that writes nothing).
//!
//! The control plane runs as separate processes, so the operator's peak RSS is this process's
//! (which also holds the benchmark's own watches of Pods, Services, EndpointSlices and
//! StatefulSets); the plane's are shown for context.

// Shared with the other benchmarks; this one uses most of it.
#[allow(dead_code)]
mod common;

use common::stateful_sets::create_stateful_sets;
use common::{
    Counter, CpuClock, PHASE_TIMEOUT, create_namespace, idle_cpu, init_tracing, memory, per_item,
    secs, settle,
};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::{Resource as _, ResourceExt as _};
use metascript::runtime::{Operator, OperatorConfig};
use metascript::testing::{ControlPlane, Flavor, install_crds};
use serde_json::{Value, json};

const MARKER: &str = "metascript.dev/service-per-pod";
const DECORATOR_LABEL: &str = "metascript.dev/decorator";
/// The label on a yardstick Service naming its (pretend) controller, so the operator never
/// takes those for its own.
const YARDSTICK_LABEL: &str = "bench.example/decorator";
/// Requests the plain client keeps in flight.
const CONCURRENCY: usize = common::stateful_sets::CREATE_CONCURRENCY;
const TARGETS: &str = "bench";
const YARDSTICK: &str = "bench-yardstick";

struct Args {
    statefulsets: usize,
    replicas: usize,
    nodes: usize,
    language: String,
    workers: usize,
    steady: Duration,
    ignore_status_changes: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        statefulsets: 200,
        replicas: 5,
        nodes: 10,
        language: "rhai".into(),
        workers: 16,
        steady: Duration::from_secs(30),
        ignore_status_changes: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--statefulsets" => args.statefulsets = value("--statefulsets")?.parse()?,
            "--replicas" => args.replicas = value("--replicas")?.parse()?,
            "--nodes" => args.nodes = value("--nodes")?.parse()?,
            "--language" => args.language = value("--language")?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--steady-seconds" => {
                args.steady = Duration::from_secs(value("--steady-seconds")?.parse()?)
            }
            "--ignore-status-changes" => args.ignore_status_changes = true,
            "-h" | "--help" => {
                println!(
                    "usage: bench_workloads [--statefulsets N] [--replicas R] [--nodes N] [--language rhai|lua] [--workers N] [--steady-seconds S] [--ignore-status-changes]"
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
    anyhow::ensure!(args.statefulsets > 0, "--statefulsets must be at least 1");
    anyhow::ensure!(args.replicas > 0, "--replicas must be at least 1");
    anyhow::ensure!(args.nodes > 0, "--nodes must be at least 1");
    Ok(args)
}

/// The example's controller manifest and its script, as shipped.
struct Example {
    controller: Value,
    name: String,
    /// Where the manifest's configMapRef points: namespace, name, key.
    config_map: (String, String, String),
    script: &'static str,
}

impl Example {
    fn load(language: &str) -> anyhow::Result<Example> {
        let (yaml, script) = match language {
            "rhai" => (
                include_str!("../scripts/service-per-pod/controller.rhai.yaml"),
                include_str!("../scripts/service-per-pod/sync.rhai"),
            ),
            _ => (
                include_str!("../scripts/service-per-pod/controller.lua.yaml"),
                include_str!("../scripts/service-per-pod/sync.lua"),
            ),
        };
        let controller: Value = serde_saphyr::from_str(yaml)?;
        let name = controller["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("the example controller has no name"))?
            .to_string();
        let reference = &controller["spec"]["hooks"]["sync"]["script"]["configMapRef"];
        let field = |key: &str| {
            reference[key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("the example's sync hook has no configMapRef.{key}"))
        };
        let config_map = (field("namespace")?, field("name")?, field("key")?);
        Ok(Example {
            controller,
            name,
            config_map,
            script,
        })
    }

    fn config_map(&self) -> ConfigMap {
        let (namespace, name, key) = &self.config_map;
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {key: self.script}
        }))
        .expect("a valid ConfigMap")
    }
}

/// Merge-patches every StatefulSet `sts-<i>` of the namespace with `patch`.
async fn patch_stateful_sets(
    client: &kube::Client,
    namespace: &str,
    n: usize,
    patch: &Value,
) -> anyhow::Result<()> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                api.patch(
                    &format!("sts-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(patch),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// The yardstick: a plain client making exactly the writes the operator must make for the
/// example, per StatefulSet R Services applied (owned by it, each selecting its Pod) and one
/// patch setting the marker label and the finalizer, {CONCURRENCY} StatefulSets in flight.
async fn minimal_writes(
    client: &kube::Client,
    n: usize,
    replicas: usize,
    controller: &str,
) -> anyhow::Result<Duration> {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), YARDSTICK);
    let services: Api<Service> = Api::namespaced(client.clone(), YARDSTICK);
    let owners: Vec<(String, String)> = statefulsets
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|s| (s.name_any(), s.uid().unwrap_or_default()))
        .collect();
    anyhow::ensure!(
        owners.len() == n,
        "expected {n} yardstick StatefulSets, found {}",
        owners.len()
    );
    let manager = PatchParams::apply("yardstick").force();
    let started = Instant::now();
    futures::stream::iter(owners)
        .map(|(name, uid)| {
            let (statefulsets, services, manager) = (statefulsets.clone(), services.clone(), manager.clone());
            async move {
                for i in 0..replicas {
                    let pod = format!("{name}-{i}");
                    let service = json!({
                        "apiVersion": "v1", "kind": "Service",
                        "metadata": {
                            "name": pod, "namespace": YARDSTICK,
                            "labels": {YARDSTICK_LABEL: controller},
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                        },
                        "spec": {"selector": {"statefulset.kubernetes.io/pod-name": pod}, "ports": [{"name": "port-80", "port": 80, "targetPort": 8080}]}
                    });
                    services.patch(&pod, &manager, &Patch::Apply(&service)).await?;
                }
                let target = json!({"metadata": {"labels": {MARKER: "true"}, "finalizers": [format!("bench.example/decorator-{controller}")]}});
                statefulsets
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&target))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(started.elapsed())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Counts the Ready Pods of a namespace.
fn ready_pods(client: &kube::Client, namespace: &str) -> Counter {
    Counter::start(Api::<Pod>::namespaced(client.clone(), namespace), pod_ready)
}

/// Counts the Services of a namespace carrying `label: value`.
fn services(client: &kube::Client, namespace: &str, label: &'static str, value: &str) -> Counter {
    let value = value.to_string();
    Counter::start(
        Api::<PartialObjectMeta<Service>>::namespaced(client.clone(), namespace),
        move |s| s.labels().get(label) == Some(&value),
    )
}

/// Counts the EndpointSlices of a namespace whose Service has its own Pod (the one named like
/// the Service) as a ready endpoint: a Pod that got its Service, end to end.
fn served_pods(client: &kube::Client, namespace: &str) -> Counter {
    Counter::start(
        Api::<EndpointSlice>::namespaced(client.clone(), namespace),
        |slice: &EndpointSlice| {
            let Some(service) = slice.labels().get("kubernetes.io/service-name") else {
                return false;
            };
            slice.endpoints.iter().flatten().any(|e| {
                e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                    && e.target_ref.as_ref().and_then(|r| r.name.as_ref()) == Some(service)
            })
        },
    )
}

/// Counts the StatefulSets of a namespace carrying the marker label `true`.
fn marked(client: &kube::Client, namespace: &str) -> Counter {
    Counter::start(
        Api::<PartialObjectMeta<StatefulSet>>::namespaced(client.clone(), namespace),
        |s| s.labels().get(MARKER).map(String::as_str) == Some("true"),
    )
}

/// Counts the StatefulSets of a namespace that have rolled out generation `generation` of
/// `replicas` Pods: observed, every Pod updated and Ready, the update revision current.
fn rolled_out(client: &kube::Client, namespace: &str, generation: i64, replicas: usize) -> Counter {
    let replicas = replicas as i32;
    Counter::start(
        Api::<StatefulSet>::namespaced(client.clone(), namespace),
        move |s: &StatefulSet| {
            let Some(status) = &s.status else {
                return false;
            };
            s.meta().generation == Some(generation)
                && status.observed_generation == Some(generation)
                && status.updated_replicas == Some(replicas)
                && status.ready_replicas == Some(replicas)
                && status.current_revision.is_some()
                && status.current_revision == status.update_revision
        },
    )
}

/// The operator's `metascript_sync_failures_total`, summed over controllers and reasons.
fn sync_failures(operator: &Operator) -> u64 {
    let mut text = String::new();
    if prometheus_client::encoding::text::encode(&mut text, &operator.metrics().registry()).is_err()
    {
        return 0;
    }
    text.lines()
        .filter(|line| line.starts_with("metascript_sync_failures_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn mib(memory: Option<(f64, f64)>) -> String {
    match memory {
        Some((peak, now)) => format!("{now:.0} MiB (peak {peak:.0} MiB)"),
        None => "?".into(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = parse_args()?;
    let (n, r) = (args.statefulsets, args.replicas);
    let pods = n * r;
    let mut example = Example::load(&args.language)?;
    if args.ignore_status_changes {
        example.controller["spec"]["resources"][0]["ignoreStatusChanges"] = json!(true);
    }
    let variant = if args.ignore_status_changes {
        ", ignoreStatusChanges"
    } else {
        ""
    };
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |what: &str, value: String, note: String| {
        println!("  {what}: {value} {note}");
        rows.push((what.to_string(), value, note));
    };

    // Other work on the machine skews every figure; the load average says how much there was.
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench_workloads: {n} StatefulSets x {r} replicas ({pods} Pods), {} Nodes, {}{variant}, {} workers; load average {}",
        args.nodes,
        args.language,
        args.workers,
        load().trim()
    );
    // Awaited on the main thread (not spawned): the plane's processes die with the thread that
    // started them.
    let started = Instant::now();
    let plane = ControlPlane::start_with(Flavor::Cluster { nodes: args.nodes }).await?;
    println!("cluster plane up in {}", secs(started.elapsed()));
    let client = plane.client().await?;
    install_crds(&client).await?;
    for namespace in [TARGETS, YARDSTICK, example.config_map.0.as_str()] {
        create_namespace(&client, namespace).await?;
    }
    Api::<ConfigMap>::namespaced(client.clone(), &example.config_map.0)
        .create(&PostParams::default(), &example.config_map())
        .await?;
    let cpu = CpuClock::new(&plane);

    // 1. The workloads, before the operator exists.
    let mut target_pods = ready_pods(&client, TARGETS);
    let mut yardstick_pods = ready_pods(&client, YARDSTICK);
    let cpu_before = cpu.now();
    let started = Instant::now();
    create_stateful_sets(&client, TARGETS, "sts", n, r, true).await?;
    create_stateful_sets(&client, YARDSTICK, "sts", n, r, false).await?;
    let all_running = target_pods
        .reached(pods, "the targets' Ready Pods")
        .await?
        .max(
            yardstick_pods
                .reached(pods, "the yardstick's Ready Pods")
                .await?,
        );
    let running = all_running - started;
    row(
        "plane: 2N StatefulSets created until all their Pods are Ready",
        secs(running),
        format!(
            "({} Pods, {}; {})",
            2 * pods,
            per_item(running, 2 * pods, "Pod"),
            cpu.since(&cpu_before)
        ),
    );

    // 2. The yardstick, before the operator exists (so neither its watches nor its caches cost
    // the API server anything).
    let mut yardstick_served = served_pods(&client, YARDSTICK);
    let cpu_before = cpu.now();
    let started = Instant::now();
    let yardstick = minimal_writes(&client, n, r, &example.name).await?;
    let yardstick_endpoints = yardstick_served
        .reached(pods, "the yardstick's Pods behind their Services")
        .await?
        - started;
    row(
        "yardstick: plain client makes the minimal writes",
        secs(yardstick),
        format!(
            "({}, {} writes, {CONCURRENCY} StatefulSets in flight; every Pod behind its Service at {}; {})",
            per_item(yardstick, pods, "Service"),
            pods + n,
            secs(yardstick_endpoints),
            cpu.since(&cpu_before)
        ),
    );
    drop(yardstick_served);

    // 3. Convergence from scratch. The operator gets its own client (its own connections), as
    // it would in its own process.
    let mut target_services = services(&client, TARGETS, DECORATOR_LABEL, &example.name);
    let mut target_marked = marked(&client, TARGETS);
    let mut served = served_pods(&client, TARGETS);
    let operator_config = plane.config().await?;
    let cpu_before = cpu.now();
    let started = Instant::now();
    let operator = Operator::start(
        operator_config,
        OperatorConfig {
            workers: args.workers,
            ..OperatorConfig::default()
        },
        &metascript::kinds::runtime(),
    )
    .await?;
    common::controllers(&client, "metascript.dev", "DecoratorController")
        .patch(
            &example.name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&example.controller),
        )
        .await?;
    let all_services = target_services.reached(pods, "the Services").await?;
    let all_marked = target_marked.reached(n, "the marker labels").await?;
    let converged = all_services.max(all_marked) - started;
    let writes_to_converge = operator.writes();
    let all_served = served
        .reached(pods, "the Pods behind their Services")
        .await?
        - started;
    row(
        "converge (operator start to all Services + labels)",
        secs(converged),
        format!(
            "({}; {writes_to_converge} writes; every Pod behind its Service at {}; operator CPU {:.2} s; {})",
            per_item(converged, pods, "Service"),
            secs(all_served),
            cpu.operator_since(&cpu_before),
            cpu.since(&cpu_before)
        ),
    );
    row(
        "converge / yardstick",
        format!("{:.2}x", converged.as_secs_f64() / yardstick.as_secs_f64()),
        String::new(),
    );
    let converged_memory = memory("self");

    // 4. Steady state. Status writes come every status interval, so wait two of them first.
    let quiet = OperatorConfig::default().status_interval * 2;
    settle(&operator, quiet, PHASE_TIMEOUT).await?;
    let (writes_before, syncs_before) = (operator.writes(), operator.syncs());
    let cpu_before = cpu.now();
    let idle = idle_cpu(&cpu, args.steady).await;
    let steady_writes = operator.writes() - writes_before;
    row(
        &format!("steady state, {} s", args.steady.as_secs()),
        format!("{steady_writes} writes"),
        format!(
            "({} syncs; operator CPU {idle:.2} s, {:.1} ms/s; operator RSS {}; {})",
            operator.syncs() - syncs_before,
            idle * 1000.0 / args.steady.as_secs_f64(),
            mib(memory("self")),
            cpu.since(&cpu_before)
        ),
    );

    // 5. Churn: a rolling restart of every target.
    let mut rolled = rolled_out(&client, TARGETS, 2, r);
    let (writes_before, syncs_before) = (operator.writes(), operator.syncs());
    let cpu_before = cpu.now();
    let started = Instant::now();
    let restart = json!({"spec": {"template": {"metadata": {"annotations": {"bench.metascript.dev/restartedAt": "1"}}}}});
    patch_stateful_sets(&client, TARGETS, n, &restart).await?;
    let all_rolled = rolled.reached(n, "the rolled-out StatefulSets").await? - started;
    settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
    let churn_writes = operator.writes() - writes_before;
    row(
        "rolling restart of every target (all Pods replaced)",
        secs(all_rolled),
        format!(
            "({pods} Pods replaced; {} syncs, {churn_writes} writes; operator CPU {:.2} s incl. 1 s quiet; {})",
            operator.syncs() - syncs_before,
            cpu.operator_since(&cpu_before),
            cpu.since(&cpu_before)
        ),
    );
    drop(rolled);

    // 6. Scale down, then back up.
    let fewer = r.saturating_sub(2).max(1);
    let surplus = n * (r - fewer);
    let (writes_before, syncs_before) = (operator.writes(), operator.syncs());
    let cpu_before = cpu.now();
    let started = Instant::now();
    patch_stateful_sets(&client, TARGETS, n, &json!({"spec": {"replicas": fewer}})).await?;
    let services_gone = target_services
        .fell_to(n * fewer, "the Services after scaling down")
        .await?
        - started;
    let pods_gone = target_pods
        .fell_to(n * fewer, "the Ready Pods after scaling down")
        .await?
        - started;
    settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
    row(
        &format!("scale every target {r} -> {fewer}: surplus Services deleted"),
        secs(services_gone),
        format!(
            "({surplus} Services; surplus Pods gone at {}; {} syncs, {} writes; operator CPU {:.2} s incl. 1 s quiet; {})",
            secs(pods_gone),
            operator.syncs() - syncs_before,
            operator.writes() - writes_before,
            cpu.operator_since(&cpu_before),
            cpu.since(&cpu_before)
        ),
    );
    let (writes_before, syncs_before) = (operator.writes(), operator.syncs());
    let cpu_before = cpu.now();
    let started = Instant::now();
    patch_stateful_sets(&client, TARGETS, n, &json!({"spec": {"replicas": r}})).await?;
    let services_back = target_services
        .reached(pods, "the Services after scaling up")
        .await?
        - started;
    let served_back = served
        .reached(pods, "the Pods behind their Services after scaling up")
        .await?
        - started;
    settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
    row(
        &format!("scale every target {fewer} -> {r}: new Services"),
        secs(services_back),
        format!(
            "({surplus} Services; every new Pod behind its Service at {}; {} syncs, {} writes; operator CPU {:.2} s incl. 1 s quiet; {})",
            secs(served_back),
            operator.syncs() - syncs_before,
            operator.writes() - writes_before,
            cpu.operator_since(&cpu_before),
            cpu.since(&cpu_before)
        ),
    );

    let failures = sync_failures(&operator);
    let operator_memory = memory("self");
    let plane_memory: Vec<(&str, Option<(f64, f64)>)> = plane
        .pids()
        .into_iter()
        .map(|(name, pid)| (name, memory(&pid.to_string())))
        .collect();
    operator.shutdown().await;
    println!("load average at the end: {}", load().trim());

    println!();
    println!(
        "| {n} StatefulSets x {r} replicas, {} Nodes, {}{variant}, {} workers | value | note |",
        args.nodes, args.language, args.workers
    );
    println!("|---|---|---|");
    for (what, value, note) in &rows {
        println!("| {what} | {value} | {note} |");
    }
    println!(
        "| operator process RSS after converging / at the end (includes the bench's watches) | {} / {} | |",
        mib(converged_memory),
        mib(operator_memory)
    );
    for (name, memory) in plane_memory {
        println!(
            "| {name} RSS at the end | {} | separate process |",
            mib(memory)
        );
    }
    anyhow::ensure!(failures == 0, "{failures} syncs failed");
    anyhow::ensure!(
        steady_writes == 0,
        "the converged cluster, left alone, got {steady_writes} writes; expected none"
    );
    anyhow::ensure!(
        churn_writes == 0,
        "a rolling restart, which changes no Service, made {churn_writes} writes; expected none"
    );
    Ok(())
}
