//! What the scale benchmarks share: logging, namespaces, waiting for the operator to settle,
//! reading process memory, and formatting.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use metascript::runtime::Operator;
use serde_json::json;
use std::time::Duration;
use std::time::Instant;

/// Logs to stderr at `warn`, without kube's noise about failed readiness probes while the
/// plane starts (real failures reach the benchmark as errors anyway).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

pub async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    Ok(())
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
