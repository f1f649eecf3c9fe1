//! Webhook hooks end to end: controllers whose hooks are HTTP(S) endpoints served by a test server
//! on loopback, against the real plane and the shared operator; the service-per-pod example as a
//! webhook next to the script; and a Metacontroller manifest converted and taking over.

use crate::support::cli::{metascript, stdout_of};
use crate::support::cluster::Cluster;
use crate::support::manifests;
use crate::support::operator::{
    OWN_OPERATOR_LABEL, api_for, apply, get, operator, wait_for, wait_for_event,
};
use crate::support::process::OperatorProcess;
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams};
use metascript::object::{has_finalizer, label};
use metascript::testing::{
    HookServer, Reply, SERVICE_PER_POD_MARKER, service_per_pod, service_per_pod_target,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

const SYNC_RHAI: &str = include_str!("../../scripts/service-per-pod/sync.rhai");
const TRANSFORM_CRDS: &str = include_str!("../../scripts/configmap-transform/crds.yaml");
const DECORATOR_LABEL: &str = "metascript.dev/decorator";

fn webhook(url: &str) -> Value {
    json!({"webhook": {"url": url}})
}

/// A DecoratorController of ConfigMaps labelled for it, attaching ConfigMaps.
fn config_map_decorator(name: &str, hooks: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"webhook.test/controller": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": hooks
        }
    })
}

fn target(namespace: &str, name: &str, controller: &str, data: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"webhook.test/controller": controller}},
        "data": {"value": data}
    })
}

fn config_map(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}})
}

/// Copies the target's data into `<target>-copy`, labels the target, and counts the attachments
/// it was sent; as finalize, asks for no attachments and is done once none is observed.
fn copier(_path: &str, request: &Value) -> Reply {
    let target = &request["object"];
    let observed = request["attachments"]["ConfigMap.v1"]
        .as_object()
        .map_or(0, |attachments| attachments.len());
    if request["finalizing"] == true {
        return Reply::json(&json!({"attachments": [], "finalized": observed == 0}));
    }
    let name = target["metadata"]["name"].as_str().unwrap_or_default();
    Reply::json(&json!({
        "labels": {"webhook.test/seen": "yes"},
        "annotations": {"webhook.test/observed": observed.to_string()},
        "attachments": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{name}-copy")},
            "data": target["data"]
        }]
    }))
}

/// The hook calls the shared operator has timed for one hook of a controller (the same metric
/// scripts are timed in).
/// Until the copier's answer shows: the target's `-copy` attachment exists and the target
/// carries the label.
async fn copier_converged(client: &kube::Client, namespace: &str, app: &Value) {
    wait_for(
        client,
        &config_map(namespace, "app-copy"),
        "the attachment",
        |_| true,
    )
    .await;
    wait_for(client, app, "the label", |o| {
        label(o, "webhook.test/seen") == Some("yes")
    })
    .await;
}

async fn hook_calls(kind: &str, controller: &str, hook: &str) -> u64 {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &operator_metrics().await.registry())
        .expect("metrics encode");
    let series = format!(
        "metascript_hook_duration_seconds_count{{kind=\"{kind}\",controller=\"{controller}\",hook=\"{hook}\"}} "
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

async fn operator_metrics() -> &'static metascript::runtime::report::metrics::Metrics {
    operator().await.operator.metrics()
}

/// Waits for an Event in the namespace with this reason whose note contains `text`.
async fn event(client: &kube::Client, namespace: &str, reason: &str, text: &str) -> String {
    let contains = |e: &Event| e.note.as_deref().is_some_and(|note| note.contains(text));
    let found = wait_for_event(client, Some(namespace), reason, contains).await;
    found.note.unwrap_or_default()
}

