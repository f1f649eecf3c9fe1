//! What the operator counts, and the HTTP endpoint that exposes it with the health probes.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// `decorator` or `map`.
    pub kind: &'static str,
    /// The Event reason (HookFailed, InvalidResponse, ApplyFailed, …).
    pub reason: &'static str,
}

/// The operator's metrics. Cheap to clone: every field shares its value.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Write requests made (apply, patch, delete): zero on a resync of an unchanged cluster.
    pub writes: Counter,
    /// Script work items run (hook calls for decorator targets and map pairs).
    pub syncs: Counter,
    pub failures: Family<FailureLabels, Counter>,
    /// Time spent in script work (hooks and planning) per item, in seconds.
    pub sync_seconds: Histogram,
    /// Work items waiting in the queue.
    pub queue_depth: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            writes: Counter::default(),
            syncs: Counter::default(),
            failures: Family::default(),
            // 50 µs to ~13 s.
            sync_seconds: Histogram::new(exponential_buckets(0.00005, 4.0, 10)),
            queue_depth: Gauge::default(),
        }
    }
}

impl Metrics {
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("metascript");
        registry.register(
            "api_writes",
            "Write requests made to the API server",
            self.writes.clone(),
        );
        registry.register("syncs", "Script work items run", self.syncs.clone());
        registry.register(
            "sync_failures",
            "Failed syncs by kind and reason",
            self.failures.clone(),
        );
        registry.register(
            "sync_duration_seconds",
            "Time spent running hooks and planning, per work item",
            self.sync_seconds.clone(),
        );
        registry.register(
            "queue_depth",
            "Work items waiting",
            self.queue_depth.clone(),
        );
        registry
    }
}

/// Serves `/metrics` (Prometheus text format), `/healthz` (the process is up) and `/readyz`
/// (the operator has started its watches) until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: &Metrics,
    ready: Arc<AtomicBool>,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let registry = Arc::new(metrics.registry());
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    match prometheus_client::encoding::text::encode(&mut text, &registry) {
                        Ok(()) => (
                            StatusCode::OK,
                            [(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            text,
                        ),
                        Err(error) => (
                            StatusCode::INTERNAL_SERVER_ERROR,
                            [("content-type", "text/plain")],
                            error.to_string(),
                        ),
                    }
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready.load(Ordering::Relaxed) {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "starting")
                    }
                }
            }),
        );
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    }
    axum::serve(listener, app).await
}
