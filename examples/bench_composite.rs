//! How fast the operator runs a CompositeController's rolling update at scale: N parents (a
//! `Fleet`, a minimal StatefulSet look-alike) with K Pods each, on a fresh local control plane,
//! the operator running in this process.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo run --release --example bench_composite -- --parents 500 --pods 3 --language rhai
//! ```
//!
//! Phases, each timed from the request that starts it until a watch sees the end state:
//! 1. the operator starts, the controller is applied and a plain client creates the N parents
//!    (8 in flight): until all N×K Pods exist and every parent reports `Updated: True`;
//! 2. a resync of the converged cluster: it must make zero write requests;
//! 3. the rolling update: a plain client changes every parent's template (8 in flight), and
//!    each parent's Pods are recreated one at a time (`RollingRecreate`) until a watch sees all
//!    N×K Pods at the new template and every parent says `Updated: True` again;
//! 4. for comparison, after the operator has stopped, in the same run: a plain client making
//!    the same writes the operator makes per parent in phase 3 (the new ControllerRevision; per
//!    Pod a delete, a status patch, a server-side apply of the new Pod and a status patch; the
//!    old revision's delete and a last status patch), one parent's sequence per request in
//!    flight, as many in flight as the operator has workers, timed until a watch sees every new
//!    Pod.
//!
//! The plane has no kubelet, so Pods never become Ready: the rollout has no `statusChecks`, and
//! each Pod moves once the one before exists as written (what the operator waits for without
//! checks). CPU seconds are per process, as `/proc` counts them.

#[allow(dead_code)] // each bench uses part of the shared helpers
mod common;

use common::{CpuClock, create_namespace, idle_cpu, init_tracing, memory, per_item, secs, settle};
use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::watcher::{self, watcher};
use metascript::runtime::{Operator, OperatorConfig};
use metascript::testing::{ControlPlane, install_crds};
use serde_json::{Value, json};
use tokio::sync::watch;

const CONTROLLER: &str = "fleet-bench";
const NAMESPACE: &str = "bench";
const GROUP: &str = "bench.metascript.dev";
/// Requests the plain client keeps in flight when it creates or edits parents.
const CONCURRENCY: usize = 8;
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

const FLEET_CRD: &str = r#"{
  "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "fleets.bench.metascript.dev"},
  "spec": {
    "group": "bench.metascript.dev", "scope": "Namespaced",
    "names": {"kind": "Fleet", "plural": "fleets", "singular": "fleet"},
    "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
  }
}"#;

/// K Pods named `<fleet>-<i>` from the template, the status counting the observed ones.
const SYNC_RHAI: &str = r#"
let fleet = request.parent;
let pods = [];
for i in 0..fleet.spec.replicas {
    let pod = fleet.spec.template;
    pod.apiVersion = "v1";
    pod.kind = "Pod";
    pod.metadata.name = `${name(fleet)}-${i}`;
    pods.push(pod);
}
#{ status: #{ pods: request.children["Pod.v1"].len() }, children: pods }
"#;
const SYNC_LUA: &str = r#"
local fleet = request.parent
local pods = array()
for i = 0, fleet.spec.replicas - 1 do
  local pod = json_decode(json_encode(fleet.spec.template))
  pod.apiVersion = "v1"
  pod.kind = "Pod"
  pod.metadata.name = name(fleet) .. "-" .. i
  table.insert(pods, pod)
end
local observed = 0
for _ in pairs(request.children["Pod.v1"]) do observed = observed + 1 end
return { status = { pods = observed }, children = pods }
"#;

struct Args {
    parents: usize,
    pods: usize,
    language: String,
    workers: usize,
    timeout: Duration,
    skip_plain: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        parents: 500,
        pods: 3,
        language: "rhai".into(),
        workers: 16,
        timeout: Duration::from_secs(20 * 60),
        skip_plain: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--parents" => args.parents = value("--parents")?.parse()?,
            "--pods" => args.pods = value("--pods")?.parse()?,
            "--language" => args.language = value("--language")?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--timeout-mins" => {
                args.timeout = Duration::from_secs(60 * value("--timeout-mins")?.parse::<u64>()?)
            }
            "--skip-plain" => args.skip_plain = true,
            "-h" | "--help" => {
                println!(
                    "usage: bench_composite [--parents N] [--pods K] [--language rhai|lua] \
                     [--workers N] [--timeout-mins M] [--skip-plain]"
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
    anyhow::ensure!(args.parents >= 1 && args.pods >= 1, "need parents and pods");
    Ok(args)
}

fn fleet_name(i: usize) -> String {
    format!("fleet-{i:05}")
}

/// The Pod template at `version` (the rollout changes the image and a label).
fn template(i: usize, version: &str) -> Value {
    json!({
        "metadata": {"labels": {"app": fleet_name(i), "version": version}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "app", "image": format!("registry.invalid/app:{version}")}]
        }
    })
}

