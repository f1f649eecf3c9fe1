//! How the work spreads over sharded replicas: 1, 2, then 3 `metascript run --shards auto`
//! processes on a fresh local control plane, each group serving a label-only
//! DecoratorController over the same N ConfigMaps (3,000 by default). Processes, not operators
//! in this one, so each replica's CPU and memory are its own.
//!
//! ```sh
//! hack/control-plane/build.sh             # once; cached afterwards
//! cargo build --release --bin metascript   # the replicas run this binary
//! cargo run --release --example bench_sharding -- --targets 3000
//! # --replicas 1,2,3 (one group per count), --lease-seconds S (default 15, as deployed),
//! # --workers N (default 16), --bin PATH (default target/release/metascript)
//! ```
//!
//! For each replica count, timed from the request that starts a phase until a watch sees the
//! end state on the last ConfigMap:
//! 1. **converge**: the controller is applied to replicas already running (every one a member
//!    and writable): until every ConfigMap carries its label;
//! 2. **resync**: a sync of everything is requested (`metascript.dev/sync-requested-at`): until
//!    every target has been synced again, which writes nothing;
//! 3. **script edit**: the script sets another value: until every ConfigMap shows it.
//!
//! Each phase reports per replica: CPU seconds (`/proc/<pid>/stat`), syncs and writes (its
//! `/metrics`), and resident memory after it (`VmRSS`, and the peak `VmHWM`). With the most
//! replicas, two more phases time the rebalancing, until the replicas' `metascript_owned_items`
//! add up to every target again:
//! 4. **join**: one more replica starts (from its start: it loads, waits out the warm-up, and
//!    syncs the share it takes);
//! 5. **kill**: a replica is killed (SIGKILL): the others wait for its lease to run out, then
//!    sync its share.

// Shared with the other benchmarks, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::process::{
    OperatorProcess as Replica, existing_bin, release_bin, replica_counts, until,
};
use common::{Counter, cpu_seconds, create_namespace, init_tracing, secs};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use metascript::testing::{ControlPlane, install_crds};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "sharding";

struct Args {
    targets: usize,
    replicas: Vec<usize>,
    lease_seconds: u64,
    workers: usize,
    bin: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        targets: 3000,
        replicas: vec![1, 2, 3],
        lease_seconds: 15,
        workers: 16,
        bin: release_bin(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--targets" => args.targets = value("--targets")?.parse()?,
            "--replicas" => args.replicas = replica_counts(&value("--replicas")?)?,
            "--lease-seconds" => args.lease_seconds = value("--lease-seconds")?.parse()?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--bin" => args.bin = value("--bin")?.into(),
            "-h" | "--help" => {
                println!(
                    "usage: bench_sharding [--targets N] [--replicas 1,2,3] [--lease-seconds S] \
                     [--workers N] [--bin PATH]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (see --help)"),
        }
    }
    args.bin = existing_bin(args.bin)?;
    Ok(args)
}

/// One `metascript run` process of a group.
fn replica(args: &Args, plane: &ControlPlane, group: &str) -> anyhow::Result<Replica> {
    let flags = [
        "--controller-selector",
        &format!("bench-group={group}"),
        "--shards",
        "auto",
        "--shard-namespace",
        NAMESPACE,
        "--shard-group",
        group,
        "--lease-duration",
        &format!("{}s", args.lease_seconds),
        "--workers",
        &args.workers.to_string(),
        "--status-interval",
        "0.2",
        "--log",
        "warn",
    ];
    Replica::start(&args.bin, plane, &flags.map(str::to_string))
}

/// Every replica of the group sees all of them and may write.
async fn settled(replicas: &[&Replica]) -> anyhow::Result<Instant> {
    until("the replicas to settle", Duration::from_secs(120), || {
        replicas.iter().all(|r| {
            r.metric("metascript_shard_members") == Some(replicas.len() as f64)
                && r.metric("metascript_shard_writable") == Some(1.0)
        })
    })
    .await
}

/// What each replica did during a phase, as one table row per replica, and the plane's CPU.
struct Snapshot {
    cpu: Vec<f64>,
    syncs: Vec<f64>,
    writes: Vec<f64>,
    plane: Vec<(&'static str, f64)>,
}

impl Snapshot {
    fn take(replicas: &[&Replica], controller: &str, plane: &ControlPlane) -> Snapshot {
        Snapshot {
            plane: plane
                .pids()
                .into_iter()
                .filter(|(name, _)| matches!(*name, "kube-apiserver" | "etcd"))
                .map(|(name, pid)| (name, cpu_seconds(&pid.to_string()).unwrap_or(f64::NAN)))
                .collect(),
            cpu: replicas.iter().map(|r| r.cpu()).collect(),
            syncs: replicas
                .iter()
                .map(|r| r.controller_metric("syncs_total", controller))
                .collect(),
            writes: replicas
                .iter()
                .map(|r| r.controller_metric("api_writes_total", controller))
                .collect(),
        }
    }

