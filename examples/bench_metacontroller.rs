//! metascript beside Metacontroller on one workload, on one local control plane, interleaved:
//! the service-per-pod example over N StatefulSets of one replica, converged by metascript with
//! the example's Rhai script, with its Lua script, and by Metacontroller with a webhook doing
//! the same (`metascript::testing::service_per_pod`, the example as a webhook service writes
//! it). Each of the three runs as a process of its own, and so does the webhook, so every CPU
//! second and byte is counted where it was spent.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo build --release --bin metascript --example bench_metacontroller
//! target/release/examples/bench_metacontroller --targets 1000 --rounds 2 \
//!   --metacontroller PATH/TO/metacontroller \
//!   --metacontroller-crds PATH/TO/manifests/production/metacontroller-crds-v1.yaml
//! # --bin PATH (default target/release/metascript), --workers N (metascript's, default its
//! # own 16), --metacontroller-workers N (default 50), --steady-seconds S (default 30),
//! # --systems rhai,lua,metacontroller (what runs, in a round's order; default all given)
//! ```
//!
//! Metacontroller is not part of this repository: build its `metacontroller` command from its
//! source as its own documentation describes (docs/performance.md, "Beside Metacontroller", says
//! which version the published figures used). Without `--metacontroller` only metascript runs.
//!
//! A round runs each system once, in turn; the next round runs them in the opposite order
//! (Rhai, Lua, Metacontroller, then Metacontroller, Lua, Rhai), so a drift in the machine's load
//! weighs on each alike. Each run has a namespace of its own and a fresh process:
//! 1. a plain client creates the N StatefulSets before the system starts (the plane runs no
//!    StatefulSet controller, so no Pods: what follows is the system's work alone);
//! 2. converge: from the controller's creation until every StatefulSet has its Service and
//!    carries the marker label. Reported: the time; the CPU seconds of the system's process, of
//!    the webhook's and of the apiserver; the write requests to StatefulSets and Services
//!    (create, update, patch, delete; the apiserver's own count); the system's CPU per target;
//!    metascript's sync hook calls (its `syncs_total`);
//! 3. steady state: the converged namespace left alone for `--steady-seconds`: the system's CPU
//!    (with its webhook's) over that time, per minute, and its peak RSS over converge and steady state;
//! 4. teardown: the namespace is deleted while the system runs, so every StatefulSet's finalize
//!    hook releases it: until the namespace is gone.
//!
//! Metacontroller runs with `--workers 50 --client-go-qps 150 --client-go-burst 300` (its
//! defaults, 5 workers and client-go's qps 5, would make the comparison one of rate limits);
//! metascript with its defaults.

// Shared with the other benchmarks, which use the rest of it.
#[allow(dead_code)]
mod common;

use common::apiserver::ApiserverCounts;
use common::metacontroller::{self, Metacontroller};
use common::process::{OperatorProcess, existing_bin, release_bin, until};
use common::stateful_sets::create_stateful_sets;
use common::{
    Counter, CpuClock, PHASE_TIMEOUT, cpu_seconds, create_namespace, delete_and_wait, init_tracing,
    secs,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::ResourceExt as _;
use kube::api::{Api, DynamicObject, PartialObjectMeta, Patch, PatchParams};
use metascript::testing::{
    ControlPlane, HookServer, Reply, SERVICE_PER_POD_MARKER, install_crds, install_these_crds,
    service_per_pod,
};
use serde_json::{Value, json};
use std::io::BufRead as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The argument that makes this binary the webhook's process instead of the benchmark.
const SERVE_WEBHOOK: &str = "--serve-webhook";

/// The benchmark's flags; the file's documentation says what each run measures.
#[derive(clap::Parser)]
#[command(
    name = "bench_metacontroller",
    about = "metascript (Rhai, Lua) beside Metacontroller on the service-per-pod example, \
             interleaved on one local plane (examples/bench_metacontroller.rs)"
)]
struct Flags {
    /// StatefulSets per run.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    targets: u32,
    /// Rounds; each runs every system once, the next one in the opposite order.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// The metascript binary [default: target/release/metascript].
    #[arg(long)]
    bin: Option<PathBuf>,
    /// metascript's workers [default: its own].
    #[arg(long)]
    workers: Option<usize>,
    /// A Metacontroller binary, built from its source.
    #[arg(long, requires = "metacontroller_crds")]
    metacontroller: Option<PathBuf>,
    /// That source tree's CRD manifest (manifests/production/metacontroller-crds-v1.yaml).
    #[arg(long, requires = "metacontroller")]
    metacontroller_crds: Option<PathBuf>,
    /// Metacontroller's workers.
    #[arg(long, default_value_t = 50)]
    metacontroller_workers: usize,
    /// How long each converged system is left alone, in seconds.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// What runs, in a round's order [default: rhai,lua, and metacontroller when given].
    #[arg(long, value_enum, value_delimiter = ',')]
    systems: Vec<System>,
    /// Serve the webhook instead: the benchmark starts its webhook process so.
    #[arg(long, hide = true)]
    serve_webhook: bool,
}

