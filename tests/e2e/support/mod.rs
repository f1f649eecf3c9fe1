//! Shared support for integration tests that need a Kubernetes API.
//!
//! The test binary starts one control plane, on first use, and its tests isolate themselves by
//! namespace ([`test_namespace`]) and, for cluster-scoped objects, by name ([`unique_name`]).
//! Starting a plane per test would multiply a ~3 s startup and ~400 MB of memory by the test count.
//! That plane is lean (nothing runs Pods); tests whose subject is workloads that run use the
//! second shared plane, a cluster, in [`workloads`].
//!
//! If the plane cannot start, every test using it fails with the reason and how to build the
//! binaries; tests are never skipped, so CI cannot pass without having talked to a real API.

pub mod audit;
pub mod cli;
pub mod cluster;
pub mod manifests;
pub mod operator;
pub mod process;
pub mod tenants;
pub mod transform;
pub mod watch;
pub mod workloads;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use kube::config::Kubeconfig;
use metascript::testing::{ControlPlane, Flavor};

/// Upper bound for anything a test waits on (GC, namespace teardown, watch events). Far above
/// the normal sub-second latencies, to stay reliable on a loaded 2-core CI machine.
pub const WAIT: Duration = Duration::from_secs(60);

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// The control plane shared by every test in this binary, started on first call.
///
/// Panics (failing the test) with instructions if it cannot start.
pub async fn plane() -> &'static ControlPlane {
    // Blocking here is fine: each #[tokio::test] owns its runtime and has nothing else to run,
    // and concurrent first callers must all wait for the one start anyway.
    match PLANE.get_or_init(|| start_shared(Flavor::Lean, stop_shared)) {
        Ok(plane) => plane,
        Err(message) => panic!("{message}"),
    }
}

/// An admin client for the shared plane, bound to the calling test's runtime.
///
/// kube's connection pool lives on the runtime that created it, and every #[tokio::test] has its
/// own runtime, so clients are made per test from the shared kubeconfig rather than shared.
pub async fn client() -> kube::Client {
    plane()
        .await
        .client()
        .await
        .expect("building a client for the shared control plane")
}

/// The shared plane's admin kubeconfig, for tests that need to derive other identities.
pub async fn kubeconfig() -> Kubeconfig {
    plane().await.kubeconfig()
}

/// A name unique within this test binary's plane, `<prefix>-<n>`, for cluster-scoped objects
/// (namespaces, CRDs, cluster roles) that concurrent tests would otherwise fight over.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Creates a fresh namespace for one test and returns its name.
///
/// Namespaces are not deleted afterwards: the plane is thrown away with the test binary, and
/// leaving them keeps failed tests' objects inspectable with METASCRIPT_CONTROL_PLANE_KEEP=1.
pub async fn test_namespace(client: &kube::Client, test: &str) -> String {
    let name = unique_name(&format!("t-{}", sanitize(test)));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some([("metascript.test/test".to_owned(), sanitize(test))].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating test namespace {name}: {e}"));
    name
}

/// Polls `check` every 100 ms until it returns `Some`, panicking after [`WAIT`] with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Lowercases and maps anything outside `[a-z0-9-]` to `-`, and keeps names short enough that
/// `unique_name` still yields a valid 63-character DNS label.
fn sanitize(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(40)
        .collect();
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// Starts a plane that lives as long as the test binary; `on_exit` must stop it.
fn start_shared(flavor: Flavor, on_exit: extern "C" fn()) -> Result<ControlPlane, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    // The children are SIGKILLed when the thread that spawned them exits (PR_SET_PDEATHSIG), so
    // they are started from a thread that lives, parked, until the process exits. That also makes
    // them die with the test binary however it ends.
    std::thread::Builder::new()
        .name("control-plane".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("building the control plane's runtime");
            let _ = tx.send(runtime.block_on(ControlPlane::start_with(flavor)));
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| format!("spawning the control-plane thread: {e}"))?;
    let plane = rx
        .recv()
        .map_err(|_| "the control-plane thread died while starting the plane".to_owned())?
        .map_err(|e| {
            format!(
                "the shared Kubernetes control plane could not start: {e}\n\n\
                 Integration tests need real etcd, kube-apiserver, kube-controller-manager, \
                 kube-scheduler and kwok binaries: run `hack/control-plane/build.sh` (cached \
                 after the first build), or set METASCRIPT_CONTROL_PLANE_BIN to a directory that \
                 holds them."
            )
        })?;
    // Statics are never dropped, so without this the plane's temp dir would outlive every test
    // run. `atexit` handlers run when libtest's main returns or calls `process::exit`; a binary
    // killed by a signal leaves the directory for the next plane's stale-directory sweep.
    // SAFETY: `on_exit` is a plain `extern "C"` function that does not unwind.
    if unsafe { libc::atexit(on_exit) } != 0 {
        tracing::warn!("could not register the control plane's exit handler");
    }
    Ok(plane)
}

extern "C" fn stop_shared() {
    if let Some(Ok(plane)) = PLANE.get() {
        plane.stop();
    }
}
