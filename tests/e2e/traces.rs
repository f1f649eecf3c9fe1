//! Traces of the operator's work, as a user turns them on (`metascript run --otlp-endpoint`),
//! exported over OTLP/HTTP to a receiver that decodes them with the OpenTelemetry project's own
//! protobuf types and refuses what breaks the protocol (hack/tools/otlp-receiver, built from the
//! Go module proxy by hack/tools/build-otlp-receiver.sh; `METASCRIPT_OTLP_RECEIVER` names a
//! binary already built). Like the control plane, a receiver that cannot be built fails the
//! test rather than skipping it.

use crate::support::operator::{OWN_OPERATOR_LABEL, apply, wait_for};
use crate::support::process::OperatorProcess;
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use metascript::testing::{HookServer, Reply};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

/// The annotation an Event of a traced sync carries.
const TRACE_ID: &str = "metascript.dev/trace-id";

/// The receiver: every span it took, one JSON object each, as it printed them.
struct Receiver {
    child: Child,
    spans: Arc<Mutex<Vec<Value>>>,
    /// The collector's base URL, as `--otlp-endpoint` takes it.
    url: String,
}

impl Receiver {
    fn start() -> Receiver {
        let mut child = Command::new(receiver_binary())
            .args(["-addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the OTLP receiver");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("its stdout")).lines();
        let first: Value = serde_json::from_str(&lines.next().expect("a first line").unwrap())
            .expect("the first line is JSON");
        let url = format!(
            "http://{}",
            first["listening"].as_str().expect("its address")
        );
        let spans = Arc::new(Mutex::new(Vec::new()));
        let taken = spans.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let span = serde_json::from_str(&line).expect("a span as JSON");
                taken.lock().push(span);
            }
        });
        Receiver { child, spans, url }
    }

    fn spans(&self) -> Vec<Value> {
        self.spans.lock().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `METASCRIPT_OTLP_RECEIVER`, else what the build script builds (or has cached).
fn receiver_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("METASCRIPT_OTLP_RECEIVER") {
        return PathBuf::from(path);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/tools/build-otlp-receiver.sh");
    let built = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("running build-otlp-receiver.sh");
    assert!(built.status.success(), "build-otlp-receiver.sh failed");
    let path = String::from_utf8(built.stdout).expect("a path");
    PathBuf::from(path.lines().last().expect("the receiver's path").trim())
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// The spans of one trace.
fn of_trace<'a>(spans: &'a [Value], trace: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["traceId"] == trace).collect()
}

/// The one span named `name` whose parent is `parent`.
fn child<'a>(spans: &[&'a Value], parent: &Value, name: &str) -> &'a Value {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s["name"] == name && s["parentSpanId"] == parent["spanId"])
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name} span under {}: {spans:#?}",
        parent["name"]
    );
    found[0]
}

fn within(inner: &Value, outer: &Value) -> bool {
    let at = |span: &Value, key: &str| span[key].as_u64().expect("a time");
    at(inner, "startUnixNano") >= at(outer, "startUnixNano")
        && at(inner, "endUnixNano") <= at(outer, "endUnixNano")
}

