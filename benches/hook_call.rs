//! What a hook call costs, in Rhai, in Lua, and as the webhook the scripts replace.
//!
//! - `service_per_pod_sync_10_pods/{rhai,lua}`: the service-per-pod example's sync hook for a
//!   10-replica StatefulSet whose 10 Services exist, `request` Value in, response Value out.
//! - `service_per_pod_sync_10_pods/webhook`: the same logic in native Rust behind an axum server
//!   on 127.0.0.1, called with hyper over a kept-alive connection; the measured call serializes
//!   the request and parses the response, as the operator would for a `webhook:` hook.
//! - `empty_hook/{rhai,lua}`: the fixed cost of a call (empty request, script returns null).
//!
//! After criterion's own report, a `cargo bench` run prints the median time per call of every
//! benchmark it ran and the ratios against the webhook, and checks the targets of
//! `docs/performance.md`; it exits with status 1 when one is missed. Figures go in
//! `docs/performance.md`.

use criterion::{Criterion, black_box};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use metascript::api::{HookKind, Language, Limits};
use metascript::script::{CallContext, CompiledScript, ScriptEngine, ScriptOrigin, ScriptSource};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPLICAS: usize = 10;
const SYNC: &str = "service_per_pod_sync_10_pods";
const EMPTY: &str = "empty_hook";

/// The 10-pod sync must be at least this many times cheaper than the webhook, in both languages.
const MIN_SPEEDUP_OVER_WEBHOOK: f64 = 15.0;
const MAX_EMPTY_LUA: Duration = Duration::from_micros(5);
const MAX_EMPTY_RHAI: Duration = Duration::from_micros(2);

/// A steady-state request: the StatefulSet and the ten Services the previous sync created.
fn request() -> Value {
    let services: serde_json::Map<String, Value> = (0..REPLICAS)
        .map(|i| {
            let name = format!("web-{i}");
            let service = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": "prod",
                    "uid": format!("00000000-0000-0000-0000-00000000000{i}"),
                    "resourceVersion": "12345",
                    "creationTimestamp": "2024-05-01T10:00:00Z"
                },
                "spec": {
                    "selector": {"statefulset.kubernetes.io/pod-name": name},
                    "ports": [
                        {"name": "port-80", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                        {"name": "port-443", "port": 443, "targetPort": 8443, "protocol": "TCP"}
                    ],
                    "clusterIP": format!("10.0.0.{i}"),
                    "type": "ClusterIP"
                }
            });
            (name, service)
        })
        .collect();
    json!({
        "controller": {
            "apiVersion": "metascript.dev/v1alpha1",
            "kind": "DecoratorController",
            "metadata": {"name": "service-per-pod"}
        },
        "object": {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "web",
                "namespace": "prod",
                "uid": "11111111-2222-3333-4444-555555555555",
                "generation": 3,
                "labels": {"app": "web"},
                "annotations": {
                    "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
                    "service-per-pod-ports": "80:8080,443:8443"
                }
            },
            "spec": {
                "replicas": REPLICAS,
                "serviceName": "web",
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 8080}, {"containerPort": 8443}]
                    }]}
                }
            },
            "status": {"replicas": REPLICAS, "readyReplicas": REPLICAS}
        },
        "attachments": {"Service.v1": services},
        "related": {},
        "finalizing": false
    })
}

/// Every benchmark's per-iteration times, one entry per criterion sample, for the summary.
type Samples = Arc<Mutex<BTreeMap<String, Vec<Duration>>>>;

/// Times `iters` runs of `f` and records the per-iteration time, so the summary compares
/// figures from this very run.
fn timed<T>(samples: &Samples, id: &str, iters: u64, mut f: impl FnMut() -> T) -> Duration {
    let started = Instant::now();
    for _ in 0..iters {
        black_box(f());
    }
    let elapsed = started.elapsed();
    let per_iter = elapsed.div_f64(iters.max(1) as f64);
    samples
        .lock()
        .unwrap()
        .entry(id.to_string())
        .or_default()
        .push(per_iter);
    elapsed
}

fn compile(
    engine: &ScriptEngine,
    language: Language,
    code: String,
    path: PathBuf,
) -> Arc<CompiledScript> {
    engine
        .compile(&ScriptSource::new(
            language,
            code,
            ScriptOrigin::File { path },
        ))
        .expect("compiles")
}