#[tokio::test]
async fn a_webhook_sync_attaches_and_labels_and_its_finalize_releases_the_target() {
    let client = client().await;
    operator().await;
    let server = HookServer::start(copier).expect("hook server");
    let namespace = test_namespace(&client, "webhook-sync").await;
    let name = unique_name("webhook-sync");
    apply(
        &client,
        &config_map_decorator(
            &name,
            json!({"sync": webhook(&server.url("/sync")), "finalize": webhook(&server.url("/finalize"))}),
        ),
    )
    .await;
    let app = target(&namespace, "app", &name, "v1");
    apply(&client, &app).await;

    let copy = wait_for(
        &client,
        &config_map(&namespace, "app-copy"),
        "the attachment",
        |_| true,
    )
    .await;
    assert_eq!(copy["data"]["value"], "v1");
    assert_eq!(label(&copy, DECORATOR_LABEL), Some(name.as_str()));
    let owner = &copy["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("ConfigMap"), Some("app"))
    );
    assert_eq!(owner["controller"], true);
    // The attachment, once observed, is sent with the next request, grouped by type and name.
    wait_for(
        &client,
        &app,
        "the label, and the attachment seen by the hook",
        |o| {
            label(o, "webhook.test/seen") == Some("yes")
                && o["metadata"]["annotations"]["webhook.test/observed"] == "1"
        },
    )
    .await;
    let requests = server.requests("/sync");
    let first = &requests[0];
    assert_eq!(first["controller"]["kind"], "DecoratorController");
    assert_eq!(first["controller"]["metadata"]["name"], name.as_str());
    assert_eq!(first["object"]["metadata"]["name"], "app");
    assert_eq!(first["attachments"], json!({"ConfigMap.v1": {}}));
    assert_eq!(first["related"], json!({}));
    assert_eq!(first["finalizing"], false);
    assert!(
        requests
            .iter()
            .any(|r| r["attachments"]["ConfigMap.v1"]["app-copy"]["data"]["value"] == "v1")
    );
    // An edit reaches the attachment through the hook (InPlace).
    apply(&client, &target(&namespace, "app", &name, "v2")).await;
    wait_for(
        &client,
        &config_map(&namespace, "app-copy"),
        "the edit copied",
        |o| o["data"]["value"] == "v2",
    )
    .await;
    // Timed like a script hook, under the same metric.
    let calls = hook_calls("decorator", &name, "sync").await;
    assert!(calls >= 2, "{calls}");

    // Deleting the target calls finalize, which removes the attachment, then releases it.
    let finalizer = format!("metascript.dev/decorator-{name}");
    wait_for(&client, &app, "our finalizer", |o| {
        has_finalizer(o, &finalizer)
    })
    .await;
    api_for(&client, &app)
        .delete("app", &Default::default())
        .await
        .expect("deleting the target");
    eventually("the target deleted after finalize", || async {
        get(&client, &app).await.is_none().then_some(())
    })
    .await;
    assert!(
        get(&client, &config_map(&namespace, "app-copy"))
            .await
            .is_none()
    );
    let finalizing = server.requests("/finalize");
    assert!(
        !finalizing.is_empty() && finalizing.iter().all(|r| r["finalizing"] == true),
        "{finalizing:?}"
    );
    assert!(hook_calls("decorator", &name, "finalize").await >= 1);
}

#[tokio::test]
async fn a_webhook_customize_selects_the_related_objects_sync_receives() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "webhook-customize").await;
    let name = unique_name("webhook-customize");
    let shared_label = name.clone();
    let server = HookServer::start(move |path, request| match path {
        "/customize" => Reply::json(&json!({"relatedResources": [{
            "apiVersion": "v1", "resource": "configmaps",
            "labelSelector": {"matchLabels": {"webhook.test/shared": shared_label}}
        }]})),
        _ => {
            let related: Vec<&String> = request["related"]["ConfigMap.v1"]
                .as_object()
                .map(|related| related.keys().collect())
                .unwrap_or_default();
            let names = related
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(",");
            Reply::json(&json!({"annotations": {"webhook.test/related": names}}))
        }
    })
    .expect("hook server");
    let mut decorator = config_map_decorator(
        &name,
        json!({"sync": webhook(&server.url("/sync")), "customize": webhook(&server.url("/customize"))}),
    );
    decorator["spec"]["attachments"] = json!([]);
    apply(&client, &decorator).await;
    let app = target(&namespace, "app", &name, "v1");
    apply(&client, &app).await;
    let related = |config: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config, "namespace": namespace, "labels": {"webhook.test/shared": name}}});
    let annotation = |o: &Value| o["metadata"]["annotations"]["webhook.test/related"].clone();
    wait_for(&client, &app, "nothing related yet", |o| {
        annotation(o) == ""
    })
    .await;
    apply(&client, &related("alpha")).await;
    wait_for(&client, &app, "alpha related", |o| annotation(o) == "alpha").await;
    apply(&client, &related("beta")).await;
    wait_for(&client, &app, "alpha and beta related", |o| {
        annotation(o) == "alpha,beta"
    })
    .await;
    assert_eq!(
        server.requests("/customize")[0]["parent"]["metadata"]["name"],
        "app"
    );
    assert!(hook_calls("decorator", &name, "customize").await >= 1);
}