fn fleet(i: usize, pods: usize, version: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"), "kind": "Fleet",
        "metadata": {"name": fleet_name(i), "namespace": NAMESPACE},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": fleet_name(i)}},
            "template": template(i, version)
        }
    })
}

fn controller(language: &str) -> Value {
    let script = if language == "rhai" {
        SYNC_RHAI
    } else {
        SYNC_LUA
    };
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
        "metadata": {"name": CONTROLLER},
        "spec": {
            "parentResource": {"apiVersion": format!("{GROUP}/v1"), "resource": "fleets",
                               "revisionHistory": {"fieldPaths": ["spec.template"]}},
            "childResources": [{"apiVersion": "v1", "resource": "pods",
                                "updateStrategy": {"method": "RollingRecreate"}}],
            "hooks": {"sync": {"script": {"language": language, "inline": script}}}
        }
    })
}

fn fleets(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", "Fleet"), "fleets");
    Api::namespaced_with(client.clone(), namespace, &resource)
}

async fn install_fleet_crd(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_str(FLEET_CRD)?;
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply("bench").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let established = crds
            .get(&crd.name_any())
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the Fleet CRD never became Established"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Counts, from a metadata watch, the Pods of a namespace with the label `version=<version>`.
struct PodCount {
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl PodCount {
    fn start(client: &kube::Client, namespace: &str, version: &str) -> PodCount {
        let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), namespace);
        let config = watcher::Config::default().labels(&format!("version={version}"));
        let (tx, count) = watch::channel(0);
        let task = tokio::spawn(async move {
            let (mut present, mut init) = (HashSet::new(), HashSet::new());
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
                        tracing::warn!(%error, "benchmark watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                }
                tx.send_replace(present.len());
            }
        });
        PodCount { count, task }
    }

    async fn until(
        &mut self,
        what: &str,
        target: usize,
        timeout: Duration,
        status: &dyn Fn() -> String,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            let waited =
                tokio::time::timeout(PROGRESS_EVERY, self.count.wait_for(|c| *c >= target))
                    .await
                    .map(|seen| seen.is_ok());
            match waited {
                Ok(true) => return Ok(Instant::now()),
                Ok(false) => anyhow::bail!("the watch counting {what} stopped"),
                Err(_) if Instant::now() < deadline => {
                    println!(
                        "    ... {what}: {} of {target}; {}",
                        *self.count.borrow(),
                        status()
                    )
                }
                Err(_) => anyhow::bail!("timed out waiting for {what}"),
            }
        }
    }
}