/// What the runs use, from the flags.
struct Args {
    targets: usize,
    rounds: usize,
    bin: PathBuf,
    workers: Option<usize>,
    metacontroller: Option<Metacontroller>,
    metacontroller_workers: usize,
    steady: Duration,
    /// What runs, in a round's order.
    systems: Vec<System>,
}

impl Args {
    fn of(flags: Flags) -> anyhow::Result<Args> {
        let metacontroller =
            Metacontroller::from_args(flags.metacontroller, flags.metacontroller_crds)?;
        let systems = match flags.systems {
            given if !given.is_empty() => given,
            _ if metacontroller.is_some() => {
                vec![System::Rhai, System::Lua, System::Metacontroller]
            }
            _ => vec![System::Rhai, System::Lua],
        };
        anyhow::ensure!(
            metacontroller.is_some() || !systems.contains(&System::Metacontroller),
            "--systems names metacontroller: give --metacontroller BIN --metacontroller-crds FILE"
        );
        Ok(Args {
            targets: flags.targets as usize,
            rounds: flags.rounds as usize,
            bin: existing_bin(flags.bin.unwrap_or_else(release_bin))?,
            workers: flags.workers,
            metacontroller,
            metacontroller_workers: flags.metacontroller_workers,
            steady: Duration::from_secs(flags.steady_seconds),
            systems,
        })
    }
}

/// What converges the targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum System {
    Rhai,
    Lua,
    Metacontroller,
}

impl System {
    /// The language and code of the example's script it runs; none for Metacontroller.
    fn script(self) -> Option<(&'static str, &'static str)> {
        match self {
            System::Rhai => Some(("rhai", include_str!("../scripts/service-per-pod/sync.rhai"))),
            System::Lua => Some(("lua", include_str!("../scripts/service-per-pod/sync.lua"))),
            System::Metacontroller => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            System::Rhai => "metascript, Rhai",
            System::Lua => "metascript, Lua",
            System::Metacontroller => "Metacontroller + webhook",
        }
    }
}

/// The example's controller manifest (`scripts/service-per-pod/controller.rhai.yaml`), its
/// hooks given by `hooks`: the same resources, attachments and update strategy for every
/// system.
fn controller(api_version: &str, hooks: Value) -> anyhow::Result<Value> {
    let mut controller: Value = serde_saphyr::from_str(include_str!(
        "../scripts/service-per-pod/controller.rhai.yaml"
    ))?;
    controller["apiVersion"] = api_version.into();
    controller["spec"]["hooks"] = hooks;
    Ok(controller)
}

/// The example's sync script as both the sync and the finalize hook, inline (the example's
/// manifests name it from a ConfigMap for both).
fn script_hooks(language: &str, code: &str) -> Value {
    let hook = json!({"script": {"language": language, "inline": code}});
    json!({"sync": hook, "finalize": hook})
}

/// The webhook answering Metacontroller, in a process of its own (this binary, run with
/// [`SERVE_WEBHOOK`]), so its CPU is counted apart from Metacontroller's and the benchmark's.
struct WebhookProcess {
    child: Child,
    url: String,
}

impl WebhookProcess {
    fn start() -> anyhow::Result<WebhookProcess> {
        let child = Command::new(std::env::current_exe()?)
            .arg(SERVE_WEBHOOK)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        // Held from here, so a failure below kills it on drop.
        let mut webhook = WebhookProcess {
            child,
            url: String::new(),
        };
        let stdout = webhook.child.stdout.take().expect("piped");
        std::io::BufReader::new(stdout).read_line(&mut webhook.url)?;
        webhook.url = webhook.url.trim().to_string();
        anyhow::ensure!(
            webhook.url.starts_with("http://"),
            "the webhook process did not say where it listens (it said {:?})",
            webhook.url
        );
        Ok(webhook)
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(&self.child.id().to_string()).unwrap_or(f64::NAN)
    }
}

impl Drop for WebhookProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The webhook process: serves the example's hooks on a free loopback port, says its URL on
/// standard output, and runs until it is killed.
fn serve_webhook() -> anyhow::Result<()> {
    let server =
        HookServer::start_unrecorded(|_, request| match service_per_pod(request, "true") {
            Ok(response) => Reply::json(&response),
            Err(message) => Reply::status(500, message),
        })?;
    println!("{}", server.url(""));
    loop {
        std::thread::park();
    }
}