/// What the failing server answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Behaviour {
    Copy,
    Error,
    NotJson,
    Slow,
}

#[tokio::test]
async fn a_failing_or_slow_webhook_applies_and_deletes_nothing_and_says_where() {
    let client = client().await;
    operator().await;
    let behaviour = Arc::new(Mutex::new(Behaviour::Copy));
    let current = behaviour.clone();
    let server = HookServer::start(move |path, request| match *current.lock() {
        Behaviour::Copy => copier(path, request),
        Behaviour::Error => Reply::status(500, "the template store is unavailable"),
        Behaviour::NotJson => Reply::status(200, "<html>maintenance</html>"),
        Behaviour::Slow => copier(path, request).after(Duration::from_secs(3)),
    })
    .expect("hook server");
    let namespace = test_namespace(&client, "webhook-failing").await;
    let name = unique_name("webhook-failing");
    let url = server.url("/sync");
    let decorator = |hook: Value| config_map_decorator(&name, json!({"sync": hook}));
    apply(
        &client,
        &decorator(json!({"webhook": {"url": url, "timeout": "1s"}})),
    )
    .await;
    let app = target(&namespace, "app", &name, "v1");
    apply(&client, &app).await;
    copier_converged(&client, &namespace, &app).await;

    let metrics = operator_metrics().await;
    let failures = || {
        metrics
            .hook_failures
            .get(&metascript::runtime::report::metrics::HookLabels {
                kind: "decorator",
                controller: name.clone(),
                hook: "sync",
            })
            .map_or(0, |counter| counter.get())
    };
    let cases = [
        // The kind of failure and its status, never the body (the operator's log has it).
        (
            Behaviour::Error,
            "HookFailed",
            format!("hook sync of {name} (webhook {url}): answered HTTP 500"),
        ),
        (
            Behaviour::NotJson,
            "InvalidResponse",
            format!(
                "hook sync of {name} (webhook {url}) returned an invalid hook response: (response): the body is not JSON: expected value at line 1 column 1"
            ),
        ),
        (
            Behaviour::Slow,
            "HookFailed",
            format!("hook sync of {name} (webhook {url}): no response within 1s (webhook.timeout)"),
        ),
    ];
    for (round, (failing, reason, message)) in cases.into_iter().enumerate() {
        *behaviour.lock() = failing;
        let before = failures();
        // An edit the hook would copy (and a changed webhook answer alone re-runs nothing).
        apply(
            &client,
            &target(&namespace, "app", &name, &format!("broken-{round}")),
        )
        .await;
        let note = event(&client, &namespace, reason, &message).await;
        assert!(
            !note.contains("template store") && !note.contains("maintenance"),
            "{note}"
        );
        if reason == "HookFailed" {
            eventually("the failure counted for the hook", || async {
                (failures() > before).then_some(())
            })
            .await;
        }
        let copy = get(&client, &config_map(&namespace, "app-copy"))
            .await
            .expect("a failing hook must not delete the attachment");
        assert_eq!(copy["data"]["value"], "v1", "{failing:?}: nothing applied");
    }

    // A webhook nobody answers: changing the URL reloads the controller and re-syncs its targets.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/sync", closed.local_addr().unwrap());
    drop(closed);
    apply(&client, &decorator(webhook(&dead))).await;
    event(
        &client,
        &namespace,
        "HookFailed",
        &format!("hook sync of {name} (webhook {dead}): cannot connect"),
    )
    .await;
    assert!(
        get(&client, &config_map(&namespace, "app-copy"))
            .await
            .is_some()
    );
    let reported = format!("webhook {dead}");
    wait_for(
        &client,
        &json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}}),
        "the status naming the webhook",
        |o| o["status"]["scripts"]["sync"]["source"] == reported.as_str(),
    )
    .await;

    // Answering again, it converges.
    *behaviour.lock() = Behaviour::Copy;
    apply(&client, &decorator(webhook(&url))).await;
    wait_for(
        &client,
        &config_map(&namespace, "app-copy"),
        "the latest edit copied",
        |o| o["data"]["value"] == "broken-2",
    )
    .await;
}

