//! What a hook call costs, in Rhai, in Lua, and as the webhook the scripts replace.
//!
//! - `service_per_pod_sync_10_pods/{rhai,lua}`: the service-per-pod example's sync hook for a
//!   10-replica StatefulSet whose 10 Services exist, `request` Value in, response Value out.
//! - `service_per_pod_sync_10_pods/webhook`: the same logic in native Rust behind an axum server
//!   on 127.0.0.1, called with hyper over a kept-alive connection; the measured call serializes
//!   the request and parses the response, as the operator would for a `webhook:` hook.
//! - `service_per_pod_sync_10_pods/{rhai,lua}-text`: the same call with the StatefulSet lent as
//!   the JSON text the watch caches keep, as a sync lends an object it does not hold decoded.
//! - `empty_hook/{rhai,lua}`: the fixed cost of a call (empty request, script returns null).
//! - `schema_check_10_services/builtin`: checking the ten Services the sync returns against the
//!   bundled Service schema, as the operator does before it applies a plan; the summary says it
//!   as a share of the Rhai call that made them (no target: the bound is per sync).
//!
//! After criterion's own report, a `cargo bench` run measures the benchmarks it ran once more,
//! interleaved (round after round, each contender for a few milliseconds per round), prints the
//! median time per call and the median ratio against the webhook, and checks the targets of
//! `docs/performance.md`, exiting with status 1 when one is missed. Interleaving keeps the ratios
//! honest on a shared machine whose load changes between criterion's benchmarks. Figures go in
//! `docs/performance.md`.

use criterion::{Criterion, black_box};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use metascript::api::{Language, Limits};
use metascript::script::{
    CallContext, CompiledScript, HookRequest, Json, ScriptEngine, ScriptOrigin, ScriptSource,
};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REPLICAS: usize = 10;
const SYNC: &str = "service_per_pod_sync_10_pods";
const EMPTY: &str = "empty_hook";
const SCHEMA: &str = "schema_check_10_services";

/// The 10-pod sync must be at least this many times cheaper than the webhook, in both languages.
const MIN_SPEEDUP_OVER_WEBHOOK: f64 = 15.0;
const MAX_EMPTY_LUA: Duration = Duration::from_micros(5);
const MAX_EMPTY_RHAI: Duration = Duration::from_micros(2);
/// The summary's interleaved rounds, and how long each contender runs in one.
const ROUNDS: usize = 30;
const ROUND_SLICE: Duration = Duration::from_millis(10);

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

/// One benchmark: its criterion group and name, and the call it measures.
struct Contender<'a> {
    group: &'static str,
    name: &'static str,
    call: Box<dyn Fn() -> Value + 'a>,
}

impl Contender<'_> {
    fn id(&self) -> String {
        format!("{}/{}", self.group, self.name)
    }
}

/// Everything the contenders call, checked to give the same answers before anything is timed.
struct Setup {
    engine: ScriptEngine,
    sync_request: Value,
    /// The sync request without its object, and the object's text, for a request lending it.
    sync_rest: Value,
    object_text: String,
    sync_call: CallContext,
    sync_scripts: [Arc<CompiledScript>; 2],
    empty_request: Value,
    empty_call: CallContext,
    empty_scripts: [Arc<CompiledScript>; 2],
    webhook: Webhook,
    /// What the sync returns, and the schemas it is checked against.
    attachments: Vec<Value>,
    schemas: metascript::schema::Schemas,
}

