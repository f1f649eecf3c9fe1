//! `metascript run` as a user starts it: against the real plane with a kubeconfig file, serving
//! metrics and probes, syncing a controller, and stopping cleanly on SIGTERM.

use crate::support::cli::{metascript, stdout_of};
use crate::support::operator::{OWN_OPERATOR_LABEL, apply, wait_for};
use crate::support::process::OperatorProcess;
use crate::support::{client, eventually, test_namespace, unique_name};
use serde_json::json;
use std::ffi::OsStr;

#[tokio::test]
async fn run_serves_probes_and_metrics_syncs_and_stops_on_sigterm() {
    let client = client().await;
    metascript::testing::install_crds(&client)
        .await
        .expect("installing the CRDs");
    let name = unique_name("cli-run");
    // The shared in-process operator leaves this controller to the process under test.
    let mut operator = OperatorProcess::start(&name, &[]).await;
    eventually("/readyz answers 200", || async {
        operator
            .get("/readyz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    assert_eq!(operator.get("/healthz").map(|(code, _)| code), Some(200));

    let namespace = test_namespace(&client, "cli-run").await;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return { labels = { seen = 'yes' } }"}}}
        }
    }))
    .await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "namespace": namespace, "labels": {"decorate": name}}});
    apply(&client, &target).await;
    wait_for(
        &client,
        &target,
        "the label from the operator process",
        |o| o["metadata"]["labels"]["seen"] == "yes",
    )
    .await;

    // The controller's readiness is reported with its status, at the next status interval.
    let ready =
        format!("metascript_controller_ready{{kind=\"decorator\",controller=\"{name}\"}} 1");
    let metrics = eventually("the controller's readiness in /metrics", || async {
        let (code, metrics) = operator.get("/metrics")?;
        (code == 200 && metrics.contains(&ready)).then_some(metrics)
    })
    .await;
    for metric in [
        "metascript_api_writes_total",
        "metascript_syncs_total",
        "metascript_sync_duration_seconds_bucket",
        "metascript_queue_depth",
        "metascript_leader 1",
        "metascript_build_info{",
        &format!(
            "metascript_hook_duration_seconds_count{{kind=\"decorator\",controller=\"{name}\",hook=\"sync\"}}"
        ),
    ] {
        assert!(
            metrics.contains(metric),
            "{metric} missing from:\n{metrics}"
        );
    }
    let sample =
        format!("metascript_api_writes_total{{kind=\"decorator\",controller=\"{name}\"}} ");
    let writes: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&sample))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {sample:?} sample in:\n{metrics}"));
    assert!(writes >= 1.0, "the label patch was counted");

    operator.signal(libc::SIGTERM);
    let status = operator.exit_status().await;
    assert!(status.success(), "metascript run exited with {status}");
}

#[test]
fn run_rejects_a_bad_metrics_address_before_touching_the_cluster() {
    let output = metascript([
        "run",
        "--kubeconfig",
        "/nonexistent",
        "--metrics-addr",
        "not-an-address",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--metrics-addr \"not-an-address\": expected HOST:PORT or none"),
        "{stderr}"
    );
}

#[test]
fn version_names_the_commit_and_both_engines_and_completions_are_printed() {
    let version = stdout_of(&metascript(["--version"]), "metascript --version");
    for part in ["metascript 0.", "(commit ", ", rhai 1.", ", luau 0."] {
        assert!(version.contains(part), "{part:?} in {version}");
    }
    assert!(!version.contains("unknown"), "{version}");
    let script = stdout_of(
        &metascript(["completions", "bash"]),
        "metascript completions bash",
    );
    assert!(
        script.contains("_metascript") && script.contains("validate"),
        "{script}"
    );
}