/// One run's figures.
struct Row {
    system: System,
    converge: Duration,
    cpu: f64,
    webhook_cpu: f64,
    apiserver_cpu: f64,
    writes: f64,
    /// The hook calls of the converge (metascript's own count; Metacontroller keeps none).
    syncs: Option<f64>,
    steady_cpu_per_minute: f64,
    peak_rss: f64,
    teardown: Duration,
    teardown_cpu: f64,
}

impl Row {
    /// The system's CPU per converged target, with its webhook's, in milliseconds.
    fn per_target(&self, targets: usize) -> f64 {
        (self.cpu + self.webhook_cpu) * 1000.0 / targets as f64
    }
}

/// What every run shares.
struct Bench {
    args: Args,
    plane: ControlPlane,
    client: kube::Client,
    clock: CpuClock,
    webhook: Option<WebhookProcess>,
}

impl Bench {
    /// The system's process, started and answering, and the controller to create (its
    /// DecoratorControllers, the manifest).
    async fn start(
        &self,
        system: System,
    ) -> anyhow::Result<(OperatorProcess, Api<DynamicObject>, Value)> {
        let (process, controllers, manifest) = match system.script() {
            Some((language, code)) => {
                let mut flags = vec!["--log".to_string(), "warn".to_string()];
                if let Some(workers) = self.args.workers {
                    flags.extend(["--workers".to_string(), workers.to_string()]);
                }
                (
                    OperatorProcess::start(&self.args.bin, &self.plane, &flags)?,
                    common::controllers(&self.client, "metascript.dev", "DecoratorController"),
                    controller("metascript.dev/v1alpha1", script_hooks(language, code))?,
                )
            }
            None => {
                let (Some(metacontroller), Some(webhook)) =
                    (&self.args.metacontroller, &self.webhook)
                else {
                    anyhow::bail!("Metacontroller runs only with --metacontroller");
                };
                let hooks = json!({
                    "sync": {"webhook": {"url": format!("{}/sync", webhook.url)}},
                    "finalize": {"webhook": {"url": format!("{}/finalize", webhook.url)}}
                });
                (
                    OperatorProcess::metacontroller(
                        &metacontroller.bin,
                        &self.plane,
                        self.args.metacontroller_workers,
                    )?,
                    common::controllers(
                        &self.client,
                        "metacontroller.k8s.io",
                        "DecoratorController",
                    ),
                    controller("metacontroller.k8s.io/v1alpha1", hooks)?,
                )
            }
        };
        let answering = |process: &OperatorProcess| match system {
            System::Metacontroller => metacontroller::answers(process),
            _ => process.metric("metascript_leader") == Some(1.0),
        };
        until(
            &format!("{} to answer", system.name()),
            PHASE_TIMEOUT,
            || answering(&process),
        )
        .await?;
        Ok((process, controllers, manifest))
    }

    fn webhook_cpu(&self) -> f64 {
        self.webhook.as_ref().map_or(0.0, WebhookProcess::cpu)
    }

    /// One run of `system` in namespace `namespace`.
    async fn run(&self, system: System, namespace: &str) -> anyhow::Result<Row> {
        let n = self.args.targets;
        create_namespace(&self.client, namespace).await?;
        create_stateful_sets(&self.client, namespace, "sts", n, 1, true).await?;

        let (process, controllers, manifest) = self.start(system).await?;
        let mut services = Counter::start(
            Api::<PartialObjectMeta<Service>>::namespaced(self.client.clone(), namespace),
            |_| true,
        );
        let mut marked = Counter::start(
            Api::<PartialObjectMeta<StatefulSet>>::namespaced(self.client.clone(), namespace),
            |sts| sts.labels().get(SERVICE_PER_POD_MARKER).map(String::as_str) == Some("true"),
        );
        let counts = ApiserverCounts::scrape(&self.client).await?;
        let (cpu, webhook_cpu, plane_cpu) = (process.cpu(), self.webhook_cpu(), self.clock.now());
        let started = Instant::now();
        let name = manifest["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        controllers
            .patch(
                &name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&manifest),
            )
            .await?;
        let served = services.reached(n, "Services").await?;
        let labelled = marked.reached(n, "StatefulSets labelled").await?;
        let converge = served.max(labelled) - started;
        let (cpu, webhook_cpu, plane_now) = (
            process.cpu() - cpu,
            self.webhook_cpu() - webhook_cpu,
            self.clock.now(),
        );
        let apiserver_cpu = self.clock.of("apiserver", &plane_cpu, &plane_now);
        let writes = ApiserverCounts::scrape(&self.client)
            .await?
            .writes_since(&counts, &["statefulsets", "services"]);
        let syncs = system
            .script()
            .map(|_| process.controller_metric("syncs_total", &name));

        let before = process.cpu() + self.webhook_cpu();
        tokio::time::sleep(self.args.steady).await;
        let steady_cpu_per_minute =
            (process.cpu() + self.webhook_cpu() - before) * 60.0 / self.args.steady.as_secs_f64();
        let peak_rss = process.memory().1;

        let before = process.cpu() + self.webhook_cpu();
        let started = Instant::now();
        delete_and_wait(
            &Api::<PartialObjectMeta<Namespace>>::all(self.client.clone()),
            namespace,
        )
        .await?;
        let teardown = started.elapsed();
        let teardown_cpu = process.cpu() + self.webhook_cpu() - before;
        // metascript releases what it owns when its controller is deleted: while it runs.
        delete_and_wait(&controllers, &name).await?;
        process.stop()?;
        Ok(Row {
            system,
            converge,
            cpu,
            webhook_cpu,
            apiserver_cpu,
            writes,
            syncs,
            steady_cpu_per_minute,
            peak_rss,
            teardown,
            teardown_cpu,
        })
    }
}