/// An operator allowing every address but the guarded ones (`0.0.0.0/0`, `::/0`), and the name
/// `localhost`, refuses hooks on loopback, by address and by that name alike: the check is on
/// the address connected to. Nothing is sent, applied or deleted, and the target says why.
#[tokio::test]
async fn an_operator_refuses_webhooks_on_loopback_unless_it_is_listed_by_address() {
    let client = client().await;
    let instance = unique_name("egress");
    let operator = OperatorProcess::start(
        &instance,
        &[
            "--webhook-allow",
            "0.0.0.0/0,::/0",
            "--webhook-allow",
            "localhost",
        ],
    )
    .await;
    let server = HookServer::start(copier).expect("hook server");
    let port = server.url("").rsplit(':').next().unwrap().to_string();
    let namespace = test_namespace(&client, "egress").await;
    for (kind, url, refusal) in [
        (
            "address",
            server.url("/sync"),
            "destination not allowed: 127.0.0.1, loopback address: only an address entry \
             listing it explicitly allows it (--webhook-allow 127.0.0.1)",
        ),
        (
            "name",
            format!("http://localhost:{port}/sync"),
            "destination not allowed: localhost resolves to ",
        ),
    ] {
        let name = format!("{instance}-{kind}");
        let mut decorator = config_map_decorator(&name, json!({"sync": webhook(&url)}));
        decorator["metadata"]["labels"] = json!({OWN_OPERATOR_LABEL: instance});
        apply(&client, &decorator).await;
        let app = target(&namespace, &format!("app-{kind}"), &name, "v1");
        apply(&client, &app).await;
        let prefix = format!("hook sync of {name} (webhook {url}): {refusal}");
        let note = event(&client, &namespace, "WebhookNotAllowed", &prefix).await;
        assert!(note.contains("127.0.0.1, loopback address"), "{note}");
        let failures = format!(
            "metascript_sync_failures_total{{kind=\"decorator\",controller=\"{name}\",reason=\"WebhookNotAllowed\"}}"
        );
        eventually("the refusal counted", || async {
            operator.metric(&failures).filter(|count| *count >= 1.0)
        })
        .await;
        // Nothing applied: no attachment, no label.
        assert!(
            get(
                &client,
                &config_map(&namespace, &format!("app-{kind}-copy"))
            )
            .await
            .is_none()
        );
        let app = get(&client, &app).await.expect("the target");
        assert_eq!(label(&app, "webhook.test/seen"), None);
    }
    assert!(
        server.requests("/sync").is_empty(),
        "a refused hook must send nothing"
    );
}