fn example_script(engine: &ScriptEngine, language: Language) -> Arc<CompiledScript> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts/service-per-pod")
        .join(format!("sync.{language}"));
    let code = std::fs::read_to_string(&path).expect("example script");
    compile(engine, language, code, path)
}

fn hook_call(c: &mut Criterion, samples: &Samples) {
    let engine = ScriptEngine::new();
    let request = request();
    let call = CallContext::new("service-per-pod", HookKind::Sync);
    let webhook = Webhook::start();
    let expected = service_per_pod(&request).expect("native logic");
    assert_eq!(
        expected["attachments"].as_array().map(Vec::len),
        Some(REPLICAS)
    );
    // The first Lua call builds the pooled state, which can take longer than a call's default
    // budget under a profiler (valgrind); the measured calls reuse it.
    let first_call = call.clone().with_limits(Limits {
        timeout_millis: Some(60_000),
        ..Limits::default()
    });
    let mut group = c.benchmark_group(SYNC);
    for language in [Language::Rhai, Language::Lua] {
        let script = example_script(&engine, language);
        // The three contenders do the same work only if they give the same answer.
        let response = engine
            .call(&script, &request, &first_call)
            .expect("example runs");
        assert_eq!(response, expected, "{language} and the webhook disagree");
        let id = format!("{SYNC}/{language}");
        group.bench_function(language.as_str(), |b| {
            b.iter_custom(|iters| {
                timed(samples, &id, iters, || {
                    engine.call(&script, black_box(&request), &call).unwrap()
                })
            })
        });
    }
    assert_eq!(webhook.call(&request), expected, "the webhook's answer");
    let id = format!("{SYNC}/webhook");
    group.bench_function("webhook", |b| {
        b.iter_custom(|iters| timed(samples, &id, iters, || webhook.call(black_box(&request))))
    });
    group.finish();
}

fn call_overhead(c: &mut Criterion, samples: &Samples) {
    let engine = ScriptEngine::new();
    let call = CallContext::new("empty", HookKind::Sync);
    let request = json!({});
    let mut group = c.benchmark_group(EMPTY);
    for (language, code) in [(Language::Rhai, "()"), (Language::Lua, "return nil")] {
        let script = compile(&engine, language, code.into(), PathBuf::from("empty"));
        let id = format!("{EMPTY}/{language}");
        group.bench_function(language.as_str(), |b| {
            b.iter_custom(|iters| {
                timed(samples, &id, iters, || {
                    engine.call(&script, black_box(&request), &call).unwrap()
                })
            })
        });
    }
    group.finish();
}

/// The service-per-pod sync hook (`scripts/service-per-pod/sync.rhai`) in native Rust, as a
/// webhook author would write it: same checks, same response.
fn service_per_pod(request: &Value) -> Result<Value, String> {
    const MARKER: &str = "metascript.dev/service-per-pod";
    if request["finalizing"] == json!(true) {
        let remaining = request["attachments"]["Service.v1"]
            .as_object()
            .is_some_and(|services| !services.is_empty());
        return Ok(if remaining {
            json!({"attachments": [], "finalized": false})
        } else {
            json!({"labels": {MARKER: null}, "attachments": [], "finalized": true})
        });
    }
    let sts = &request["object"];
    let metadata = &sts["metadata"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let (sts_name, namespace) = (text(&metadata["name"]), text(&metadata["namespace"]));
    let annotations = &metadata["annotations"];
    let (Some(pod_label), Some(port_spec)) = (
        annotations["service-per-pod-label"].as_str(),
        annotations["service-per-pod-ports"].as_str(),
    ) else {
        return Err(
            "the StatefulSet needs the service-per-pod-label and service-per-pod-ports annotations"
                .into(),
        );
    };
    let mut ports = Vec::new();
    for entry in port_spec.split(',') {
        let invalid =
            || format!("service-per-pod-ports: invalid entry '{entry}' (expected port:targetPort)");
        let parse = |text: &str| -> Result<u16, String> {
            let digits = text.trim();
            if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(invalid());
            }
            digits
                .parse::<u16>()
                .ok()
                .filter(|p| *p >= 1)
                .ok_or_else(invalid)
        };
        let parts: Vec<&str> = entry.split(':').collect();
        let [port, target_port] = parts[..] else {
            return Err(invalid());
        };
        let (port, target_port) = (parse(port)?, parse(target_port)?);
        ports
            .push(json!({"name": format!("port-{port}"), "port": port, "targetPort": target_port}));
    }
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1);
    let services: Vec<Value> = (0..replicas)
        .map(|i| {
            let pod = format!("{sts_name}-{i}");
            json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"selector": {pod_label: pod}, "ports": ports},
            })
        })
        .collect();
    Ok(json!({"labels": {MARKER: "true"}, "attachments": services}))
}