impl Setup {
    fn new() -> Setup {
        let engine = ScriptEngine::new();
        let sync_request = request();
        let sync_call = CallContext::new("service-per-pod", metascript::kinds::decorator::SYNC);
        let webhook = Webhook::start();
        let expected = service_per_pod(&sync_request).expect("native logic");
        assert_eq!(
            expected["attachments"].as_array().map(Vec::len),
            Some(REPLICAS)
        );
        // The first Lua call builds the pooled state, which can take longer than a call's
        // default budget under a profiler (valgrind); the measured calls reuse it.
        let first_call = sync_call.clone().with_limits(Limits {
            timeout_millis: Some(60_000),
            ..Limits::default()
        });
        let sync_scripts = [Language::Rhai, Language::Lua].map(|language| {
            let script = example_script(&engine, language);
            // The three contenders do the same work only if they give the same answer.
            let response = engine
                .call_measured(&script, &sync_request, &first_call)
                .0
                .expect("example runs");
            assert_eq!(response, expected, "{language} and the webhook disagree");
            script
        });
        assert_eq!(
            webhook.call(&sync_request),
            expected,
            "the webhook's answer"
        );
        let empty_scripts = [(Language::Rhai, "()"), (Language::Lua, "return nil")]
            .map(|(language, code)| compile(&engine, language, code.into(), "empty".into()));
        let schemas = metascript::schema::Schemas::with_builtins();
        let attachments = expected["attachments"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for service in &attachments {
            let violations = metascript::schema::check(
                &schemas,
                service,
                || None::<&Value>,
                metascript::schema::Part::Resource,
            );
            assert_eq!(violations, Vec::new(), "the example's Services are valid");
        }
        let mut sync_rest = sync_request.clone();
        let object = sync_rest
            .as_object_mut()
            .and_then(|fields| fields.remove("object"))
            .expect("the request has an object");
        let object_text = object.to_string();
        for script in &sync_scripts {
            let lent = [("object", Json::Text(&object_text))];
            let response = engine
                .call_measured(script, HookRequest::lending(&sync_rest, &lent), &first_call)
                .0
                .expect("example runs");
            assert_eq!(response, expected, "a request lending its object as text");
        }
        Setup {
            engine,
            attachments,
            schemas,
            sync_request,
            sync_rest,
            object_text,
            sync_call,
            sync_scripts,
            empty_request: json!({}),
            empty_call: CallContext::new("empty", metascript::kinds::decorator::SYNC),
            empty_scripts,
            webhook,
        }
    }

    fn contenders(&self) -> Vec<Contender<'_>> {
        let sync = |script: &Arc<CompiledScript>| {
            let script = script.clone();
            Box::new(move || {
                self.engine
                    .call_measured(&script, black_box(&self.sync_request), &self.sync_call)
                    .0
                    .unwrap()
            }) as Box<dyn Fn() -> Value + '_>
        };
        let sync_text = |script: &Arc<CompiledScript>| {
            let script = script.clone();
            Box::new(move || {
                let lent = [("object", Json::Text(&self.object_text))];
                let request = HookRequest::lending(black_box(&self.sync_rest), &lent);
                self.engine
                    .call_measured(&script, request, &self.sync_call)
                    .0
                    .unwrap()
            }) as Box<dyn Fn() -> Value + '_>
        };
        let empty = |script: &Arc<CompiledScript>| {
            let script = script.clone();
            Box::new(move || {
                self.engine
                    .call_measured(&script, black_box(&self.empty_request), &self.empty_call)
                    .0
                    .unwrap()
            }) as Box<dyn Fn() -> Value + '_>
        };
        vec![
            Contender {
                group: SYNC,
                name: "rhai",
                call: sync(&self.sync_scripts[0]),
            },
            Contender {
                group: SYNC,
                name: "lua",
                call: sync(&self.sync_scripts[1]),
            },
            Contender {
                group: SYNC,
                name: "rhai-text",
                call: sync_text(&self.sync_scripts[0]),
            },
            Contender {
                group: SYNC,
                name: "lua-text",
                call: sync_text(&self.sync_scripts[1]),
            },
            Contender {
                group: SYNC,
                name: "webhook",
                call: Box::new(|| self.webhook.call(black_box(&self.sync_request))),
            },
            Contender {
                group: EMPTY,
                name: "rhai",
                call: empty(&self.empty_scripts[0]),
            },
            Contender {
                group: EMPTY,
                name: "lua",
                call: empty(&self.empty_scripts[1]),
            },
            Contender {
                group: SCHEMA,
                name: "builtin",
                call: Box::new(|| {
                    let found: usize = black_box(&self.attachments)
                        .iter()
                        .map(|service| {
                            metascript::schema::check(
                                &self.schemas,
                                service,
                                || None::<&Value>,
                                metascript::schema::Part::Resource,
                            )
                            .len()
                        })
                        .sum();
                    Value::from(found)
                }),
            },
        ]
    }
}