/// A webhook's error answer reaches the target's Events as its status alone: the body is for
/// the operator's log, not for whoever chose the URL.
#[tokio::test]
async fn a_failing_webhooks_body_stays_out_of_events_and_status() {
    let client = client().await;
    operator().await;
    let server =
        HookServer::start(|_, _| Reply::status(500, "secret-ish-text")).expect("hook server");
    let namespace = test_namespace(&client, "webhook-body").await;
    let name = unique_name("webhook-body");
    let url = server.url("/sync");
    let controller = config_map_decorator(&name, json!({"sync": webhook(&url)}));
    apply(&client, &controller).await;
    apply(&client, &target(&namespace, "app", &name, "v1")).await;
    let note = event(
        &client,
        &namespace,
        "HookFailed",
        &format!("(webhook {url})"),
    )
    .await;
    assert_eq!(
        note,
        format!("hook sync of {name} (webhook {url}): answered HTTP 500")
    );
    assert!(!server.requests("/sync").is_empty(), "the hook was called");
    let status = wait_for(&client, &controller, "the failure in the status", |o| {
        o["status"]["failing"].as_i64().unwrap_or(0) >= 1
    })
    .await;
    assert!(
        !status.to_string().contains("secret-ish-text"),
        "{}",
        status["status"]
    );
}

#[tokio::test]
async fn a_webhook_over_https_is_trusted_through_its_ca_bundle() {
    let client = client().await;
    operator().await;
    let server = HookServer::start_tls(copier).expect("hook server");
    let namespace = test_namespace(&client, "webhook-https").await;
    let name = unique_name("webhook-https");
    let url = server.url("/sync");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    apply(
        &client,
        &config_map_decorator(&name, json!({"sync": webhook(&url)})),
    )
    .await;
    let app = target(&namespace, "app", &name, "v1");
    apply(&client, &app).await;
    // The system's roots do not know the server's CA.
    let note = event(
        &client,
        &namespace,
        "HookFailed",
        &format!("(webhook {url})"),
    )
    .await;
    assert!(
        note.ends_with(
            "): TLS: invalid peer certificate: UnknownIssuer (webhook.caBundle must hold the CA \
             that signed the server's certificate)"
        ),
        "{note}"
    );
    assert!(
        get(&client, &config_map(&namespace, "app-copy"))
            .await
            .is_none()
    );

    let ca = server.ca_pem().expect("a TLS server has a CA");
    apply(
        &client,
        &config_map_decorator(
            &name,
            json!({"sync": {"webhook": {"url": url, "caBundle": {"inline": ca}}}}),
        ),
    )
    .await;
    copier_converged(&client, &namespace, &app).await;
}

/// A StatefulSet asking for service-per-pod, labelled so only `controller` selects it.
fn stateful_set(namespace: &str, name: &str, controller: &str, replicas: i64) -> Value {
    let mut sts = service_per_pod_target(namespace, name, replicas, "80:8080,443:8443");
    sts["metadata"]["labels"] = json!({"test-controller": controller});
    sts
}

fn service_per_pod_controller(name: &str, hook: Value) -> Value {
    manifests::service_per_pod(name, json!({"sync": hook.clone(), "finalize": hook}))
}

fn service(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}})
}

/// A Service as its controller decided it: what the hook returned plus what the operator adds,
/// with the controller's own name (the only intended difference) and server fields left out.
fn decided(service: &Value, controller: &str) -> Value {
    let mut labels = service["metadata"]["labels"].clone();
    assert_eq!(labels[DECORATOR_LABEL], controller);
    labels[DECORATOR_LABEL] = json!("<controller>");
    let mut owner = service["metadata"]["ownerReferences"].clone();
    owner[0]["uid"] = json!("<uid>");
    json!({
        "name": service["metadata"]["name"],
        "labels": labels,
        "owner": owner,
        "selector": service["spec"]["selector"],
        "ports": service["spec"]["ports"],
    })
}

