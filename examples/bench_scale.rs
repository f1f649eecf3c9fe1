//! What the operator holds at cluster scale: N realistic Pods (100,000 by default, created
//! through the API server; no kubelet runs them) on a fresh local control plane, and
//! `metascript run` processes, one per phase, so each phase's memory is its own:
//!
//! 1. **idle**: no controller;
//! 2. **10 selected**: a DecoratorController whose rule selects the 10 Pods labelled
//!    `special: "yes"`, until it has labelled them; then the same with a finalize hook, which
//!    caches every Pod (it must see Pods that stop matching): the yardstick, as every
//!    controller cached before caches followed selectors;
//! 3. **every Pod**: one whose rule selects every Pod, until it has labelled them all, then a
//!    **full resync** (`metascript.dev/sync-requested-at`), until every Pod was synced again;
//! 4. **sharded**: the same controller over 1, 2 and 4 replicas with `--shards auto`, until
//!    they have synced every Pod (already labelled: no writes).
//!
//! With `--metacontroller BIN --metacontroller-crds FILE` (a Metacontroller binary built from its
//! source and the CRD manifest of that source tree), phases 1 and 2 also run on Metacontroller,
//! its DecoratorController's sync answered by a webhook served from this process (its CPU is
//! not Metacontroller's), labelling the 10 Pods `metacontroller: yes`.
//!
//! Each phase reports time, operator CPU, resident and peak memory, and the Pods the operator
//! caches (`metascript_cached_objects`); the head line gives the Pods' average JSON size as the
//! operator keeps them (without managedFields), and each phase the memory per cached Pod over
//! the idle figure against it.
//!
//! ```sh
//! hack/control-plane/build.sh             # once; cached afterwards
//! cargo build --release --bin metascript   # the operator processes run this binary
//! cargo run --release --example bench_scale -- --pods 100000
//! # --replicas 1,2,4 (the sharded phase; empty to skip), --workers N (default 16),
//! # --bin PATH (default target/release/metascript), --metacontroller BIN
//! # --metacontroller-crds FILE (its manifests/production/metacontroller-crds-v1.yaml)
//! ```

#[allow(dead_code)]
mod common;

use common::metacontroller::{self, Metacontroller};
use common::process::{OperatorProcess, existing_bin, release_bin, replica_counts, until};
use common::{Counter, create_namespace, delete_and_wait, init_tracing, secs};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams};
use metascript::testing::{ControlPlane, HookServer, Reply, install_crds, install_these_crds};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "scale";
/// Upper bound for one phase at 100,000 Pods on a loaded 2-core machine.
const PHASE: Duration = Duration::from_secs(1800);

struct Args {
    pods: usize,
    replicas: Vec<usize>,
    workers: usize,
    bin: PathBuf,
    /// Metacontroller's binary and CRDs, to run phases 1 and 2 on it too.
    metacontroller: Option<Metacontroller>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        pods: 100_000,
        replicas: vec![1, 2, 4],
        workers: 16,
        bin: release_bin(),
        metacontroller: None,
    };
    let (mut metacontroller, mut metacontroller_crds) = (None, None);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--pods" => args.pods = value("--pods")?.parse()?,
            "--replicas" => args.replicas = replica_counts(&value("--replicas")?)?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--bin" => args.bin = value("--bin")?.into(),
            "--metacontroller" => metacontroller = Some(value("--metacontroller")?.into()),
            "--metacontroller-crds" => {
                metacontroller_crds = Some(value("--metacontroller-crds")?.into())
            }
            "-h" | "--help" => {
                println!(
                    "usage: bench_scale [--pods N] [--replicas 1,2,4] [--workers N] [--bin PATH] \
                     [--metacontroller BIN --metacontroller-crds FILE]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (see --help)"),
        }
    }
    anyhow::ensure!(args.pods >= 10, "--pods must be at least 10");
    args.bin = existing_bin(args.bin)?;
    args.metacontroller = Metacontroller::from_args(metacontroller, metacontroller_crds)?;
    Ok(args)
}