#[tokio::test]
async fn a_sync_is_one_trace_of_its_wait_hook_call_reads_and_writes_named_in_logs_and_events() {
    let client = client().await;
    let receiver = Receiver::start();
    let name = unique_name("traces");
    let namespace = test_namespace(&client, "traces").await;
    let log_path = std::env::temp_dir().join(format!("{name}-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("the operator's log file");
    // Batches go out every 100 ms instead of every 5 s: the test waits for them.
    let _operator = OperatorProcess::start_logged(
        &name,
        &[
            "--otlp-endpoint",
            &receiver.url,
            "--trace-sample-ratio",
            "1",
            "--webhook-allow",
            "127.0.0.0/8",
        ],
        &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
        log,
    )
    .await;
    let lua = "local account\n\
               for _ = 1, tonumber(get_path(request.object, 'data.reads') or '1') do\n\
                 account = get('v1', 'ServiceAccount', request.object.metadata.namespace, 'reader')\n\
               end\n\
               if get_path(request.object, 'data.fail') then error('asked to fail') end\n\
               return { labels = { traced = account and 'found' or 'missing' } }";
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"traced-by": name}}}],
            "reads": [{"apiVersion": "v1", "resource": "serviceaccounts"}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": lua}}}
        }
    }))
    .await;
    apply(&client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": namespace}})).await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fine", "namespace": namespace, "labels": {"traced-by": name}}});
    apply(&client, &target).await;
    wait_for(&client, &target, "the label from the traced sync", |o| {
        o["metadata"]["labels"]["traced"] == "found"
    })
    .await;

    // The sync that wrote the label: a root from when the item was ready, its queue wait and
    // the worker's run; in the run the hook call (with what it cost) and the write; in the
    // call the script's read.
    let object = format!("ConfigMap.v1 {namespace}/fine");
    let spans = eventually("the trace of the sync that labelled the target", || async {
        let spans = receiver.spans();
        // The sync that found the account: one that ran before the account reached the
        // operator's cache wrote `missing` first.
        let root = spans.iter().find(|s| {
            let trace = of_trace(&spans, s["traceId"].as_str().unwrap());
            s["name"] == "sync"
                && attribute(s, "metascript.object") == object.as_str()
                && trace.iter().any(|w| w["name"] == "write")
                && trace
                    .iter()
                    .any(|g| g["name"] == "get" && attribute(g, "found") == true)
        })?;
        let trace = root["traceId"].as_str().unwrap().to_string();
        Some((
            root.clone(),
            of_trace(&spans, &trace)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>(),
        ))
    })
    .await;
    let (root, trace) = spans;
    let trace: Vec<&Value> = trace.iter().collect();
    assert!(
        root["parentSpanId"].is_null(),
        "a work item's root has no parent: {root:#}"
    );
    assert_eq!(
        attribute(&root, "metascript.controller"),
        format!("decorator/{name}").as_str()
    );
    assert_eq!(root["resource"]["service.name"], "metascript");
    assert_eq!(root["scope"], "metascript");
    let wait = child(&trace, &root, "queue wait");
    assert_eq!(
        wait["startUnixNano"], root["startUnixNano"],
        "the wait starts the item"
    );
    let run = child(&trace, &root, "run");
    assert!(within(wait, &root) && within(run, &root), "{trace:#?}");
    assert!(
        wait["endUnixNano"].as_u64() <= run["startUnixNano"].as_u64(),
        "the run starts when the wait ends: {trace:#?}"
    );
    let hook = child(&trace, run, "hook");
    assert_eq!(attribute(hook, "hook"), "sync");
    assert_eq!(attribute(hook, "language"), "lua");
    assert!(attribute(hook, "operations").as_i64() > Some(0), "{hook:#}");
    assert!(
        attribute(hook, "peak_memory_bytes").as_i64() > Some(0),
        "{hook:#}"
    );
    assert_eq!(hook["statusCode"], 0, "the call succeeded: {hook:#}");
    let read = child(&trace, hook, "get");
    assert_eq!(attribute(read, "name"), "reader");
    assert_eq!(attribute(read, "found"), true);
    assert!(within(read, hook) && within(hook, run), "{trace:#?}");
    let write = child(&trace, run, "write");
    assert_eq!(attribute(write, "action"), "patch metadata of");
    assert!(within(write, run), "{trace:#?}");

    // A script's loop of reads makes at most 32 spans; the call's span counts the others.
    let many = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "many", "namespace": namespace, "labels": {"traced-by": name}}, "data": {"reads": "40"}});
    apply(&client, &many).await;
    let object = format!("ConfigMap.v1 {namespace}/many");
    let (hook, reads) = eventually("the trace of the sync reading 40 times", || async {
        let spans = receiver.spans();
        let root = spans.iter().find(|s| {
            s["name"] == "sync" && attribute(s, "metascript.object") == object.as_str()
        })?;
        let trace = of_trace(&spans, root["traceId"].as_str().unwrap());
        let hook = trace.iter().find(|s| s["name"] == "hook")?;
        let reads = trace
            .iter()
            .filter(|s| s["name"] == "get" && s["parentSpanId"] == hook["spanId"])
            .count();
        Some(((*hook).clone(), reads))
    })
    .await;
    assert_eq!(reads, 32, "{hook:#}");
    assert_eq!(attribute(&hook, "reads_untraced"), 8, "{hook:#}");

    // A webhook hook is told the trace it is part of (W3C traceparent: its own spans join the
    // trace under the call's span).
    let parents = Arc::new(Mutex::new(Vec::new()));
    let seen = parents.clone();
    let hook_server = HookServer::start_with_headers(move |call| {
        if let Some(traceparent) = call.header("traceparent") {
            seen.lock().push(traceparent.to_string());
        }
        Reply::json(&json!({"labels": {"traced": "by-webhook"}}))
    })
    .expect("the hook server");
    let webhooked = format!("{name}-webhook");
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": webhooked, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"traced-by": webhooked}}}],
            "hooks": {"sync": {"webhook": {"url": hook_server.url("/sync")}}}
        }
    }))
    .await;
    let called = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "called", "namespace": namespace, "labels": {"traced-by": webhooked}}});
    apply(&client, &called).await;
    wait_for(&client, &called, "the label from the webhook", |o| {
        o["metadata"]["labels"]["traced"] == "by-webhook"
    })
    .await;
    let traceparent = parents
        .lock()
        .first()
        .cloned()
        .expect("a traceparent header");
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert!(
        fields.len() == 4 && fields[0] == "00" && fields[3] == "01",
        "a sampled W3C traceparent: {traceparent}"
    );
    let (trace, parent) = (fields[1].to_string(), fields[2].to_string());
    let call = eventually("the webhook call's span", || async {
        receiver
            .spans()
            .into_iter()
            .find(|s| s["traceId"] == trace.as_str() && s["spanId"] == parent.as_str())
    })
    .await;
    assert_eq!(call["name"], "hook", "{call:#}");
    assert_eq!(attribute(&call, "language"), "webhook", "{call:#}");

    // A sync that fails: its Warning Event names its trace, whose hook call failed, and the
    // operator's log line saying so names it too.
    let failing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "failing", "namespace": namespace, "labels": {"traced-by": name}}, "data": {"fail": "yes"}});
    apply(&client, &failing).await;
    let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
    let trace_id = eventually(
        "a Warning about the failing target naming its trace",
        || async {
            let events = events.list(&Default::default()).await.ok()?;
            events.items.iter().find_map(|event| {
                let about = event.regarding.as_ref()?.name.as_deref()?;
                let annotations = event.metadata.annotations.as_ref()?;
                (about == "failing" && event.type_.as_deref() == Some("Warning"))
                    .then(|| annotations.get(TRACE_ID).cloned())
                    .flatten()
            })
        },
    )
    .await;
    assert_eq!(trace_id.len(), 32, "a W3C trace id: {trace_id}");
    let failed_hook = eventually("the failed sync's trace", || async {
        let spans = receiver.spans();
        let hook = of_trace(&spans, &trace_id)
            .into_iter()
            .find(|s| s["name"] == "hook")?
            .clone();
        Some(hook)
    })
    .await;
    assert_eq!(
        failed_hook["statusCode"], 2,
        "an error status: {failed_hook:#}"
    );
    assert!(
        failed_hook["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("asked to fail")),
        "{failed_hook:#}"
    );
    let logged = std::fs::read_to_string(&log_path).expect("the operator's log");
    assert!(
        logged
            .lines()
            .any(|line| line.contains(&format!("trace_id={trace_id}")) && line.contains("failed")),
        "no log line names trace {trace_id}:\n{logged}"
    );
    let _ = std::fs::remove_file(&log_path);
}
