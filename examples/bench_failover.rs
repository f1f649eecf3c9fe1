//! How long a failover takes: two operator replicas in this process elect a leader through a
//! Lease on a fresh local control plane, serving a label-only DecoratorController over N
//! ConfigMaps. Each round takes the leader away and times until a ConfigMap created at that
//! moment is decorated by the standby:
//! - `kill`: the leader vanishes without a word (its tasks stop, its lease is not released, as
//!   with SIGKILL or a lost node), so the standby waits for the lease to expire;
//! - `shutdown`: the leader stops as on SIGTERM and releases its lease.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo run --release --example bench_failover -- --rounds 5 --lease-seconds 15 --targets 100
//! ```

// Shared with the other benchmarks, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::{create_namespace, init_tracing, secs};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use metascript::runtime::{LeaseConfig, Operator, OperatorConfig};
use metascript::testing::{ControlPlane, install_crds};
use serde_json::json;
use std::time::{Duration, Instant};

const NAMESPACE: &str = "failover";
const CONTROLLER: &str = "failover";

struct Args {
    rounds: usize,
    lease: Duration,
    targets: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        rounds: 5,
        lease: Duration::from_secs(15),
        targets: 100,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--rounds" => args.rounds = value("--rounds")?.parse()?,
            "--lease-seconds" => {
                args.lease = Duration::from_secs(value("--lease-seconds")?.parse()?)
            }
            "--targets" => args.targets = value("--targets")?.parse()?,
            "-h" | "--help" => {
                println!("usage: bench_failover [--rounds N] [--lease-seconds S] [--targets N]");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok(args)
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
    let controllers = common::controllers(&client, "metascript.dev", "DecoratorController");
    controllers
        .patch(CONTROLLER, &apply, &Patch::Apply(json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": CONTROLLER},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": "yes"}}}],
                "hooks": {"sync": {"script": {"language": "lua", "inline": "return { labels = { seen = 'yes' } }"}}}
            }
        })))
        .await?;
    let config_map = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"decorate": "yes"}}});
    for i in 0..args.targets {
        let name = format!("cm-{i}");
        config_maps
            .patch(&name, &apply, &Patch::Apply(config_map(&name)))
            .await?;
    }

    let kube = plane.config().await?;
    let mut replica_number = 0;
    let mut start_replica = || {
        replica_number += 1;
        let identity = format!("replica-{replica_number}");
        let config = OperatorConfig {
            leader_election: Some(LeaseConfig {
                namespace: NAMESPACE.into(),
                name: "metascript".into(),
                identity,
                duration: args.lease,
            }),
            ..OperatorConfig::default()
        };
        let kube = kube.clone();
        async move { Operator::start(kube, config, &metascript::kinds::runtime()).await }
    };
    let mut leader = start_replica().await?;
    wait(|| leader.is_leader(), "the first replica to lead").await?;
    let mut standby = start_replica().await?;

    let mut samples: Vec<(&str, Duration)> = Vec::new();
    for round in 0..args.rounds * 2 {
        let how = if round % 2 == 0 { "kill" } else { "shutdown" };
        // Both replicas have synced everything: the standby's caches are warm.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = Instant::now();
        if how == "kill" {
            drop(leader);
        } else {
            leader.shutdown().await;
        }
        let name = format!("new-{round}");
        config_maps
            .patch(&name, &apply, &Patch::Apply(config_map(&name)))
            .await?;
        wait_async(|| async {
            config_maps.get(&name).await.ok().is_some_and(|cm| {
                cm.metadata
                    .labels
                    .unwrap_or_default()
                    .get("seen")
                    .map(String::as_str)
                    == Some("yes")
            })
        })
        .await?;
        let took = started.elapsed();
        println!("round {round}: {how}: decorated after {}", secs(took));
        samples.push((how, took));
        leader = standby;
        standby = start_replica().await?;
    }
    for how in ["kill", "shutdown"] {
        let mut times: Vec<Duration> = samples
            .iter()
            .filter(|(h, _)| *h == how)
            .map(|(_, t)| *t)
            .collect();
        times.sort();
        println!(
            "{how}: median {} over {} rounds (min {}, max {}), lease {}",
            secs(times[times.len() / 2]),
            times.len(),
            secs(times[0]),
            secs(times[times.len() - 1]),
            secs(args.lease)
        );
    }
    leader.shutdown().await;
    standby.shutdown().await;
    Ok(())
}

async fn wait(check: impl Fn() -> bool, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !check() {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn wait_async<F: std::future::Future<Output = bool>>(
    check: impl Fn() -> F,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !check().await {
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out waiting for a decorated ConfigMap"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