/// `metascript run --record DIR` writes each hook call as a test case that `metascript test`
/// replays unchanged, with Secrets redacted.
#[tokio::test]
async fn recorded_calls_replay_as_tests_with_secrets_redacted() {
    let client = client().await;
    crate::support::operator::operator().await; // installs the CRDs
    let name = unique_name("record");
    let dir = tempfile::tempdir().expect("a temp dir");
    let record = dir.path().display().to_string();
    let _operator = OperatorProcess::start(&name, &["--record", &record]).await;
    let namespace = test_namespace(&client, "record").await;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "secrets", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return { labels = { seen = 'yes', at = tostring(now() ~= nil) } }"}}}
        }
    }))
    .await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": namespace, "labels": {"decorate": name}}, "data": {"password": "aHVudGVyMg=="}});
    apply(&client, &secret).await;
    wait_for(
        &client,
        &secret,
        "the label from the operator process",
        |o| o["metadata"]["labels"]["seen"] == "yes",
    )
    .await;

    let controller_dir = dir.path().join(format!("decorator-{name}"));
    let recorded = eventually("a recorded test file", || async {
        std::fs::read_dir(&controller_dir)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.to_string_lossy().ends_with(".test.yaml"))
    })
    .await;
    let text = std::fs::read_to_string(&recorded).unwrap();
    assert!(text.contains(metascript::reads::REDACTED), "{text}");
    assert!(!text.contains("aHVudGVyMg=="), "the secret leaked:\n{text}");
    let stdout = stdout_of(
        &metascript([OsStr::new("test"), dir.path().as_os_str()]),
        "metascript test on the recorded cases",
    );
    assert!(stdout.trim_end().ends_with("passed, 0 failed"), "{stdout}");
    assert!(!stdout.contains("0 passed"), "{stdout}");
}

/// `metascript explain` on a decorated object and on its attachment.
#[tokio::test]
async fn explain_names_the_controller_the_script_revision_and_the_dry_run() {
    let client = client().await;
    crate::support::operator::operator().await;
    let namespace = test_namespace(&client, "explain").await;
    let name = unique_name("explain");
    let hook = r#"
        return {
            labels = { seen = 'yes' },
            attachments = { { apiVersion = 'v1', kind = 'Service', metadata = { name = name(request.object) .. '-svc' }, spec = { ports = { { port = 80 } } } } },
        }
    "#;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "services"}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": hook}}}
        }
    }))
    .await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web", "namespace": namespace, "labels": {"decorate": name}}});
    apply(&client, &target).await;
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-svc", "namespace": namespace}});
    wait_for(&client, &service, "the attachment", |_| true).await;
    wait_for(&client, &target, "the label", |o| {
        o["metadata"]["labels"]["seen"] == "yes"
    })
    .await;
    let kubeconfig = crate::support::plane()
        .await
        .kubeconfig_path()
        .to_path_buf();
    let explain = |object: &str| {
        let args = ["explain", object, "-n", &namespace, "--kubeconfig"];
        let args = args.iter().map(OsStr::new).chain([kubeconfig.as_os_str()]);
        stdout_of(&metascript(args), "metascript explain")
    };
    let text = explain("configmap/web");
    for part in [
        &format!("DecoratorController/{name}:"),
        "target, phase Sync",
        "sync hook request:",
        "  response:\n",
        "the operator would now write nothing",
        &format!("metascript.dev/decorator-{name}"),
    ] {
        assert!(text.contains(part), "{part:?} in:\n{text}");
    }
    let text = explain("services/web-svc");
    for part in [
        "Written by metascript:",
        &format!("controller decorator/{name}, hook sync"),
        "that is the script in the cluster now",
        "computed from uid",
        // The label write came after the Service was computed, so the target moved on.
        &format!("(ConfigMap.v1 {namespace}/web has changed since"),
    ] {
        assert!(text.contains(part), "{part:?} in:\n{text}");
    }

    // Right after an edit reaches the object, the edited script is named as the one in the
    // cluster whether or not the operator's status (written every status interval) says so yet.
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "attachments": [{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": hook.replace("port = 80", "port = 81")}}}
        }
    }))
    .await;
    wait_for(&client, &service, "the edited attachment", |o| {
        o["spec"]["ports"][0]["port"] == 81
    })
    .await;
    let text = explain("services/web-svc");
    assert!(
        text.contains("that is the script in the cluster now"),
        "the edited script:\n{text}"
    );
}