    fn report(&self, after: &Snapshot, replicas: &[&Replica], phase: &str, took: Duration) {
        for (i, replica) in replicas.iter().enumerate() {
            let (rss, peak) = replica.memory();
            println!(
                "| {} | {phase} | {} | replica {} | {:.2} | {:.0} | {:.0} | {rss:.0} | {peak:.0} |",
                replicas.len(),
                secs(took),
                i + 1,
                after.cpu[i] - self.cpu[i],
                after.syncs[i] - self.syncs[i],
                after.writes[i] - self.writes[i],
            );
        }
        let plane: Vec<String> = self
            .plane
            .iter()
            .zip(&after.plane)
            .map(|((name, before), (_, after))| format!("{name} {:.2}", after - before))
            .collect();
        println!(
            "| {} | {phase}: the plane's CPU s | | {} | | | | | |",
            replicas.len(),
            plane.join(", ")
        );
    }
}

fn decorator(name: &str, group: &str, value: &str, requested: &str) -> serde_json::Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {
            "name": name, "labels": {"bench-group": group},
            "annotations": {metascript::api::SYNC_REQUESTED_ANNOTATION: requested}
        },
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"bench": "yes"}}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": format!("return {{ labels = {{ ['{name}'] = '{value}' }} }}")}}}
        }
    })
}

/// Counts the ConfigMaps whose label `name` is `value`.
fn labelled(client: &kube::Client, name: &str, value: &str) -> Counter {
    let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), NAMESPACE);
    let (name, value) = (name.to_string(), value.to_string());
    Counter::start(api, move |object| {
        object
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(&name))
            .is_some_and(|v| *v == value)
    })
}

/// Until the replicas' owned items add up to `total`, and `extra` holds.
async fn owned_add_up(
    replicas: &[&Replica],
    controller: &str,
    total: usize,
    extra: impl Fn() -> bool,
) -> anyhow::Result<Instant> {
    until(
        "the owned items to add up",
        Duration::from_secs(300),
        || {
            let owned: f64 = replicas
                .iter()
                .map(|r| r.controller_metric("owned_items", controller))
                .sum();
            owned == total as f64 && extra()
        },
    )
    .await
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = parse_args()?;
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    install_crds(&client).await?;
    create_namespace(&client, NAMESPACE).await?;
    let apply = PatchParams::apply("bench").force();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    futures::stream::iter(0..args.targets)
        .map(|i| {
            let (config_maps, apply) = (&config_maps, &apply);
            async move {
                let name = format!("cm-{i}");
                let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"bench": "yes"}}});
                config_maps.patch(&name, apply, &Patch::Apply(object)).await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let controllers = common::controllers(&client, "metascript.dev", "DecoratorController");
    let n = args.targets;
    println!(
        "{n} ConfigMaps, lease {} s, {} workers per replica, load average {}",
        args.lease_seconds,
        args.workers,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("| replicas | phase | time | replica | CPU s | syncs | writes | RSS MiB | peak MiB |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let largest = args.replicas.iter().copied().max().unwrap_or(1);
    for &count in &args.replicas {
        let group = format!("bench-{count}");
        let name = format!("decorated-by-{count}");
        let mut replicas = (0..count)
            .map(|_| replica(&args, &plane, &group))
            .collect::<anyhow::Result<Vec<_>>>()?;
        settled(&replicas.iter().collect::<Vec<_>>()).await?;
        let idle: Vec<String> = replicas
            .iter()
            .map(|r| format!("{:.0}", r.memory().0))
            .collect();
        println!(
            "| {count} | idle, before the controller | | | | | | {} | |",
            idle.join(", ")
        );

        for (phase, value, requested) in [
            ("converge", "v1", "never"),
            ("resync", "v1", "now"),
            ("script edit", "v2", "now"),
        ] {
            let all: Vec<&Replica> = replicas.iter().collect();
            let mut counter = labelled(&client, &name, value);
            let before = Snapshot::take(&all, &name, &plane);
            let started = Instant::now();
            controllers
                .patch(
                    &name,
                    &apply,
                    &Patch::Apply(decorator(&name, &group, value, requested)),
                )
                .await?;
            counter.reached(n, phase).await?;
            // A resync changes no label: it is done once every target was synced again.
            let done = until("every target synced", Duration::from_secs(900), || {
                Snapshot::take(&all, &name, &plane)
                    .syncs
                    .iter()
                    .sum::<f64>()
                    >= before.syncs.iter().sum::<f64>() + n as f64
            })
            .await?;
            before.report(
                &Snapshot::take(&all, &name, &plane),
                &all,
                phase,
                done - started,
            );
        }

        if count == largest {
            let started = Instant::now();
            replicas.push(replica(&args, &plane, &group)?);
            let all: Vec<&Replica> = replicas.iter().collect();
            let newest = all[all.len() - 1];
            let writable = settled(&all).await?;
            let done = owned_add_up(&all, &name, n, || {
                newest.controller_metric("owned_items", &name) > 0.0
            })
            .await?;
            println!(
                "| {} | join: a replica starts, until its share is synced | {} (writable after {}) | | | | | | |",
                all.len(),
                secs(done - started),
                secs(writable - started)
            );

            let mut killed = replicas.remove(0);
            let started = Instant::now();
            killed.child.kill()?;
            killed.child.wait()?;
            let survivors: Vec<&Replica> = replicas.iter().collect();
            let detected = until("the survivors to drop it", Duration::from_secs(300), || {
                survivors
                    .iter()
                    .all(|r| r.metric("metascript_shard_members") == Some(survivors.len() as f64))
            })
            .await?;
            let done = owned_add_up(&survivors, &name, n, || true).await?;
            println!(
                "| {} | kill: SIGKILL, until the survivors synced its share | {} (dropped after {}) | | | | | | |",
                survivors.len(),
                secs(done - started),
                secs(detected - started)
            );
        }
        for replica in replicas {
            // SIGTERM: each leaves the group and deletes its Lease.
            replica.stop()?;
        }
        controllers.delete(&name, &Default::default()).await?;
    }
    Ok(())
}