#[tokio::test]
async fn service_per_pod_as_a_webhook_makes_the_same_objects_as_the_script() {
    let client = client().await;
    operator().await;
    let server = HookServer::start(|_, request| match service_per_pod(request, "true") {
        Ok(response) => Reply::json(&response),
        Err(message) => Reply::status(500, message),
    })
    .expect("hook server");
    let flavours = [
        (
            "script",
            json!({"script": {"language": "rhai", "inline": SYNC_RHAI}}),
        ),
        ("webhook", webhook(&server.url("/sync"))),
    ];
    let mut seen = Vec::new();
    for (flavour, hook) in flavours {
        let namespace = test_namespace(&client, &format!("spp-{flavour}")).await;
        let name = unique_name(&format!("spp-{flavour}"));
        apply(&client, &service_per_pod_controller(&name, hook)).await;
        let sts = stateful_set(&namespace, "web", &name, 2);
        apply(&client, &sts).await;
        let mut services = Vec::new();
        for pod in ["web-0", "web-1"] {
            let created = wait_for(
                &client,
                &service(&namespace, pod),
                &format!("{flavour}: Service {pod}"),
                |_| true,
            )
            .await;
            services.push(decided(&created, &name));
        }
        let marked = wait_for(
            &client,
            &sts,
            &format!("{flavour}: the marker label"),
            |o| label(o, SERVICE_PER_POD_MARKER) == Some("true"),
        )
        .await;
        seen.push((
            services,
            marked["metadata"]["finalizers"].as_array().map(Vec::len),
        ));
        // Finalize through the same hook: Services gone, then the StatefulSet.
        api_for(&client, &sts)
            .delete("web", &Default::default())
            .await
            .unwrap();
        eventually(
            &format!("{flavour}: the StatefulSet deleted after finalize"),
            || async { get(&client, &sts).await.is_none().then_some(()) },
        )
        .await;
        assert!(get(&client, &service(&namespace, "web-0")).await.is_none());
    }
    assert_eq!(
        seen[0], seen[1],
        "the script and the webhook must decide the same objects"
    );
    assert_eq!(seen[0].0[1]["ports"][1]["targetPort"], 8443);
}

/// The example's own test cases (`scripts/service-per-pod/*.test.yaml`), run by `metascript
/// test` against a controller whose hooks are the webhook: the Rust port answers every case as
/// the script does, and the harness calls webhooks like scripts.
#[test]
fn metascript_test_runs_the_examples_cases_against_the_webhook() {
    let server = HookServer::start(|_, request| match service_per_pod(request, "true") {
        Ok(response) => Reply::json(&response),
        Err(message) => Reply::status(500, message),
    })
    .expect("hook server");
    let dir = tempfile::tempdir().unwrap();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/service-per-pod");
    let mut controller: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(example.join("controller.rhai.yaml")).unwrap(),
    )
    .unwrap();
    controller["spec"]["hooks"] =
        json!({"sync": webhook(&server.url("/sync")), "finalize": webhook(&server.url("/sync"))});
    std::fs::write(
        dir.path().join("controller.webhook.yaml"),
        serde_json::to_string(&controller).unwrap(),
    )
    .unwrap();
    for file in ["service-per-pod.test.yaml", "finalize.test.yaml"] {
        let mut cases: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(example.join(file)).unwrap()).unwrap();
        cases["controller"] = json!(["controller.webhook.yaml"]);
        cases.as_object_mut().unwrap().remove("scriptsDir");
        std::fs::write(
            dir.path().join(file),
            serde_json::to_string(&cases).unwrap(),
        )
        .unwrap();
    }
    let stdout = stdout_of(
        &metascript([OsStr::new("test"), dir.path().as_os_str()]),
        "metascript test against the webhook",
    );
    assert!(stdout.contains("12 passed, 0 failed"), "{stdout}");
    assert_eq!(server.requests("/sync").len(), 12);
}

/// The seed's Metacontroller example, as a team would have it deployed, pointing at `url`.
fn metacontroller_manifest(name: &str, url: &str) -> String {
    format!(
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: DecoratorController
metadata:
  name: {name}
spec:
  resources:
  - apiVersion: apps/v1
    resource: statefulsets
    labelSelector:
      matchLabels: {{test-controller: {name}}}
    annotationSelector:
      matchExpressions:
      - {{key: service-per-pod-label, operator: Exists}}
      - {{key: service-per-pod-ports, operator: Exists}}
  attachments:
  - apiVersion: v1
    resource: services
  hooks:
    sync:
      webhook:
        url: {url}
        timeout: 10s
    finalize:
      webhook:
        url: {url}
"#
    )
}