/// The webhook: an axum server on its own multi-threaded runtime (as a separate service would
/// have), and a hyper client with a kept-alive connection driven from the benchmark's thread.
struct Webhook {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
    client_runtime: tokio::runtime::Runtime,
    _server_runtime: tokio::runtime::Runtime,
}

impl Webhook {
    fn start() -> Webhook {
        let server_runtime = tokio::runtime::Runtime::new().expect("server runtime");
        let listener = server_runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let app = axum::Router::new().route("/sync", axum::routing::post(serve_sync));
        server_runtime.spawn(async move { axum::serve(listener, app).await });
        let client_runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("client runtime");
        let client = Client::builder(TokioExecutor::new()).build_http();
        Webhook {
            client,
            uri: format!("http://{address}/sync").parse().expect("uri"),
            client_runtime,
            _server_runtime: server_runtime,
        }
    }

    fn call(&self, request: &Value) -> Value {
        self.client_runtime.block_on(async {
            let body = serde_json::to_vec(request).expect("request JSON");
            let http_request = hyper::Request::post(&self.uri)
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)))
                .expect("request");
            let response = self
                .client
                .request(http_request)
                .await
                .expect("webhook call");
            assert_eq!(response.status(), hyper::StatusCode::OK);
            let body = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            serde_json::from_slice(&body).expect("response JSON")
        })
    }
}

async fn serve_sync(body: Bytes) -> axum::response::Response {
    use axum::response::IntoResponse;
    let response = serde_json::from_slice::<Value>(&body)
        .map_err(|e| e.to_string())
        .and_then(|request| service_per_pod(&request));
    match response {
        Ok(response) => (
            [(hyper::header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&response).expect("response JSON"),
        )
            .into_response(),
        Err(message) => (hyper::StatusCode::BAD_REQUEST, message).into_response(),
    }
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn micros(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6)
}

/// Prints the medians and ratios of this run and checks the targets; returns whether all that
/// could be checked were met.
fn summarize(samples: &BTreeMap<String, Vec<Duration>>) -> bool {
    let medians: BTreeMap<&str, Duration> = samples
        .iter()
        .map(|(id, times)| (id.as_str(), median(times)))
        .collect();
    println!("\nhook_call summary (median per call over this run's samples)");
    for (id, time) in &medians {
        println!("  {id:<40} {:>12}", micros(*time));
    }
    let mut all_met = true;
    let mut check = |what: String, met: bool| {
        println!("  {} {what}", if met { "met:    " } else { "MISSED: " });
        all_met &= met;
    };
    if let Some(webhook) = medians.get(format!("{SYNC}/webhook").as_str()) {
        for language in ["rhai", "lua"] {
            if let Some(script) = medians.get(format!("{SYNC}/{language}").as_str()) {
                let ratio = webhook.as_secs_f64() / script.as_secs_f64();
                check(
                    format!(
                        "10-pod sync, {language}: webhook / script = {ratio:.1}x (target >= {MIN_SPEEDUP_OVER_WEBHOOK}x)"
                    ),
                    ratio >= MIN_SPEEDUP_OVER_WEBHOOK,
                );
            }
        }
    }
    for (language, max) in [("lua", MAX_EMPTY_LUA), ("rhai", MAX_EMPTY_RHAI)] {
        if let Some(time) = medians.get(format!("{EMPTY}/{language}").as_str()) {
            check(
                format!(
                    "empty hook, {language}: {} (target <= {})",
                    micros(*time),
                    micros(max)
                ),
                *time <= max,
            );
        }
    }
    all_met
}

fn main() {
    let samples: Samples = Arc::default();
    let mut criterion = Criterion::default().configure_from_args();
    hook_call(&mut criterion, &samples);
    call_overhead(&mut criterion, &samples);
    criterion.final_summary();
    // `cargo test --benches` runs each benchmark once, without `--bench`: no figures to compare.
    if std::env::args().any(|arg| arg == "--bench") && !summarize(&samples.lock().unwrap()) {
        std::process::exit(1);
    }
}
