//! `hack/run-local.sh`, the README's "run the operator" on a machine without a cluster: it
//! starts a control plane of its own with the CRDs installed, says where its kubeconfig is,
//! runs `metascript run` against it (a controller applied there is served), prints commands that
//! run an example as printed, and on SIGTERM stops both and removes its files.

use crate::install::kubectl;
use crate::support::WAIT;
use crate::support::operator::{apply, wait_for, wait_for_condition};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// The script's process group, stopped (and reaped) when dropped, so a failing test leaves no
/// plane behind.
struct RunLocal(Child);

impl Drop for RunLocal {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group of a child this test owns.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn run_local_starts_a_plane_runs_the_operator_and_cleans_up() {
    let root = env!("CARGO_MANIFEST_DIR");
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_metascript"))
        .parent()
        .expect("the target directory");
    let mut child = Command::new("bash")
        .arg(format!("{root}/hack/run-local.sh"))
        .args(["--metrics-addr", "none", "--log", "warn"])
        // The binaries of this build: `hack/test.sh` builds the control-plane example as a
        // program before the tests (a cargo build from here would wait on the lock `cargo
        // test` holds). A lean plane, no kubectl.
        .env("METASCRIPT_BIN_DIR", bin_dir)
        .env("METASCRIPT_BUILD_KUBECTL", "0")
        .env("METASCRIPT_PLANE_ARGS", "--lean")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .expect("starting hack/run-local.sh");
    let stdout = child.stdout.take().expect("its stdout");
    let run = RunLocal(child);
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // The first build of the control-plane binaries may be cold; a warm start takes seconds.
    let kubeconfig = loop {
        let line = received
            .recv_timeout(WAIT * 6)
            .expect("hack/run-local.sh printed `export KUBECONFIG=…`");
        if let Some(path) = line.trim().strip_prefix("export KUBECONFIG=") {
            break PathBuf::from(path);
        }
    };
    // The commands it prints for running an example, up to the blank line that ends them.
    let mut commands = Vec::new();
    loop {
        let line = received
            .recv_timeout(WAIT)
            .expect("hack/run-local.sh printed how to run an example");
        match line.trim() {
            "" if !commands.is_empty() => break,
            command if command.starts_with("kubectl ") => commands.push(command.to_string()),
            _ => {}
        }
    }
    let config = Kubeconfig::read_from(&kubeconfig).expect("the kubeconfig it printed");
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .expect("a config from it");
    let client = kube::Client::try_from(config).expect("a client of the local plane");

    // The CRDs are there and the operator serves what is applied.
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "run-local"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": "yes"}}}],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{ labels: #{ seen: \"yes\" } }"}}}
        }
    }))
    .await;
    let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "target", "namespace": "default", "labels": {"decorate": "yes"}}});
    apply(&client, &target).await;
    wait_for(&client, &target, "the operator's label", |o| {
        o["metadata"]["labels"]["seen"] == "yes"
    })
    .await;

    // The printed commands work as printed (with the kubectl the tests use on the PATH), and
    // the example they apply loads.
    let kubectl_dir = kubectl()
        .parent()
        .expect("kubectl's directory")
        .to_path_buf();
    let path = format!(
        "{}:{}",
        kubectl_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for command in &commands {
        let output = Command::new("bash")
            .args(["-c", command])
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("running a printed command");
        assert!(
            output.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let example = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "service-per-pod"}});
    wait_for_condition(&client, &example, "Ready", "True").await;
    // SIGTERM, as Ctrl-C or a service manager would stop it: everything goes.
    let mut run = run;
    // SAFETY: kill(2) on a child this test owns and has not reaped.
    unsafe { libc::kill(run.0.id() as i32, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = run.0.try_wait().expect("waiting for hack/run-local.sh") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hack/run-local.sh did not stop on SIGTERM"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        status.code(),
        Some(143),
        "exit status of a SIGTERMed script"
    );
    let work = kubeconfig.parent().expect("the work directory");
    assert!(!work.exists(), "{} was removed", work.display());
    assert!(
        client.apiserver_version().await.is_err(),
        "the local plane's apiserver stopped"
    );
}
