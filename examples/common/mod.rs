//! What the scale benchmarks share: logging, namespaces, counting objects by watch, waiting for
//! the operator to settle, reading process memory and CPU time and the apiserver's own account of
//! its work, and formatting.

pub mod apiserver;
// Only the comparisons run Metacontroller.
#[allow(dead_code)]
pub mod metacontroller;
// Not every benchmark runs the operator as a process.
#[allow(dead_code)]
pub mod process;
// Only the service-per-pod benchmarks create StatefulSets.
#[allow(dead_code)]
pub mod stateful_sets;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt as _};
use metascript::runtime::Operator;
use metascript::testing::ControlPlane;
use serde::de::DeserializeOwned;
use serde_json::json;
use std::collections::HashSet;
use std::fmt::Debug;
use std::time::Duration;
use std::time::Instant;
use tokio::sync::watch;

/// Upper bound for any one phase, so a stuck run fails instead of hanging.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(900);
/// How often a phase that is still waiting prints its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// Waits until the operator says it is ready (every controller that existed at its start
/// loaded, their types' caches filled), and says when.
pub async fn ready(flag: &std::sync::atomic::AtomicBool) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    // An in-process flag, read often: the start-up it times takes about a second.
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while !flag.load(std::sync::atomic::Ordering::Relaxed) {
        anyhow::ensure!(Instant::now() < deadline, "the operator never became ready");
        tick.tick().await;
    }
    Ok(Instant::now())
}

/// Logs to stderr at `warn`, without kube's noise about failed readiness probes while the
/// plane starts (real failures reach the benchmark as errors anyway).
/// The benchmarks' log filter when `RUST_LOG` sets none.
#[allow(dead_code)] // Named outside only by the benchmarks that can trace.
pub const LOG_FILTER: &str = "warn,kube_client::client::builder=off";

pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| LOG_FILTER.into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The controllers of one kind of an API group at v1alpha1: `metascript.dev`'s, or
/// Metacontroller's `metacontroller.k8s.io` for the comparisons.
pub fn controllers(client: &kube::Client, group: &str, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, "v1alpha1", kind),
            &plural,
        ),
    )
}

/// Deletes an object and waits, by watch, until it is gone (its finalizers released).
#[allow(dead_code)] // Not every benchmark deletes what it made.
pub async fn delete_and_wait<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let wanted = name.to_string();
    let mut present = Counter::start(api.clone(), move |object: &K| object.name_any() == wanted);
    api.delete(name, &Default::default()).await?;
    present.fell_to(0, &format!("{name} to be gone")).await?;
    Ok(())
}

pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(())
}

/// Counts, from a watch, the objects for which `matches` holds. A watch rather than polling
/// lists: it sees the moment the last object changes, and costs the apiserver far less than
/// listing 1,000 objects five times a second. Watch `PartialObjectMeta<K>` when labels are all
/// `matches` reads.
pub struct Counter {
    /// `None` until the first list is complete, so no wait passes on a count not yet read.
    count: watch::Receiver<Option<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Counter {
    pub fn start<K>(api: Api<K>, matches: impl Fn(&K) -> bool + Send + 'static) -> Self
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let (tx, count) = watch::channel(None);
        let task = tokio::spawn(async move {
            let key = |object: &K| {
                format!(
                    "{}/{}",
                    object.namespace().unwrap_or_default(),
                    object.name_any()
                )
            };
            let mut matching: HashSet<String> = HashSet::new();
            let mut init: HashSet<String> = HashSet::new();
            let mut listed = false;
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        // The watcher retries by itself; a failure here only delays the count.
                        tracing::warn!(%error, "benchmark watch failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                match event {
                    watcher::Event::Init => init.clear(),
                    watcher::Event::InitApply(object) => {
                        if matches(&object) {
                            init.insert(key(&object));
                        }
                    }
                    watcher::Event::InitDone => {
                        matching = std::mem::take(&mut init);
                        listed = true;
                    }
                    watcher::Event::Apply(object) => {
                        if matches(&object) {
                            matching.insert(key(&object));
                        } else {
                            matching.remove(&key(&object));
                        }
                    }
                    watcher::Event::Delete(object) => {
                        matching.remove(&key(&object));
                    }
                }
                if listed {
                    tx.send_replace(Some(matching.len()));
                }
            }
        });
        Counter { count, task }
    }

    /// Waits until at least `n` objects match; returns when that was seen.
    pub async fn reached(&mut self, n: usize, what: &str) -> anyhow::Result<Instant> {
        self.until(|count| count >= n, n, what).await
    }

    /// Waits until at most `n` objects match; returns when that was seen.
    #[allow(dead_code)] // Only benchmarks that delete objects count down.
    pub async fn fell_to(&mut self, n: usize, what: &str) -> anyhow::Result<Instant> {
        self.until(|count| count <= n, n, what).await
    }