fn print_row(run: usize, row: &Row, targets: usize) {
    println!(
        "| {run} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} | {} | {:.1} | {:.0} | {} | {:.2} |",
        row.system.name(),
        secs(row.converge),
        row.cpu,
        row.webhook_cpu,
        row.per_target(targets),
        row.apiserver_cpu,
        row.writes,
        row.syncs
            .map_or("–".to_string(), |syncs| format!("{syncs:.0}")),
        row.steady_cpu_per_minute,
        row.peak_rss,
        secs(row.teardown),
        row.teardown_cpu,
    );
}

/// The median of some figures (the mean of the middle two when their number is even).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        len if len % 2 == 1 => values[middle],
        _ => (values[middle - 1] + values[middle]) / 2.0,
    }
}

/// Each system's medians, and Metacontroller's as a multiple of each metascript flavour's.
fn print_summary(rows: &[Row], targets: usize) {
    let medians = |system: System| {
        let of = |figure: &dyn Fn(&Row) -> f64| {
            median(
                rows.iter()
                    .filter(|row| row.system == system)
                    .map(figure)
                    .collect(),
            )
        };
        (
            of(&|row| row.converge.as_secs_f64()),
            of(&|row| row.per_target(targets)),
            of(&|row| row.apiserver_cpu),
        )
    };
    println!();
    println!("| system (median) | converge s | system + webhook CPU ms/target | apiserver CPU s |");
    println!("|---|---|---|---|");
    let systems = [System::Rhai, System::Lua, System::Metacontroller];
    let present: Vec<System> = systems
        .into_iter()
        .filter(|system| rows.iter().any(|row| row.system == *system))
        .collect();
    for system in &present {
        let (converge, per_target, apiserver) = medians(*system);
        println!(
            "| {} | {converge:.2} | {per_target:.2} | {apiserver:.2} |",
            system.name()
        );
    }
    if present.contains(&System::Metacontroller) {
        let (converge, per_target, _) = medians(System::Metacontroller);
        for system in present.iter().filter(|s| **s != System::Metacontroller) {
            let (ours, ours_per_target, _) = medians(*system);
            println!(
                "Metacontroller against {}: converge x{:.1}, CPU per target x{:.1}",
                system.name(),
                converge / ours,
                per_target / ours_per_target
            );
        }
    }
}

async fn bench(flags: Flags) -> anyhow::Result<()> {
    init_tracing();
    let args = Args::of(flags)?;
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    install_crds(&client).await?;
    let webhook = match &args.metacontroller {
        Some(metacontroller) if args.systems.contains(&System::Metacontroller) => {
            install_these_crds(&client, metacontroller.crds.clone()).await?;
            Some(WebhookProcess::start()?)
        }
        _ => None,
    };
    let clock = CpuClock::new(&plane);
    println!(
        "{} StatefulSets of one replica per run, {} round(s); Metacontroller with {} workers; \
         load average {}",
        args.targets,
        args.rounds,
        args.metacontroller_workers,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "| run | system | converge | system CPU s | webhook CPU s | CPU ms/target | apiserver CPU s | \
         writes | syncs | steady CPU s/min | peak RSS MiB | teardown | teardown CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let targets = args.targets;
    let bench = Bench {
        args,
        plane,
        client,
        clock,
        webhook,
    };
    let mut rows = Vec::new();
    for round in 0..bench.args.rounds {
        let mut order = bench.args.systems.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for system in order {
            let run = rows.len() + 1;
            let row = bench.run(system, &format!("compare-{run}")).await?;
            print_row(run, &row, targets);
            rows.push(row);
        }
    }
    print_summary(&rows, targets);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let flags = <Flags as clap::Parser>::parse();
    if flags.serve_webhook {
        return serve_webhook();
    }
    tokio::runtime::Runtime::new()?.block_on(bench(flags))
}