impl Drop for PodCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls until every parent's `Updated` condition is True and names the latest revision.
async fn all_updated(
    api: &Api<DynamicObject>,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    loop {
        let list = api.list(&Default::default()).await?;
        let updated = list
            .items
            .iter()
            .filter(|fleet| {
                let value = serde_json::to_value(fleet).unwrap_or_default();
                value["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Updated" && c["status"] == "True")
                    && value["status"]["observedGeneration"] == value["metadata"]["generation"]
            })
            .count();
        if updated == n {
            return Ok(Instant::now());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {updated} of {n} parents report Updated"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn edit_all(
    api: &Api<DynamicObject>,
    n: usize,
    pods: usize,
    version: &str,
) -> anyhow::Result<()> {
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let fleet = fleet(i, pods, version);
            async move {
                api.patch(
                    &fleet_name(i),
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(&fleet),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// What the operator does for one parent during the rollout, made by a plain client: the new
/// revision, then per Pod a delete and a status patch (moving it), an apply of the new Pod and
/// a status patch (waiting for it), then the old revision's delete and a last status patch.
async fn plain_rollout(
    client: &kube::Client,
    namespace: &str,
    i: usize,
    pods: usize,
) -> anyhow::Result<()> {
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let parents = fleets(client, namespace);
    let apply = PatchParams::apply("bench").force();
    let revision = |version: &str| -> anyhow::Result<ControllerRevision> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": format!("{}-{version}", fleet_name(i)), "namespace": namespace},
            "data": {"parentPatch": {"spec": {"template": template(i, version)}}},
            "revision": 2
        }))?)
    };
    let new = revision("v2")?;
    revisions
        .patch(&new.name_any(), &apply, &Patch::Apply(&new))
        .await?;
    let condition = |reason: &str, message: String| {
        json!({"status": {"pods": pods, "conditions": [
            {"type": "Updated", "status": "False", "reason": reason, "message": message}
        ]}})
    };
    for p in 0..pods {
        let name = format!("{}-{p}", fleet_name(i));
        pod_api.delete(&name, &Default::default()).await?;
        let moving = condition("RolloutProgressing", format!("updating Pod {name}"));
        parents
            .patch_status(
                &fleet_name(i),
                &PatchParams::default(),
                &Patch::Merge(moving),
            )
            .await?;
        let mut pod = template(i, "v2");
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"]["name"] = json!(name);
        pod["metadata"]["namespace"] = json!(namespace);
        pod_api.patch(&name, &apply, &Patch::Apply(&pod)).await?;
        let waiting = condition("RolloutWaiting", format!("Pod {name} does not exist yet"));
        parents
            .patch_status(
                &fleet_name(i),
                &PatchParams::default(),
                &Patch::Merge(waiting),
            )
            .await?;
    }
    revisions
        .delete(&format!("{}-v1", fleet_name(i)), &Default::default())
        .await?;
    let status = json!({"status": {"conditions": [
        {"type": "Updated", "status": "True", "reason": "OnLatestRevision", "message": "latest"}
    ]}});
    parents
        .patch_status(
            &fleet_name(i),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
    Ok(())
}

/// The starting point of the plain rollout: parents, their v1 Pods and revisions (untimed).
async fn plain_setup(
    client: &kube::Client,
    namespace: &str,
    n: usize,
    pods: usize,
) -> anyhow::Result<()> {
    let parents = fleets(client, namespace);
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(0..n)
        .map(|i| {
            let (parents, pod_api, revisions) =
                (parents.clone(), pod_api.clone(), revisions.clone());
            async move {
                let mut parent = fleet(i, pods, "v1");
                parent["metadata"]["namespace"] = json!(namespace);
                parents
                    .create(&PostParams::default(), &serde_json::from_value(parent)?)
                    .await?;
                let revision: ControllerRevision = serde_json::from_value(json!({
                    "apiVersion": "apps/v1", "kind": "ControllerRevision",
                    "metadata": {"name": format!("{}-v1", fleet_name(i)), "namespace": namespace},
                    "data": {"parentPatch": {"spec": {"template": template(i, "v1")}}},
                    "revision": 1
                }))?;
                revisions.create(&PostParams::default(), &revision).await?;
                for p in 0..pods {
                    let mut pod = template(i, "v1");
                    pod["apiVersion"] = json!("v1");
                    pod["kind"] = json!("Pod");
                    pod["metadata"]["name"] = json!(format!("{}-{p}", fleet_name(i)));
                    pod_api
                        .create(&PostParams::default(), &serde_json::from_value(pod)?)
                        .await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_tracing();
    let args = parse_args()?;
    let (n, k) = (args.parents, args.pods);
    let language = args.language.as_str();
    let timeout = args.timeout;
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |what: &str, value: String, note: String| {
        println!("  {what}: {value} {note}");
        rows.push((what.to_string(), value, note));
    };
    println!(
        "bench_composite: {n} parents × {k} Pods, {language}, {} workers (pid {})",
        args.workers,
        std::process::id()
    );
    let started = Instant::now();
    let plane = ControlPlane::start().await?;
    println!("control plane up in {}", secs(started.elapsed()));
    let client = plane.client().await?;
    install_crds(&client).await?;
    install_fleet_crd(&client).await?;
    create_namespace(&client, NAMESPACE).await?;

    // 1. Convergence: every parent's K Pods.
    let cpu = CpuClock::new(&plane);
    let operator = Operator::start(
        plane.config().await?,
        OperatorConfig {
            workers: args.workers,
            ..OperatorConfig::default()
        },
        &metascript::kinds::runtime(),
    )
    .await?;
    let status = || {
        format!(
            "{} syncs, {} writes, {} queued",
            operator.syncs(),
            operator.writes(),
            operator.queued()
        )
    };
    let controllers = common::controllers(&client, "metascript.dev", "CompositeController");
    controllers
        .patch(
            CONTROLLER,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(controller(language)),
        )
        .await?;
    let parents = fleets(&client, NAMESPACE);
    let mut v1 = PodCount::start(&client, NAMESPACE, "v1");
    let before = cpu.now();
    let (syncs_before, writes_before) = (operator.syncs(), operator.writes());
    let started = Instant::now();
    edit_all(&parents, n, k, "v1").await?;
    let pods_at = v1.until("v1 Pods", n * k, timeout, &status).await? - started;
    let updated_at = all_updated(&parents, n, timeout).await? - started;
    settle(&operator, Duration::from_secs(3), timeout).await?;
    row(
        "N parents created → all N×K Pods exist",
        secs(pods_at),
        format!(
            "({}; {})",
            per_item(pods_at, n * k, "Pod"),
            cpu.since(&before)
        ),
    );
    row(
        "… → every parent Updated, observedGeneration current",
        secs(updated_at),
        format!(
            "({} syncs, {} writes)",
            operator.syncs() - syncs_before,
            operator.writes() - writes_before
        ),
    );

    // 2. A resync of the converged cluster writes nothing. Its CPU includes a 2 s quiet wait,
    // whose idle cost (watches, the status loop) is measured first on its own.
    let idle = idle_cpu(&cpu, Duration::from_secs(2)).await;
    let writes_before = operator.writes();
    let cpu_before = cpu.now();
    let started = Instant::now();
    operator.resync_all();
    let drained = settle(&operator, Duration::from_secs(2), timeout).await?;
    let resync_writes = operator.writes() - writes_before;
    row(
        "resync of the converged cluster",
        format!("{resync_writes} writes"),
        format!(
            "(done in {}; operator CPU {:.2} s incl. a 2 s quiet wait, which alone costs {idle:.2} s)",
            secs(drained - started),
            cpu.operator_since(&cpu_before)
        ),
    );

    // 3. The rolling update of every parent.
    let mut v2 = PodCount::start(&client, NAMESPACE, "v2");
    let before = cpu.now();
    let (syncs_before, writes_before) = (operator.syncs(), operator.writes());
    let started = Instant::now();
    edit_all(&parents, n, k, "v2").await?;
    let rolled = v2.until("v2 Pods", n * k, timeout, &status).await? - started;
    let rollout_cpu = cpu.since(&before);
    let operator_cpu = cpu.operator_since(&before);
    let done = all_updated(&parents, n, timeout).await? - started;
    settle(&operator, Duration::from_secs(3), timeout).await?;
    let (syncs, writes) = (
        operator.syncs() - syncs_before,
        operator.writes() - writes_before,
    );
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), NAMESPACE);
    let left = revisions.list(&Default::default()).await?.items.len();
    anyhow::ensure!(
        left == n,
        "{left} ControllerRevisions left, expected one per parent"
    );
    row(
        "rolling update (RollingRecreate) → all N×K Pods at the new template",
        secs(rolled),
        format!("({}; {rollout_cpu})", per_item(rolled, n * k, "Pod")),
    );
    row(
        "… → every parent Updated again",
        secs(done),
        format!(
            "({syncs} syncs, {writes} writes = {:.1} writes/parent; operator CPU {operator_cpu:.2} s = {:.2} ms/Pod)",
            writes as f64 / n as f64,
            operator_cpu * 1000.0 / (n * k) as f64
        ),
    );
    let operator_memory = memory("self");
    drop((v1, v2));
    operator.shutdown().await;

    // 4. The same writes by a plain client, in the same run.
    if !args.skip_plain {
        let namespace = "plain";
        create_namespace(&client, namespace).await?;
        plain_setup(&client, namespace, n, k).await?;
        let mut new = PodCount::start(&client, namespace, "v2");
        let before = cpu.now();
        let started = Instant::now();
        futures::stream::iter(0..n)
            .map(|i| plain_rollout(&client, namespace, i, k))
            .buffer_unordered(args.workers)
            .try_collect::<Vec<_>>()
            .await?;
        let took = new
            .until("plain v2 Pods", n * k, timeout, &String::new)
            .await?
            - started;
        let plain_writes = n * (4 * k + 3);
        row(
            "plain client, same writes per parent, workers in flight",
            secs(took),
            format!(
                "({plain_writes} writes; {}; {})",
                per_item(took, n * k, "Pod"),
                cpu.since(&before)
            ),
        );
        row(
            "operator rollout / plain client",
            format!("{:.2}x", rolled.as_secs_f64() / took.as_secs_f64()),
            String::new(),
        );
    }

    println!();
    println!(
        "| {n} parents × {k} Pods, {language}, {} workers | value | note |",
        args.workers
    );
    println!("|---|---|---|");
    for (what, value, note) in &rows {
        println!("| {what} | {value} | {note} |");
    }
    if let Some((peak, _)) = operator_memory {
        println!(
            "| operator process peak RSS (VmHWM; includes the bench's watches) | {peak:.0} MiB | |"
        );
    }
    anyhow::ensure!(
        resync_writes == 0,
        "a resync of the converged cluster made {resync_writes} write requests; expected none"
    );
    Ok(())
}