#[tokio::test]
async fn a_converted_metacontroller_manifest_adopts_the_attachments_it_finds() {
    let client = client().await;
    operator().await;
    let server = HookServer::start(|_, request| match service_per_pod(request, "true") {
        Ok(response) => Reply::json(&response),
        Err(message) => Reply::status(500, message),
    })
    .expect("hook server");
    let namespace = test_namespace(&client, "metacontroller").await;
    let name = unique_name("mc-spp");
    let metacontroller_finalizer = format!("metacontroller.io/decoratorcontroller-{name}");

    // What Metacontroller left: the StatefulSet with its finalizer, and a Service it attached
    // (controller reference and its annotation, no metascript label), now out of date.
    let mut sts = stateful_set(&namespace, "web", &name, 1);
    sts["metadata"]["finalizers"] = json!([metacontroller_finalizer]);
    apply(&client, &sts).await;
    let uid = get(&client, &sts).await.unwrap()["metadata"]["uid"].clone();
    let mut stale = service(&namespace, "web-0");
    stale["metadata"]["annotations"] = json!({"metacontroller.k8s.io/decorator-controller": name});
    stale["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    stale["spec"] = json!({"selector": {"statefulset.kubernetes.io/pod-name": "web-0"}, "ports": [{"name": "port-80", "port": 80, "targetPort": 9999}]});
    apply(&client, &stale).await;
    let stale_uid = get(&client, &stale).await.unwrap()["metadata"]["uid"].clone();

    // The user's path: convert the manifest and apply what it prints.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("service-per-pod.yaml");
    std::fs::write(
        &file,
        metacontroller_manifest(&name, &server.url("/sync-service-per-pod")),
    )
    .unwrap();
    let converted = stdout_of(
        &metascript([OsStr::new("convert"), OsStr::new("-f"), file.as_os_str()]),
        "metascript convert",
    );
    let documents: Vec<Value> = serde_saphyr::from_multiple(&converted).unwrap();
    let converted = documents
        .into_iter()
        .find(|d| !d.is_null())
        .expect("one controller");
    assert_eq!(converted["apiVersion"], "metascript.dev/v1alpha1");
    apply(&client, &converted).await;

    // The Service is taken over in place (same object), brought up to date, and marked as
    // metascript's; Metacontroller's annotation and finalizer are left alone.
    let adopted = wait_for(&client, &stale, "the Service adopted", |o| {
        label(o, DECORATOR_LABEL) == Some(name.as_str())
    })
    .await;
    assert_eq!(adopted["metadata"]["uid"], stale_uid);
    let owners = adopted["metadata"]["ownerReferences"].as_array().unwrap();
    assert_eq!(
        owners.len(),
        1,
        "one controller reference, merged by uid: {owners:?}"
    );
    assert_eq!(owners[0]["uid"], uid);
    assert_eq!(adopted["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(
        adopted["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"],
        name.as_str()
    );
    let finalizer = format!("metascript.dev/decorator-{name}");
    let marked = wait_for(&client, &sts, "the marker label and our finalizer", |o| {
        label(o, SERVICE_PER_POD_MARKER) == Some("true") && has_finalizer(o, &finalizer)
    })
    .await;
    assert!(has_finalizer(&marked, &metacontroller_finalizer));
    let web_1 = service(&namespace, "web-1");
    let mut scaled = stateful_set(&namespace, "web", &name, 2);
    // Still listing the finalizer this manager set, so applying does not drop it.
    scaled["metadata"]["finalizers"] = json!([metacontroller_finalizer]);
    apply(&client, &scaled).await;
    wait_for(&client, &web_1, "a Service for the new pod", |_| true).await;

    // Deleting the StatefulSet: metascript finalizes and removes only its own finalizer; the one
    // Metacontroller left holds the object until it is removed (docs/migrating.md).
    api_for(&client, &sts)
        .delete("web", &Default::default())
        .await
        .unwrap();
    wait_for(&client, &sts, "only Metacontroller's finalizer left", |o| {
        o["metadata"]["finalizers"] == json!([metacontroller_finalizer])
    })
    .await;
    assert!(get(&client, &stale).await.is_none() && get(&client, &web_1).await.is_none());
    api_for(&client, &sts)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("removing the leftover finalizer");
    eventually("the StatefulSet gone", || async {
        get(&client, &sts).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn map_and_tombstone_webhooks_map_inputs_and_keep_detached_outputs_while_asked() {
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("webhook-map"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let keep = Arc::new(Mutex::new(true));
    let keeping = keep.clone();
    let server = HookServer::start(move |path, request| match path {
        "/map" => {
            let input = &request["input"];
            let name = input["metadata"]["name"].as_str().unwrap_or_default();
            Reply::json(&json!({"outputs": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-copy")},
                "data": input["data"]
            }]}))
        }
        _ => {
            let kept: Vec<Value> = if *keeping.lock() {
                request["outputs"]
                    .as_object()
                    .into_iter()
                    .flat_map(|types| types.values())
                    .filter_map(Value::as_object)
                    .flat_map(|outputs| outputs.values().cloned())
                    .collect()
            } else {
                Vec::new()
            };
            Reply::json(&json!({"outputs": kept}))
        }
    })
    .expect("hook server");
    let namespace = test_namespace(&cluster.client, "webhook-map").await;
    let name = unique_name("webhook-map");
    cluster
        .apply(&json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
            "metadata": {"name": name},
            "spec": {
                "parentResource": {"apiVersion": format!("{group}/v1"), "resource": "configtemplates"},
                "inputResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "outputResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "resyncPeriodSeconds": 1,
                "hooks": {"map": webhook(&server.url("/map")), "tombstone": webhook(&server.url("/tombstone"))}
            }
        }))
        .await;
    let template = json!({
        "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
        "metadata": {"name": "copies", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"copy": "yes"}}}
    });
    cluster.apply(&template).await;
    let source = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "source", "namespace": namespace, "labels": {"copy": "yes"}},
        "data": {"a": "1"}
    });
    cluster.apply(&source).await;
    let copy = cluster
        .wait_for(&config_map(&namespace, "source-copy"), "the output", |_| {
            true
        })
        .await;
    assert_eq!(copy["data"]["a"], "1");
    assert_eq!(label(&copy, "metascript.dev/map"), Some(name.as_str()));
    let map_key = label(&copy, "metascript.dev/map-key")
        .expect("the map key label")
        .to_string();
    let mapped = &server.requests("/map")[0];
    assert_eq!(mapped["parent"]["metadata"]["name"], "copies");
    assert_eq!(mapped["input"]["metadata"]["name"], "source");
    assert_eq!(mapped["mapKey"], map_key.as_str());
    assert_eq!(mapped["outputs"], json!({"ConfigMap.v1": {}}));

    // The input goes: its output is detached, and kept for as long as the tombstone hook says.
    cluster.delete(&source).await;
    eventually("the tombstone hook asked twice", || async {
        (server.requests("/tombstone").len() >= 2).then_some(())
    })
    .await;
    let asked = &server.requests("/tombstone")[0];
    assert_eq!(asked["mapKey"], map_key.as_str());
    assert!(asked.get("input").is_none());
    assert_eq!(
        asked["outputs"]["ConfigMap.v1"]["source-copy"]["data"]["a"],
        "1"
    );
    assert!(
        cluster
            .get(&config_map(&namespace, "source-copy"))
            .await
            .is_some(),
        "kept while the tombstone hook keeps it"
    );
    *keep.lock() = false;
    cluster
        .wait_gone(
            &config_map(&namespace, "source-copy"),
            "the output deleted once let go",
        )
        .await;
    assert!(hook_calls("map", &name, "map").await >= 1);
    assert!(hook_calls("map", &name, "tombstone").await >= 2);
}
