//! `metascript run` (or Metacontroller, for a comparison) as a process of its own on the
//! benchmark's plane, so its CPU and memory are its own: started with the arguments a
//! benchmark gives, read through `/metrics` and `/proc`, killed when dropped.

use super::{cpu_seconds, memory};
use metascript::testing::ControlPlane;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where `cargo build --release --bin metascript` leaves the binary the processes run.
pub fn release_bin() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/release/metascript"
    ))
}

/// `bin`, when it is there to run.
pub fn existing_bin(bin: PathBuf) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(
        bin.is_file(),
        "{} does not exist: cargo build --release --bin metascript first (or give --bin)",
        bin.display()
    );
    Ok(bin)
}

/// A comma-separated list of replica counts (`1,2,4`; empty for none).
pub fn replica_counts(text: &str) -> anyhow::Result<Vec<usize>> {
    Ok(text
        .split(',')
        .filter(|count| !count.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()?)
}

pub struct OperatorProcess {
    pub child: Child,
    port: u16,
}

impl OperatorProcess {
    /// `bin run` against `plane`, serving metrics on a free port, with `args` after those.
    pub fn start(bin: &Path, plane: &ControlPlane, args: &[String]) -> anyhow::Result<Self> {
        Self::spawn(bin, |command, metrics| {
            command
                .args(["run", "--kubeconfig"])
                .arg(plane.kubeconfig_path())
                .args(["--metrics-addr", metrics])
                .args(args);
        })
    }

    /// A Metacontroller binary (built by the user from its source) against `plane`, with
    /// `workers` sync workers and the client rate the comparisons tune it to (qps 150, burst
    /// 300), its probes and metrics on loopback.
    pub fn metacontroller(
        bin: &Path,
        plane: &ControlPlane,
        workers: usize,
    ) -> anyhow::Result<Self> {
        let probes = free_port()?;
        Self::spawn(bin, |command, metrics| {
            command
                .arg("--kubeconfig")
                .arg(plane.kubeconfig_path())
                .args(["--metrics-address", metrics])
                .args([
                    "--health-probe-bind-address",
                    &format!("127.0.0.1:{probes}"),
                ])
                .args(["--pprof-address", "0", "--zap-log-level", "error"])
                .args(["--workers", &workers.to_string()])
                .args(["--client-go-qps", "150", "--client-go-burst", "300"]);
        })
    }

    /// Runs `bin` with the arguments `arguments` adds, given the metrics address to serve.
    fn spawn(bin: &Path, arguments: impl FnOnce(&mut Command, &str)) -> anyhow::Result<Self> {
        let port = free_port()?;
        let mut command = Command::new(bin);
        arguments(&mut command, &format!("127.0.0.1:{port}"));
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(OperatorProcess { child, port })
    }

    pub fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// One sample of its metrics (a sample not exposed yet is 0); `None` while it does not
    /// answer.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let prefix = format!("{sample} ");
        Some(
            response
                .lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0.0),
        )
    }

    /// A decorator's sample of the metric `name` (`syncs_total`, ...); NaN while unanswered.
    pub fn controller_metric(&self, name: &str, controller: &str) -> f64 {
        let sample = format!("metascript_{name}{{kind=\"decorator\",controller=\"{controller}\"}}");
        self.metric(&sample).unwrap_or(f64::NAN)
    }

    pub fn cpu(&self) -> f64 {
        cpu_seconds(&self.pid()).unwrap_or(f64::NAN)
    }

    /// Resident and peak memory, MiB.
    pub fn memory(&self) -> (f64, f64) {
        memory(&self.pid()).map_or((f64::NAN, f64::NAN), |(peak, now)| (now, peak))
    }

    /// SIGTERM, and waits for it to exit.
    pub fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: kill(2) on a child this process owns and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `check` every 50 ms until it holds; fails after `timeout` naming `what`.
pub async fn until(
    what: &str,
    timeout: Duration,
    check: impl Fn() -> bool,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + timeout;
    while !check() {
        anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(Instant::now())
}