/// A Pod as a Deployment's would be (two containers, probes, resources, volumes), about 1.5 KB
/// of JSON once the API server has defaulted it; the first 10 are `special`.
fn pod(index: usize) -> Value {
    let app = format!("app-{}", index % 50);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{index:06}"),
            "namespace": NAMESPACE,
            "labels": {
                "app": app, "bench": "yes", "pod-template-hash": "5d8f7c9b6",
                "special": if index < 10 { "yes" } else { "no" }
            },
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
        },
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [
                {
                    "name": "server",
                    "image": "registry.example.com/team/server:1.27.3",
                    "args": ["--listen=:8080", "--metrics=:9090"],
                    "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 9090}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/server"}]
                },
                {
                    "name": "proxy",
                    "image": "registry.example.com/platform/proxy:2.4.1",
                    "ports": [{"name": "proxy", "containerPort": 15001}],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": format!("{app}-config")}}]
        }
    })
}

/// A DecoratorController of the processes in `group`, labelling the Pods `selects` matches.
fn decorator(name: &str, group: &str, selects: Value, requested: &str) -> Value {
    let sync = json!({"script": {"language": "rhai", "inline": r#"#{ labels: #{ "decorated": "yes" }, finalized: true }"#}});
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {
            "name": name, "labels": {"bench-group": group},
            "annotations": {metascript::api::SYNC_REQUESTED_ANNOTATION: requested}
        },
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "pods", "labelSelector": {"matchLabels": selects}}],
            "hooks": {"sync": sync}
        }
    })
}

/// Counts the Pods labelled `key: yes`.
fn labelled(client: &kube::Client, key: &'static str) -> Counter {
    let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), NAMESPACE);
    Counter::start(api, move |pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .is_some_and(|value| value == "yes")
    })
}