/// Runs every contender through criterion; returns the ids of those the command line selected.
fn measure(criterion: &mut Criterion, contenders: &[Contender]) -> BTreeSet<String> {
    let ran = RefCell::new(BTreeSet::new());
    for group_name in [SYNC, EMPTY, SCHEMA] {
        let mut group = criterion.benchmark_group(group_name);
        for contender in contenders.iter().filter(|c| c.group == group_name) {
            group.bench_function(contender.name, |b| {
                ran.borrow_mut().insert(contender.id());
                b.iter(|| (contender.call)())
            });
        }
        group.finish();
    }
    ran.into_inner()
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn micros(seconds: f64) -> String {
    format!("{:.2} µs", seconds * 1e6)
}

/// Times `contenders` interleaved and prints their medians and ratios; returns whether every
/// target that could be checked was met.
fn summarize(contenders: &[&Contender]) -> bool {
    // Enough calls per round for `ROUND_SLICE`, from a first estimate.
    let batches: Vec<u32> = contenders
        .iter()
        .map(|contender| {
            let started = Instant::now();
            for _ in 0..10 {
                black_box((contender.call)());
            }
            let per_call = started.elapsed() / 10;
            (ROUND_SLICE.as_nanos() / per_call.as_nanos().max(1)).clamp(1, 100_000) as u32
        })
        .collect();
    let mut per_call = vec![Vec::with_capacity(ROUNDS); contenders.len()];
    for _ in 0..ROUNDS {
        for ((contender, batch), times) in contenders.iter().zip(&batches).zip(&mut per_call) {
            let started = Instant::now();
            for _ in 0..*batch {
                black_box((contender.call)());
            }
            times.push(started.elapsed().as_secs_f64() / f64::from(*batch));
        }
    }
    let find = |id: &str| contenders.iter().position(|c| c.id() == id);
    println!(
        "\nhook_call summary: {ROUNDS} interleaved rounds (median per call; ratio = webhook / script per round, median)"
    );
    for (contender, times) in contenders.iter().zip(&per_call) {
        println!(
            "  {:<40} {:>12}",
            contender.id(),
            micros(median(times.clone()))
        );
    }
    let mut all_met = true;
    let mut check = |what: String, met: bool| {
        println!("  {} {what}", if met { "met:    " } else { "MISSED: " });
        all_met &= met;
    };
    if let Some(webhook) = find(&format!("{SYNC}/webhook")) {
        for language in ["rhai", "lua"] {
            if let Some(script) = find(&format!("{SYNC}/{language}")) {
                let ratios = per_call[webhook]
                    .iter()
                    .zip(&per_call[script])
                    .map(|(webhook, script)| webhook / script)
                    .collect();
                let ratio = median(ratios);
                check(
                    format!(
                        "10-pod sync, {language}: webhook / script = {ratio:.1}x (target >= {MIN_SPEEDUP_OVER_WEBHOOK}x)"
                    ),
                    ratio >= MIN_SPEEDUP_OVER_WEBHOOK,
                );
            }
        }
    }
    // Said, not judged: the bound is on a whole sync's CPU (bench_decorator), where
    // the hook call is one part among writes, watches and bookkeeping.
    if let (Some(schema), Some(rhai)) = (
        find(&format!("{SCHEMA}/builtin")),
        find(&format!("{SYNC}/rhai")),
    ) {
        let shares = per_call[schema]
            .iter()
            .zip(&per_call[rhai])
            .map(|(schema, rhai)| schema / rhai)
            .collect();
        println!(
            "  schema check of the 10 Services = {:.0}% of the Rhai sync that made them",
            median(shares) * 100.0
        );
    }
    for (language, max) in [("lua", MAX_EMPTY_LUA), ("rhai", MAX_EMPTY_RHAI)] {
        if let Some(index) = find(&format!("{EMPTY}/{language}")) {
            let time = median(per_call[index].clone());
            check(
                format!(
                    "empty hook, {language}: {} (target <= {})",
                    micros(time),
                    micros(max.as_secs_f64())
                ),
                time <= max.as_secs_f64(),
            );
        }
    }
    all_met
}

fn main() {
    // Hook calls run on the operator's runtime threads, whose stack holds a Rhai call in place;
    // on a thread with less, each call gets a stack made for it (about 16 µs more).
    let bench = std::thread::Builder::new()
        .stack_size(metascript::script::THREAD_STACK)
        .spawn(bench)
        .expect("a benchmark thread");
    if !bench.join().expect("the benchmarks ran") {
        std::process::exit(1);
    }
}

/// Runs the benchmarks; false when one missed its target.
fn bench() -> bool {
    let setup = Setup::new();
    let contenders = setup.contenders();
    let mut criterion = Criterion::default().configure_from_args();
    let ran = measure(&mut criterion, &contenders);
    criterion.final_summary();
    // `cargo test --benches` runs each benchmark once, without `--bench`: nothing to compare.
    if std::env::args().any(|arg| arg == "--bench") {
        let selected: Vec<&Contender> = contenders
            .iter()
            .filter(|c| ran.contains(&c.id()))
            .collect();
        return summarize(&selected);
    }
    true
}
