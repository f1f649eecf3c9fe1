//! `metascript run` as a user starts it: against the real plane with a kubeconfig file, serving
//! metrics and probes, syncing a controller, and stopping cleanly on SIGTERM.

use crate::support::operator::{OWN_OPERATOR_LABEL, apply, wait_for};
use crate::support::{client, eventually, plane, test_namespace, unique_name};
use serde_json::json;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Kills the operator process if the test fails before stopping it, so nothing is left running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.0 GET: (status code, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

#[tokio::test]
async fn run_serves_probes_and_metrics_syncs_and_stops_on_sigterm() {
    let client = client().await;
    metascript::testing::install_crds(&client)
        .await
        .expect("installing the CRDs");
    let kubeconfig = plane().await.kubeconfig_path().to_path_buf();
    let port = free_port();
    let name = unique_name("cli-run");
    // The shared in-process operator leaves this controller to the process under test.
    let selector = format!("{OWN_OPERATOR_LABEL}={name}");
    let operator = Command::new(env!("CARGO_BIN_EXE_metascript"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .args([
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--controller-selector",
            &selector,
            "--log",
            "warn",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting metascript run");
    let mut operator = KillOnDrop(operator);

    eventually("/readyz answers 200", || async {
        get(port, "/readyz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    assert_eq!(get(port, "/healthz").map(|(code, _)| code), Some(200));

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

    let (code, metrics) = get(port, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200);
    for metric in [
        "metascript_api_writes_total",
        "metascript_syncs_total",
        "metascript_sync_duration_seconds_bucket",
        "metascript_queue_depth",
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

    // SAFETY: kill(2) on a child we own, to send the signal a kubelet would.
    unsafe { libc::kill(operator.0.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + crate::support::WAIT;
    let status = loop {
        if let Some(status) = operator.0.try_wait().expect("waiting for the operator") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "metascript run ignored SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "metascript run exited with {status}");
}

#[test]
fn run_rejects_a_bad_metrics_address_before_touching_the_cluster() {
    let output = Command::new(env!("CARGO_BIN_EXE_metascript"))
        .args([
            "run",
            "--kubeconfig",
            "/nonexistent",
            "--metrics-addr",
            "not-an-address",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--metrics-addr \"not-an-address\": expected HOST:PORT or none"),
        "{stderr}"
    );
}