/// The Pods' average JSON size as the operator keeps them (without managedFields), in bytes.
async fn average_json_size(pods: &Api<Pod>) -> anyhow::Result<f64> {
    let (mut bytes, mut count) = (0usize, 0usize);
    let mut params = ListParams::default().limit(500);
    loop {
        let page = pods.list(&params).await?;
        for mut pod in page.items {
            pod.metadata.managed_fields = None;
            bytes += serde_json::to_vec(&pod)?.len();
            count += 1;
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    Ok(bytes as f64 / count.max(1) as f64)
}

/// What each phase's row is measured against: the idle operator's RSS and the Pods' JSON size.
struct Baseline {
    idle_rss: f64,
    json_size: f64,
}

impl Baseline {
    /// Prints a phase's row: `cpu` is what the process spent in it.
    fn print(&self, phase: &str, took: Option<Duration>, cpu: f64, process: &OperatorProcess) {
        let cached = process
            .metric(r#"metascript_cached_objects{resource="Pod.v1"}"#)
            .unwrap_or(f64::NAN);
        self.print_cached(phase, took, cpu, process, cached);
    }

    /// Prints a phase's row for a process that caches `cached` Pods.
    fn print_cached(
        &self,
        phase: &str,
        took: Option<Duration>,
        cpu: f64,
        process: &OperatorProcess,
        cached: f64,
    ) {
        let (rss, peak) = process.memory();
        let per_pod = if cached >= 1.0 {
            let bytes = (rss - self.idle_rss) * 1024.0 * 1024.0 / cached;
            format!("{:.1} KiB ({:.1}x)", bytes / 1024.0, bytes / self.json_size)
        } else {
            "-".into()
        };
        println!(
            "| {phase} | {} | {cpu:.2} | {rss:.0} | {peak:.0} | {cached:.0} | {per_pod} |",
            took.map_or("-".into(), secs),
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = parse_args()?;
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    install_crds(&client).await?;
    create_namespace(&client, NAMESPACE).await?;
    // The plane runs without the ServiceAccount admission plugin: Pods need no account.

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let created = Instant::now();
    let mut made = 0;
    let mut creating = futures::stream::iter(0..args.pods)
        .map(|index| {
            let pods = &pods;
            async move {
                let pod: Pod = serde_json::from_value(pod(index))?;
                pods.create(&PostParams::default(), &pod).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32);
    while let Some(result) = creating.next().await {
        result?;
        made += 1;
        if made % 20_000 == 0 {
            eprintln!("{made} Pods created in {}", secs(created.elapsed()));
        }
    }
    drop(creating);
    let json_size = average_json_size(&pods).await?;
    println!(
        "{} Pods of {json_size:.0} bytes of JSON on average (without managedFields), created in {}; \
         {} workers; load average {}",
        args.pods,
        secs(created.elapsed()),
        args.workers,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "| phase | time | operator CPU s | RSS MiB | peak MiB | Pods cached | per cached Pod over idle (x JSON) |"
    );
    println!("|---|---|---|---|---|---|---|");

    let controllers = common::controllers(&client, "metascript.dev", "DecoratorController");
    let apply = PatchParams::apply("bench").force();
    let start = |group: &str, extra: &[&str]| {
        let mut flags: Vec<String> = [
            "--controller-selector",
            &format!("bench-group={group}"),
            "--workers",
            &args.workers.to_string(),
            "--status-interval",
            "1",
            "--log",
            "warn",
        ]
        .map(str::to_string)
        .to_vec();
        flags.extend(extra.iter().map(|flag| flag.to_string()));
        OperatorProcess::start(&args.bin, &plane, &flags)
    };
    let ready = |process: &OperatorProcess| process.metric("metascript_leader") == Some(1.0);

    // 1. Idle.
    let idle = start("idle", &[])?;
    until("the idle operator to be ready", PHASE, || ready(&idle)).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baseline = Baseline {
        idle_rss: idle.memory().0,
        json_size,
    };
    baseline.print("idle", None, idle.cpu(), &idle);
    idle.stop()?;

    // 2. A decorator of 10 Pods.
    let name = "ten";
    let process = start("ten", &[])?;
    until("the operator to be ready", PHASE, || ready(&process)).await?;
    let mut counter = labelled(&client, "decorated");
    let (cpu, started) = (process.cpu(), Instant::now());
    controllers
        .patch(
            name,
            &apply,
            &Patch::Apply(decorator(name, "ten", json!({"special": "yes"}), "never")),
        )
        .await?;
    counter.reached(10, "10 Pods decorated").await?;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    baseline.print(
        "a decorator selecting 10 Pods",
        Some(took),
        process.cpu() - cpu,
        &process,
    );
    process.stop()?;
    controllers.delete(name, &Default::default()).await?;

    // The same with a finalize hook: it must see Pods that stop matching, so it caches every
    // Pod, as every controller did before caches followed selectors (the yardstick).
    let name = "ten-finalizing";
    let process = start(name, &[])?;
    until("the operator to be ready", PHASE, || ready(&process)).await?;
    let mut finalizing = decorator(name, name, json!({"special": "yes"}), "never");
    finalizing["spec"]["hooks"]["finalize"] = finalizing["spec"]["hooks"]["sync"].clone();
    let (cpu, started) = (process.cpu(), Instant::now());
    controllers
        .patch(name, &apply, &Patch::Apply(finalizing))
        .await?;
    until("its list", PHASE, || {
        process
            .metric(r#"metascript_cached_objects{resource="Pod.v1"}"#)
            .is_some_and(|cached| cached >= args.pods as f64)
    })
    .await?;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    baseline.print(
        "the same with a finalize hook (every Pod cached)",
        Some(took),
        process.cpu() - cpu,
        &process,
    );
    // Deleting it releases its finalizer from the 10 Pods.
    delete_and_wait(&controllers, name).await?;
    process.stop()?;

    if let Some(metacontroller) = &args.metacontroller {
        beside_metacontroller(&client, &plane, metacontroller, &args, json_size).await?;
    }

    // 3. A decorator of every Pod, then a full resync.
    let name = "every";
    let process = start("every", &[])?;
    until("the operator to be ready", PHASE, || ready(&process)).await?;
    let (cpu, started) = (process.cpu(), Instant::now());
    controllers
        .patch(
            name,
            &apply,
            &Patch::Apply(decorator(name, "every", json!({"bench": "yes"}), "never")),
        )
        .await?;
    counter.reached(args.pods, "every Pod decorated").await?;
    let took = started.elapsed();
    baseline.print(
        "a decorator on every Pod: converge",
        Some(took),
        process.cpu() - cpu,
        &process,
    );
    let synced = process.controller_metric("syncs_total", name);
    let (cpu, started) = (process.cpu(), Instant::now());
    controllers
        .patch(
            name,
            &apply,
            &Patch::Apply(decorator(name, "every", json!({"bench": "yes"}), "now")),
        )
        .await?;
    until("every Pod synced again", PHASE, || {
        process.controller_metric("syncs_total", name) >= synced + args.pods as f64
    })
    .await?;
    baseline.print(
        "full resync",
        Some(started.elapsed()),
        process.cpu() - cpu,
        &process,
    );
    process.stop()?;
    controllers.delete(name, &Default::default()).await?;

    // 4. The same over sharded replicas.
    for &count in &args.replicas {
        let group = format!("sharded-{count}");
        let name = group.as_str();
        let replicas = (0..count)
            .map(|_| {
                start(
                    &group,
                    &[
                        "--shards",
                        "auto",
                        "--shard-namespace",
                        NAMESPACE,
                        "--shard-group",
                        &group,
                    ],
                )
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        until("the replicas to settle", PHASE, || {
            replicas.iter().all(|r| {
                r.metric("metascript_shard_members") == Some(count as f64)
                    && r.metric("metascript_shard_writable") == Some(1.0)
            })
        })
        .await?;
        let cpu: Vec<f64> = replicas.iter().map(OperatorProcess::cpu).collect();
        let started = Instant::now();
        controllers
            .patch(
                name,
                &apply,
                &Patch::Apply(decorator(name, &group, json!({"bench": "yes"}), "never")),
            )
            .await?;
        until("every Pod synced", PHASE, || {
            replicas
                .iter()
                .map(|r| r.controller_metric("syncs_total", name))
                .sum::<f64>()
                >= args.pods as f64
        })
        .await?;
        let took = started.elapsed();
        for (index, replica) in replicas.iter().enumerate() {
            let phase = format!("every Pod, {count} sharded: replica {}", index + 1);
            baseline.print(&phase, Some(took), replica.cpu() - cpu[index], replica);
        }
        for replica in replicas {
            replica.stop()?;
        }
        controllers.delete(name, &Default::default()).await?;
    }
    Ok(())
}

/// Phases 1 and 2 on Metacontroller: idle, then a DecoratorController of the 10 special Pods
/// whose webhook labels them `metacontroller: yes`. Its informers cache every Pod whatever the
/// selector, so the rows count every Pod as cached.
async fn beside_metacontroller(
    client: &kube::Client,
    plane: &ControlPlane,
    Metacontroller { bin, crds }: &Metacontroller,
    args: &Args,
    json_size: f64,
) -> anyhow::Result<()> {
    install_these_crds(client, crds.to_vec()).await?;
    let webhook = HookServer::start_unrecorded(|_, _| {
        Reply::json(&json!({"labels": {"metacontroller": "yes"}}))
    })?;

    let idle = OperatorProcess::metacontroller(bin, plane, args.workers)?;
    until("Metacontroller to answer", PHASE, || {
        metacontroller::answers(&idle)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baseline = Baseline {
        idle_rss: idle.memory().0,
        json_size,
    };
    baseline.print_cached("Metacontroller: idle", None, idle.cpu(), &idle, 0.0);
    idle.stop()?;

    let controllers = common::controllers(client, "metacontroller.k8s.io", "DecoratorController");
    let process = OperatorProcess::metacontroller(bin, plane, args.workers)?;
    until("Metacontroller to answer", PHASE, || {
        metacontroller::answers(&process)
    })
    .await?;
    let mut counter = labelled(client, "metacontroller");
    let (cpu, started) = (process.cpu(), Instant::now());
    let name = "ten";
    let decorator = json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{
                "apiVersion": "v1", "resource": "pods",
                "labelSelector": {"matchLabels": {"special": "yes"}}
            }],
            "hooks": {"sync": {"webhook": {"url": webhook.url("/sync")}}}
        }
    });
    controllers
        .patch(
            name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(decorator),
        )
        .await?;
    counter
        .reached(10, "10 Pods labelled by Metacontroller")
        .await?;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    baseline.print_cached(
        "Metacontroller: a decorator selecting 10 Pods",
        Some(took),
        process.cpu() - cpu,
        &process,
        args.pods as f64,
    );
    delete_and_wait(&controllers, name).await?;
    process.stop()?;
    Ok(())
}
