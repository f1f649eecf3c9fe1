//! `metascript run` as a separate process against the shared plane, the way users and
//! Deployments start it, serving only the controllers labelled for it.

use super::operator::{OWN_OPERATOR_LABEL, install_crds};
use super::plane;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `metascript run`; killed (and reaped) when dropped, so a failing test leaves
/// nothing behind.
pub struct OperatorProcess {
    child: Child,
    /// Where it serves /metrics, /healthz and /readyz.
    pub port: u16,
}

impl OperatorProcess {
    /// Starts `metascript run` serving the controllers labelled `OWN_OPERATOR_LABEL=<instance>`,
    /// with `extra` arguments. The CRDs are installed first: without them it exits, and a test
    /// run alone (or first) would wait for it in vain.
    pub async fn start(instance: &str, extra: &[&str]) -> OperatorProcess {
        let kubeconfig = plane().await.kubeconfig_path().to_path_buf();
        OperatorProcess::start_with(instance, &kubeconfig, extra).await
    }

    /// [`OperatorProcess::start`] with a kubeconfig of its own (another identity).
    pub async fn start_with(
        instance: &str,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> OperatorProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_metascript"));
        command.stderr(Stdio::inherit());
        OperatorProcess::spawn(command, instance, kubeconfig, extra).await
    }

    /// [`OperatorProcess::start`] with `env` set and its log (stderr) written to `log`.
    pub async fn start_logged(
        instance: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        log: std::fs::File,
    ) -> OperatorProcess {
        let kubeconfig = plane().await.kubeconfig_path().to_path_buf();
        let mut command = Command::new(env!("CARGO_BIN_EXE_metascript"));
        command.envs(env.iter().copied()).stderr(log);
        OperatorProcess::spawn(command, instance, &kubeconfig, extra).await
    }

    async fn spawn(
        mut command: Command,
        instance: &str,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> OperatorProcess {
        install_crds(&super::client().await)
            .await
            .expect("installing the CRDs");
        let port = free_port();
        let child = command
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args([
                "--controller-selector",
                &format!("{OWN_OPERATOR_LABEL}={instance}"),
            ])
            .args(["--log", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting metascript run");
        OperatorProcess { child, port }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Its peak resident memory (VmHWM), in MiB.
    pub fn peak_rss_mib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("its status");
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kib / 1024
    }

    /// Sends a signal, as a kubelet (SIGTERM) or a crash (SIGKILL) would.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on a child this test owns and has not reaped yet.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// How the process exited, if it has.
    pub fn try_exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .try_wait()
            .expect("asking whether the operator exited")
    }

    /// Waits for the process to exit (at most `super::WAIT`).
    pub async fn exit_status(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + super::WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the operator") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "metascript run (pid {}) did not exit",
                self.pid()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A plain HTTP/1.0 GET to its endpoint: (status code, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    /// The value of one sample of its metrics (`name` with its labels, as exposed), when the
    /// endpoint answers; a sample not exposed (yet) is 0.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        metric(self.port, sample)
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a replica serving the controllers labelled for `instance`, electing through the lease
/// `lease` in `namespace` (`lease_seconds` long), with `extra` arguments; returns once it is
/// ready.
pub async fn replica(
    instance: &str,
    namespace: &str,
    lease: &str,
    lease_seconds: u64,
    extra: &[&str],
) -> OperatorProcess {
    let mode = [
        "--leader-election",
        "--leader-election-namespace",
        namespace,
        "--leader-election-id",
        lease,
    ];
    ready(instance, &mode, lease_seconds, extra).await
}

/// Starts a sharded replica (`--shards auto`) of the group `group`, its Lease in `namespace`
/// (`lease_seconds` long), with `extra` arguments; returns once it is ready.
pub async fn sharded_replica(
    instance: &str,
    namespace: &str,
    group: &str,
    lease_seconds: u64,
    extra: &[&str],
) -> OperatorProcess {
    let mode = [
        "--shards",
        "auto",
        "--shard-namespace",
        namespace,
        "--shard-group",
        group,
    ];
    ready(instance, &mode, lease_seconds, extra).await
}

/// Starts a replica with the arguments of its mode, its lease's duration and `extra`, and waits
/// until its `/readyz` answers 200.
async fn ready(
    instance: &str,
    mode: &[&str],
    lease_seconds: u64,
    extra: &[&str],
) -> OperatorProcess {
    let duration = format!("{lease_seconds}s");
    let mut args = mode.to_vec();
    args.extend(["--lease-duration", &duration]);
    args.extend_from_slice(extra);
    let replica = OperatorProcess::start(instance, &args).await;
    super::eventually("a replica's /readyz answers 200", || async {
        replica
            .get("/readyz")
            .filter(|(code, _)| *code == 200)
            .map(|_| ())
    })
    .await;
    replica
}

/// Whether a replica leads (`None`: its metrics do not answer).
pub fn leads(replica: &OperatorProcess) -> Option<bool> {
    replica
        .metric("metascript_leader")
        .map(|value| value == 1.0)
}

/// A plain HTTP/1.0 GET to a `metascript run` endpoint on a local port: (status code, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
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

/// The value of one sample of the metrics served on a local port (`name` with its labels, as
/// exposed), when the endpoint answers; a sample not exposed (yet) is 0.
pub fn metric(port: u16, sample: &str) -> Option<f64> {
    let (_, body) = http_get(port, "/metrics").filter(|(code, _)| *code == 200)?;
    let prefix = format!("{sample} ");
    Some(
        body.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0.0),
    )
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A ConfigMap with `labels`, for a controller of a test's own operator process to select.
pub fn labelled_config_map(
    namespace: &str,
    name: &str,
    labels: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels}
    })
}

/// A DecoratorController of the operator process `instance`, decorating the ConfigMaps with
/// the labels `selects` with the hook `sync`.
pub fn own_decorator(
    instance: &str,
    name: &str,
    selects: serde_json::Value,
    sync: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: instance}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": selects}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": sync}
        }
    })
}

/// Starts a good controller in the operator process `instance`, beside whatever else it runs,
/// and waits until it has labelled 20 new ConfigMaps in `namespace`: how long that took.
pub async fn good_neighbour_converges(
    client: &kube::Client,
    instance: &str,
    namespace: &str,
) -> Duration {
    use super::operator::{apply, wait_for};
    let good = format!("{instance}-good");
    let sync = serde_json::json!({"script": {
        "language": "rhai", "inline": r#"#{ labels: #{ "good": "yes" } }"#
    }});
    let selects = serde_json::json!({"selects": good});
    apply(
        client,
        &own_decorator(instance, &good, selects.clone(), sync),
    )
    .await;
    let started = std::time::Instant::now();
    for target in 0..20 {
        let name = format!("good-{target}");
        apply(
            client,
            &labelled_config_map(namespace, &name, selects.clone()),
        )
        .await;
    }
    for target in 0..20 {
        let object =
            labelled_config_map(namespace, &format!("good-{target}"), serde_json::json!({}));
        wait_for(client, &object, "the good controller's label", |o| {
            o["metadata"]["labels"]["good"] == "yes"
        })
        .await;
    }
    started.elapsed()
}