    /// How many objects match now.
    #[allow(dead_code)] // Not every benchmark reports a count on its own.
    pub fn now(&self) -> usize {
        self.count.borrow().unwrap_or(0)
    }

    async fn until(
        &mut self,
        done: impl Fn(usize) -> bool,
        n: usize,
        what: &str,
    ) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + PHASE_TIMEOUT;
        loop {
            let reached = {
                let wait = self.count.wait_for(|count| count.is_some_and(&done));
                tokio::time::timeout(PROGRESS_EVERY, wait)
                    .await
                    .map(|result| result.is_ok())
            };
            match reached {
                Ok(true) => return Ok(Instant::now()),
                Ok(false) => anyhow::bail!("the watch counting {what} stopped"),
                // A slow or stuck phase shows where it is (sync failures are logged as warnings).
                Err(_) if Instant::now() < deadline => {
                    println!("    ... {what}: {} (waiting for {n})", self.now())
                }
                Err(_) => anyhow::bail!(
                    "timed out after {PHASE_TIMEOUT:?} waiting for {what}: {} (waiting for {n})",
                    self.now()
                ),
            }
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the operator has had nothing queued and made no sync or write for `quiet`;
/// returns when its last activity was.
pub async fn settle(
    operator: &Operator,
    quiet: Duration,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    let counters = || (operator.syncs(), operator.writes());
    let mut seen = counters();
    let mut last_activity = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = Instant::now();
        let current = counters();
        if operator.queued() > 0 || current != seen {
            seen = current;
            last_activity = now;
        } else if now - last_activity >= quiet {
            return Ok(last_activity);
        }
        anyhow::ensure!(
            now < deadline,
            "the operator did not settle in {timeout:?} (queued {}, syncs {}, writes {})",
            operator.queued(),
            current.0,
            current.1
        );
    }
}

/// The operator's CPU seconds over `wait` with nothing to do: the floor under a phase's figure
/// that includes a quiet wait of that length (watches, the status loop).
pub async fn idle_cpu(cpu: &CpuClock, wait: Duration) -> f64 {
    let before = cpu.now();
    tokio::time::sleep(wait).await;
    cpu.operator_since(&before)
}

/// `VmHWM` (peak) and `VmRSS` (current) of a process, in MiB.
pub fn memory(pid: &str) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<f64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib / 1024.0)
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

pub fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// Milliseconds per item, e.g. `2.50 ms/target`.
pub fn per_item(d: Duration, n: usize, item: &str) -> String {
    format!("{:.2} ms/{item}", d.as_secs_f64() * 1000.0 / n as f64)
}

/// CPU time (user + system) each process has used so far: this one (the operator) and the
/// plane's, so every phase can say where its time went.
pub struct CpuClock {
    processes: Vec<(&'static str, String)>,
}

impl CpuClock {
    pub fn new(plane: &ControlPlane) -> Self {
        let mut processes = vec![("operator", "self".to_string())];
        processes.extend(
            plane
                .pids()
                .into_iter()
                .map(|(name, pid)| (short_name(name), pid.to_string())),
        );
        CpuClock { processes }
    }

    pub fn now(&self) -> Vec<f64> {
        self.processes
            .iter()
            .map(|(_, pid)| cpu_seconds(pid).unwrap_or(f64::NAN))
            .collect()
    }

    /// This process's (the operator's) CPU seconds since `since`.
    pub fn operator_since(&self, since: &[f64]) -> f64 {
        self.now()[0] - since[0]
    }

    /// One process's CPU seconds between two readings (`name` as printed: "apiserver", ...).
    #[allow(dead_code)] // Not every benchmark compares one process across phases.
    pub fn of(&self, name: &str, since: &[f64], now: &[f64]) -> f64 {
        let index = self.processes.iter().position(|(n, _)| *n == name);
        index.map_or(f64::NAN, |i| now[i] - since[i])
    }

    /// "operator 1.2, apiserver 8.0, ..." CPU seconds since `since`.
    pub fn since(&self, since: &[f64]) -> String {
        self.between(since, &self.now())
    }

    /// "operator 1.2, apiserver 8.0, ..." CPU seconds from `since` to `now` (two readings).
    pub fn between(&self, since: &[f64], now: &[f64]) -> String {
        let parts: Vec<String> = self
            .processes
            .iter()
            .zip(now.iter().zip(since))
            .map(|((name, _), (now, then))| format!("{name} {:.1}", now - then))
            .collect();
        format!("CPU s: {}", parts.join(", "))
    }
}

fn short_name(component: &str) -> &'static str {
    match component {
        "kube-apiserver" => "apiserver",
        "kube-controller-manager" => "kcm",
        "kube-scheduler" => "scheduler",
        "kwok" => "kwok",
        _ => "etcd",
    }
}

pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces; utime and
    // stime are fields 14 and 15 of the line, so 12 and 13 after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks / per_second.max(1) as f64)
}
