//! A disposable Kubernetes control plane on loopback.
//!
//! Mocks would hide exactly the behaviour the operator depends on (watches, server-side apply,
//! owner references and garbage collection, namespace teardown, RBAC), so tests run against real
//! etcd, kube-apiserver and kube-controller-manager processes; a [`Flavor::Cluster`] plane adds
//! kube-scheduler and kwok, whose simulated Nodes run the Pods of real workloads. Each
//! [`ControlPlane`] gets free loopback ports, a fresh private directory, and certificates
//! generated on the spot; dropping it kills the processes and removes the directory.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Read as _, Seek as _, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kube::config::{KubeConfigOptions, Kubeconfig};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::nodes;

/// Environment variable naming the directory that holds `etcd`, `kube-apiserver`,
/// `kube-controller-manager`, `kube-scheduler` and `kwok`; without it [`default_bin_dir`] is used.
pub const BIN_DIR_ENV: &str = "METASCRIPT_CONTROL_PLANE_BIN";

/// Setting this to `1` keeps the plane's directory (logs, certificates, etcd data) after drop.
const KEEP_DIR_ENV: &str = "METASCRIPT_CONTROL_PLANE_KEEP";

/// Setting this to a list of CPUs (`0`, `0,2-3`) runs the plane's processes on those CPUs only.
/// With the benchmark under `taskset` on the others, the operator takes no CPU from the API
/// server, as on a cluster, where it runs in a pod of its own (docs/performance.md).
const CPUS_ENV: &str = "METASCRIPT_PLANE_CPUS";

/// Must match `hack/control-plane/build.sh`. kwok's version is not part of it: build.sh adds
/// a missing kwok to an existing directory, so a cache from before kwok stays usable.
const CACHE_KEY: &str = "k8s-v1.36.3-etcd-v3.6.16";

/// Temp directories are named `<prefix><owner pid>-<nanos>` so that a later start can sweep the
/// ones whose owner died without cleaning up (a SIGKILLed test binary never runs destructors).
const DIR_PREFIX: &str = "metascript-cp-";

/// Generous, because CI machines are shared with cargo; a healthy start takes a few seconds.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Ports are picked by binding to port 0 and releasing the socket, so another process can grab
/// one before our child binds it. Such a collision is retried with fresh ports.
const START_ATTEMPTS: usize = 3;

/// A /16, not a /24: every Service gets a cluster IP, and benchmarks create thousands of them
/// (a /24 runs out after 254, and the apiserver then fails each create with "range is full").
const SERVICE_CIDR: &str = "10.0.0.0/16";
/// The first address of [`SERVICE_CIDR`], which the apiserver gives to `kubernetes.default`.
const SERVICE_IP: &str = "10.0.0.1";
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

const LOG_TAIL_LINES: usize = 40;

/// Client rate limits of the controller-manager and the scheduler on a [`Flavor::Cluster`]
/// plane. Their defaults (20 and 50 requests per second) are sized for sharing a production
/// apiserver; here they would make a thousand Pods take a minute to create and schedule, and
/// the figures of a benchmark would measure the rate limiter.
const CLUSTER_API_QPS: &str = "1000";
const CLUSTER_API_BURST: &str = "2000";

/// What a plane runs, and so what it costs to start and to keep.
///
/// Both run etcd and kube-apiserver; they differ in what acts on the objects stored there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// kube-controller-manager with only the garbage collector and namespace controllers: owner
    /// references, cascading deletion and namespace teardown behave as in a cluster, and nothing
    /// else moves. A StatefulSet never gets a Pod. The quickest to start and the lightest
    /// (`hack/control-plane/README.md` has the figures); enough for anything that does not need
    /// workloads to run.
    Lean,
    /// A cluster without kubelets: every kube-controller-manager controller, kube-scheduler, and
    /// kwok simulating `nodes` Nodes (see [`nodes`](super::nodes)). StatefulSets, Deployments,
    /// ReplicaSets, DaemonSets and Jobs get Pods that are scheduled, Running and Ready at once
    /// (a Job's Pods then Succeed and the Job completes); Services get EndpointSlices; every
    /// namespace gets its `default` ServiceAccount, and the ServiceAccount admission plugin is
    /// on, as in any cluster.
    Cluster {
        /// How many simulated Nodes; each takes a million Pods, so more only matter for
        /// DaemonSets, spreading and the cost of Node heartbeats.
        nodes: usize,
    },
}

impl Flavor {
    /// Nodes of [`Flavor::cluster`]: a few, so a DaemonSet or a spread constraint has something to
    /// spread over, at no measurable cost.
    pub const DEFAULT_NODES: usize = 3;

    /// [`Flavor::Cluster`] with [`Flavor::DEFAULT_NODES`] Nodes.
    pub fn cluster() -> Flavor {
        Flavor::Cluster {
            nodes: Self::DEFAULT_NODES,
        }
    }

    /// How many simulated Nodes the plane has (none when lean).
    pub fn nodes(self) -> usize {
        match self {
            Flavor::Lean => 0,
            Flavor::Cluster { nodes } => nodes,
        }
    }

    fn binaries(self) -> &'static [&'static str] {
        match self {
            Flavor::Lean => &["etcd", "kube-apiserver", "kube-controller-manager"],
            Flavor::Cluster { .. } => &[
                "etcd",
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kwok",
            ],
        }
    }
}

/// Why a control plane could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    /// A binary is absent from the binary directory.
    #[error(
        "control-plane binary {} not found: build the binaries with `hack/control-plane/build.sh` \
         (~10 minutes once on 2 cores, then cached), or set {BIN_DIR_ENV} to a directory holding \
         etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok",
        path.display()
    )]
    BinaryMissing {
        /// The path that was looked up.
        path: PathBuf,
    },
    /// Neither the binary directory variable nor `HOME` is set.
    #[error(
        "cannot locate the control-plane binaries: neither {BIN_DIR_ENV} nor HOME is set; \
         run `hack/control-plane/build.sh` and set {BIN_DIR_ENV} to the directory it prints"
    )]
    NoBinDir,
    /// A filesystem or process operation failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        error: io::Error,
    },
    /// `METASCRIPT_PLANE_CPUS` is not a list of CPUs.
    #[error("{CPUS_ENV}={value:?} is not a list of CPU numbers such as `0` or `0,2-3`")]
    Cpus {
        /// The variable's value.
        value: String,
    },
    /// Certificate or key generation failed.
    #[error("generating certificates: {0}")]
    Certificates(String),
    /// A process exited before the plane was ready.
    #[error(
        "{component} exited during startup ({status}); last lines of {} \
         ({KEEP_DIR_ENV}=1 keeps it):\n{tail}",
        log.display()
    )]
    Exited {
        /// `etcd`, `kube-apiserver`, `kube-controller-manager`, `kube-scheduler` or `kwok`.
        component: &'static str,
        /// Its exit status.
        status: ExitStatus,
        /// Its log file (removed along with the plane's directory).
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// The plane did not become ready in time.
    #[error(
        "control plane not ready after {timeout:?}: {waiting_for}; last lines of {} \
         ({KEEP_DIR_ENV}=1 keeps it):\n{tail}",
        log.display()
    )]
    Timeout {
        /// How long startup waited.
        timeout: Duration,
        /// What was still missing, with the last error seen.
        waiting_for: String,
        /// Log of the process that was awaited.
        log: PathBuf,
        /// The end of that log.
        tail: String,
    },
    /// The generated kubeconfig could not be turned into a client configuration.
    #[error("loading the generated kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// Building a client failed.
    #[error("building a client: {0}")]
    Client(#[from] kube::Error),
    /// Creating the simulated Nodes of a [`Flavor::Cluster`] plane failed.
    #[error("creating the simulated Nodes: {0}")]
    Nodes(kube::Error),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> ControlPlaneError {
    let context = context.into();
    move |error| ControlPlaneError::Io { context, error }
}

/// What the API server audits: writes of ConfigMaps only (the tests' usual targets), at the
/// Metadata level, once each (when the response is complete), so the log stays small.
pub(super) const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
  resources: [{group: \"\", resources: [configmaps]}]
- level: None
";

/// The kubectl `hack/control-plane/build.sh` builds beside the plane's binaries (in
/// `METASCRIPT_CONTROL_PLANE_BIN`, else the default directory), when it is there.
pub fn kubectl() -> Option<PathBuf> {
    let dir = std::env::var_os(BIN_DIR_ENV)
        .map(PathBuf::from)
        .or_else(default_bin_dir)?;
    Some(dir.join("kubectl")).filter(|path| path.is_file())
}

/// The default binary directory, the one `hack/control-plane/build.sh` fills; `None` without
/// `HOME`.
pub fn default_bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("METASCRIPT_CONTROL_PLANE_DIR") {
        return Some(PathBuf::from(dir).join("bin"));
    }
    let home = std::env::var_os("HOME")?;
    Some(
        PathBuf::from(home)
            .join(".cache/metascript/control-plane")
            .join(CACHE_KEY)
            .join("bin"),
    )
}

fn bin_dir() -> Result<PathBuf, ControlPlaneError> {
    match std::env::var_os(BIN_DIR_ENV) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => default_bin_dir().ok_or(ControlPlaneError::NoBinDir),
    }
}

struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// A running etcd + kube-apiserver + kube-controller-manager on loopback, plus kube-scheduler
/// and kwok for a [`Flavor::Cluster`] plane.
///
/// The processes are children of the thread that called [`ControlPlane::start`] and are
/// SIGKILLed by the kernel if that thread dies (Linux `PR_SET_PDEATHSIG`), so a crashed test
/// cannot leak them. Start the plane from a thread that outlives it: a tokio worker or the test's
/// own thread is fine, a `spawn_blocking` thread is not (the blocking pool retires idle threads).
pub struct ControlPlane {
    dir: PathBuf,
    kubeconfig_path: PathBuf,
    kubeconfig: Kubeconfig,
    server: String,
    flavor: Flavor,
    processes: Mutex<Vec<Process>>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir)
            .field("server", &self.server)
            .field("flavor", &self.flavor)
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// Starts a fresh [`Flavor::Lean`] plane and waits until the apiserver is ready, the
    /// `default` namespace exists and the controller-manager is healthy.
    pub async fn start() -> Result<ControlPlane, ControlPlaneError> {
        Self::start_with(Flavor::Lean).await
    }

    /// Starts a fresh plane of the given flavor. A [`Flavor::Cluster`] start also waits until
    /// the scheduler is ready, every simulated Node is Ready and untainted, and the `default`
    /// namespace has its `default` ServiceAccount, so a workload created right after it runs.
    pub async fn start_with(flavor: Flavor) -> Result<ControlPlane, ControlPlaneError> {
        let bins = bin_dir()?;
        for name in flavor.binaries() {
            let path = bins.join(name);
            if !path.is_file() {
                return Err(ControlPlaneError::BinaryMissing { path });
            }
        }
        sweep_stale_dirs();
        let mut attempt = 1;
        loop {
            match Self::start_once(&bins, flavor).await {
                Err(err) if attempt < START_ATTEMPTS && is_port_collision(&err) => {
                    tracing::warn!(%err, attempt, "control plane lost a port race; retrying");
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    async fn start_once(bins: &Path, flavor: Flavor) -> Result<ControlPlane, ControlPlaneError> {
        let started = Instant::now();
        let dir = create_private_dir()?;
        // From here on, dropping `plane` (including on an early return) kills whatever was
        // started and removes the directory.
        let mut plane = ControlPlane {
            kubeconfig_path: dir.join("admin.kubeconfig"),
            dir,
            kubeconfig: Kubeconfig::default(),
            server: String::new(),
            flavor,
            processes: Mutex::new(Vec::new()),
        };
        let dir = plane.dir.clone();
        let [
            etcd_client,
            etcd_peer,
            apiserver_port,
            kcm_port,
            scheduler_port,
        ] = free_ports()?;
        plane.server = format!("https://127.0.0.1:{apiserver_port}");
        let pki = Pki::generate()?;
        let files = pki.write(&dir)?;

        let admin_kubeconfig = kubeconfig_yaml(
            &plane.server,
            &pki.ca_pem,
            &pki.admin.0,
            &pki.admin.1,
            "metascript-admin",
        );
        write_private(&plane.kubeconfig_path, admin_kubeconfig.as_bytes())?;
        plane.kubeconfig = Kubeconfig::from_yaml(&admin_kubeconfig)?;
        let kcm_kubeconfig = dir.join("kube-controller-manager.kubeconfig");
        write_private(
            &kcm_kubeconfig,
            kubeconfig_yaml(
                &plane.server,
                &pki.ca_pem,
                &pki.controller_manager.0,
                &pki.controller_manager.1,
                "kube-controller-manager",
            )
            .as_bytes(),
        )?;
        let scheduler_kubeconfig = dir.join("kube-scheduler.kubeconfig");
        let kwok_kubeconfig = dir.join("kwok.kubeconfig");
        let kwok_config = dir.join("kwok.yaml");
        if let Flavor::Cluster { .. } = flavor {
            for (path, (cert, key), user) in [
                (&scheduler_kubeconfig, &pki.scheduler, "kube-scheduler"),
                (&kwok_kubeconfig, &pki.kwok, "kwok"),
            ] {
                let yaml = kubeconfig_yaml(&plane.server, &pki.ca_pem, cert, key, user);
                write_private(path, yaml.as_bytes())?;
            }
            write_private(&kwok_config, nodes::KWOK_STAGES.as_bytes())?;
        }

        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        plane.spawn(
            "etcd",
            bins,
            &[
                "--name=metascript".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=metascript={peer_url}"),
                // The data is thrown away with the directory; fsync only costs time.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ],
        )?;
        // The apiserver gives up on an unreachable etcd only after a long while, but starting it
        // against a listening etcd avoids a burst of connection errors in its log.
        plane
            .wait_until("etcd", "etcd to listen", started, || async move {
                tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, etcd_client))
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .await?;

        let p = |path: &Path| path.display().to_string();
        let audit_policy = dir.join("audit-policy.yaml");
        write_private(&audit_policy, AUDIT_POLICY.as_bytes())?;
        let admission = dir.join("admission.yaml");
        write_private(
            &admission,
            admission_configuration(&files.webhook_kubeconfig).as_bytes(),
        )?;
        plane.spawn(
            "kube-apiserver",
            bins,
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={apiserver_port}"),
                format!("--cert-dir={}", dir.join("apiserver").display()),
                format!("--tls-cert-file={}", p(&files.apiserver_cert)),
                format!("--tls-private-key-file={}", p(&files.apiserver_key)),
                format!("--client-ca-file={}", p(&files.ca_cert)),
                "--authorization-mode=Node,RBAC".into(),
                format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
                format!("--service-account-key-file={}", p(&files.sa_public)),
                format!(
                    "--service-account-signing-key-file={}",
                    p(&files.sa_private)
                ),
                format!("--service-cluster-ip-range={SERVICE_CIDR}"),
                // Endpoints may not be loopback addresses, so the reconciler for the `kubernetes`
                // service would only log errors.
                "--endpoint-reconciler-type=none".into(),
                // `/debug/pprof` for benchmarks that ask where the apiserver's CPU goes.
                format!(
                    "--profiling={}",
                    std::env::var_os("METASCRIPT_PLANE_PROFILING").is_some()
                ),
                format!("--audit-policy-file={}", p(&audit_policy)),
                format!("--audit-log-path={}", p(&plane.audit_log())),
                "--audit-log-format=json".into(),
                format!("--admission-control-config-file={}", p(&admission)),
            ]
            .into_iter()
            .chain(match flavor {
                // No controller creates `default` service accounts on a lean plane, so the
                // plugin would reject every pod created in a fresh namespace.
                Flavor::Lean => Some("--disable-admission-plugins=ServiceAccount".into()),
                // The serviceaccount controller runs, so pods get their account (and its token
                // volume) as in any cluster.
                Flavor::Cluster { .. } => None,
            })
            .collect::<Vec<String>>(),
        )?;
        let admin = plane.client().await?;
        plane
            .wait_until("kube-apiserver", "/readyz", started, || {
                let admin = admin.clone();
                async move { get_ok(&admin, "", "readyz").await }
            })
            .await?;
        plane
            .wait_until("kube-apiserver", "the `default` namespace", started, || {
                let admin = admin.clone();
                async move { get_ok(&admin, "/api/v1/namespaces", "default").await }
            })
            .await?;

        let mut kcm_args = vec![
            format!("--kubeconfig={}", p(&kcm_kubeconfig)),
            format!("--authentication-kubeconfig={}", p(&kcm_kubeconfig)),
            format!("--authorization-kubeconfig={}", p(&kcm_kubeconfig)),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={kcm_port}"),
            format!("--cert-dir={}", dir.join("controller-manager").display()),
            format!("--tls-cert-file={}", p(&files.kcm_serving_cert)),
            format!("--tls-private-key-file={}", p(&files.kcm_serving_key)),
            "--leader-elect=false".into(),
            // Each controller acts as its own service account with its bootstrap RBAC role,
            // as on a kubeadm cluster, so RBAC here behaves like RBAC there.
            "--use-service-account-credentials=true".into(),
            "--profiling=false".into(),
        ];
        match flavor {
            // Garbage collection and namespace teardown are what the operator's users rely on;
            // the other controllers manage pods and nodes that never exist on a lean plane.
            Flavor::Lean => kcm_args.push("--controllers=garbagecollector,namespace".into()),
            Flavor::Cluster { .. } => kcm_args.extend([
                // Every controller that is on by default, as on a kubeadm cluster (off by
                // default: bootstrap-signer, token-cleaner, selinux-warning). Node CIDR
                // allocation and CSR signing start but idle: no --allocate-node-cidrs, no CA key.
                "--controllers=*".into(),
                // The root-ca-cert-publisher puts it in every namespace as `kube-root-ca.crt`.
                format!("--root-ca-file={}", p(&files.ca_cert)),
                // For the legacy token controller, which is off without it.
                format!(
                    "--service-account-private-key-file={}",
                    p(&files.sa_private)
                ),
                format!("--kube-api-qps={CLUSTER_API_QPS}"),
                format!("--kube-api-burst={CLUSTER_API_BURST}"),
            ]),
        }
        plane.spawn("kube-controller-manager", bins, &kcm_args)?;

        if let Flavor::Cluster { nodes: count } = flavor {
            plane.spawn(
                "kube-scheduler",
                bins,
                &[
                    format!("--kubeconfig={}", p(&scheduler_kubeconfig)),
                    format!("--authentication-kubeconfig={}", p(&scheduler_kubeconfig)),
                    format!("--authorization-kubeconfig={}", p(&scheduler_kubeconfig)),
                    "--bind-address=127.0.0.1".into(),
                    format!("--secure-port={scheduler_port}"),
                    format!("--cert-dir={}", dir.join("scheduler").display()),
                    format!("--tls-cert-file={}", p(&files.scheduler_serving_cert)),
                    format!("--tls-private-key-file={}", p(&files.scheduler_serving_key)),
                    "--leader-elect=false".into(),
                    format!("--kube-api-qps={CLUSTER_API_QPS}"),
                    format!("--kube-api-burst={CLUSTER_API_BURST}"),
                    "--profiling=false".into(),
                ],
            )?;
            plane.spawn_with_env(
                "kwok",
                bins,
                &[
                    format!("--kubeconfig={}", p(&kwok_kubeconfig)),
                    format!("--config={}", p(&kwok_config)),
                    "--manage-all-nodes=false".into(),
                    format!(
                        "--manage-nodes-with-annotation-selector={}={}",
                        nodes::FAKE_NODE_ANNOTATION.0,
                        nodes::FAKE_NODE_ANNOTATION.1
                    ),
                    format!("--cidr={}", nodes::POD_CIDR),
                    format!(
                        "--node-lease-duration-seconds={}",
                        nodes::NODE_LEASE_SECONDS
                    ),
                ],
                // kwok also loads `~/.kwok/kwok.yaml` when it exists; a HOME of its own keeps
                // the user's kwok configuration out of the plane.
                &[("HOME", dir.as_os_str())],
            )?;
            nodes::create(&admin, count)
                .await
                .map_err(ControlPlaneError::Nodes)?;
        }

        let mut kcm_config = kube::Config::from_custom_kubeconfig(
            plane.kubeconfig.clone(),
            &KubeConfigOptions::default(),
        )
        .await?;
        kcm_config.cluster_url = format!("https://127.0.0.1:{kcm_port}")
            .parse()
            .expect("a loopback URL with a port is a valid URI");
        let kcm = kube::Client::try_from(kcm_config)?;
        plane
            .wait_until("kube-controller-manager", "/healthz", started, || {
                let kcm = kcm.clone();
                async move { get_ok(&kcm, "", "healthz").await }
            })
            .await?;

        if let Flavor::Cluster { nodes: count } = flavor {
            let mut scheduler_config = kube::Config::from_custom_kubeconfig(
                plane.kubeconfig.clone(),
                &KubeConfigOptions::default(),
            )
            .await?;
            scheduler_config.cluster_url = format!("https://127.0.0.1:{scheduler_port}")
                .parse()
                .expect("a loopback URL with a port is a valid URI");
            let scheduler = kube::Client::try_from(scheduler_config)?;
            // /readyz rather than /healthz: it also waits for the scheduler's informers to sync,
            // so a Pod created from now on is seen.
            plane
                .wait_until("kube-scheduler", "/readyz", started, || {
                    let scheduler = scheduler.clone();
                    async move { get_ok(&scheduler, "", "readyz").await }
                })
                .await?;
            plane
                .wait_for(
                    "kwok",
                    &format!("{count} simulated Nodes to be Ready and untainted"),
                    started,
                    nodes::schedulable_nodes(&admin, count),
                )
                .await?;
            // Created by the serviceaccount controller; without it the ServiceAccount admission
            // plugin refuses Pods in `default`.
            plane
                .wait_until(
                    "kube-controller-manager",
                    "the `default` ServiceAccount",
                    started,
                    || {
                        let admin = admin.clone();
                        async move {
                            get_ok(
                                &admin,
                                "/api/v1/namespaces/default/serviceaccounts",
                                "default",
                            )
                            .await
                        }
                    },
                )
                .await?;
        }

        tracing::info!(
            server = %plane.server,
            dir = %plane.dir.display(),
            ?flavor,
            elapsed = ?started.elapsed(),
            "control plane ready"
        );
        Ok(plane)
    }

    /// The admin kubeconfig file (`system:masters`); valid as long as the plane lives.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// What this plane runs.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The names of the simulated Nodes (none on a lean plane).
    pub fn node_names(&self) -> Vec<String> {
        (0..self.flavor.nodes()).map(nodes::node_name).collect()
    }

    /// The process id of each running component (`etcd`, `kube-apiserver`,
    /// `kube-controller-manager`, then `kube-scheduler` and `kwok` on a cluster plane), in start
    /// order, so benchmarks can report their memory.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        let processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        processes.iter().map(|p| (p.name, p.child.id())).collect()
    }

    /// The admin kubeconfig, with certificates inline.
    pub fn kubeconfig(&self) -> Kubeconfig {
        self.kubeconfig.clone()
    }

    /// The apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The plane's private directory: logs (`<component>.log`), certificates, etcd data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The API server's audit log: one JSON event per write of a ConfigMap (create, update,
    /// patch, delete), naming who sent it (user and User-Agent) and when it was received, so a
    /// test can tell which operator replica wrote what (see [`AUDIT_POLICY`]).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// The CA (PEM file) that signed the client certificate the API server presents to every
    /// admission webhook it calls (its AdmissionConfiguration's kubeConfigFile): what a webhook
    /// given `--webhook-client-ca` checks callers against. A CA of its own, so that no other
    /// client of the plane holds a certificate it signed.
    pub fn webhook_client_ca(&self) -> PathBuf {
        self.dir.join("pki").join(WEBHOOK_CLIENT_CA_FILE)
    }

    /// A client authenticated as cluster admin.
    ///
    /// A client's connection pool belongs to the tokio runtime it was first used on, so make one
    /// per runtime (per `#[tokio::test]`) rather than sharing one.
    pub async fn client(&self) -> Result<kube::Client, ControlPlaneError> {
        client_for(self.kubeconfig.clone()).await
    }

    /// The cluster-admin client configuration (what [`crate::runtime::Operator::start`] takes).
    pub async fn config(&self) -> Result<kube::Config, ControlPlaneError> {
        Ok(kube::Config::from_custom_kubeconfig(
            self.kubeconfig.clone(),
            &KubeConfigOptions::default(),
        )
        .await?)
    }

    /// Kills every process and removes the directory (unless `METASCRIPT_CONTROL_PLANE_KEEP=1`).
    /// Idempotent; also what `Drop` does. Safe to call from an `atexit` handler: it never panics.
    pub fn stop(&self) {
        let mut processes = match self.processes.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        // Reverse start order, so nothing logs a burst of errors about its dead dependency.
        while let Some(mut process) = processes.pop() {
            // SIGKILL rather than a graceful stop: all state is disposable and this is faster.
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
        drop(processes);
        if std::env::var_os(KEEP_DIR_ENV).is_some_and(|v| v == "1") {
            return;
        }
        if let Err(error) = fs::remove_dir_all(&self.dir)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), %error, "removing control-plane directory");
        }
    }

    fn spawn(
        &mut self,
        name: &'static str,
        bins: &Path,
        args: &[String],
    ) -> Result<(), ControlPlaneError> {
        self.spawn_with_env(name, bins, args, &[])
    }

    fn spawn_with_env(
        &mut self,
        name: &'static str,
        bins: &Path,
        args: &[String],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<(), ControlPlaneError> {
        let log = self.dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(io_err(format!("creating {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_err(format!("duplicating {}", log.display())))?;
        let mut command = Command::new(bins.join(name));
        command
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        die_with_parent(&mut command);
        if let Some(value) = std::env::var_os(CPUS_ENV) {
            let value = value.to_string_lossy();
            let cpus = parse_cpus(&value).ok_or_else(|| ControlPlaneError::Cpus {
                value: value.to_string(),
            })?;
            pin(&mut command, &cpus);
        }
        let child = command
            .spawn()
            .map_err(io_err(format!("starting {}", bins.join(name).display())))?;
        tracing::debug!(name, pid = child.id(), "started control-plane process");
        self.processes
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .push(Process { name, child, log });
        Ok(())
    }

    /// Polls `probe` until it succeeds, failing early if any process exits.
    async fn wait_until<F, Fut>(
        &self,
        component: &'static str,
        what: &str,
        started: Instant,
        mut probe: F,
    ) -> Result<(), ControlPlaneError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let mut last_error;
        loop {
            self.check_alive()?;
            match tokio::time::timeout(Duration::from_secs(5), probe()).await {
                Ok(Ok(())) => {
                    tracing::debug!(what, elapsed = ?started.elapsed(), "control plane: done waiting");
                    return Ok(());
                }
                Ok(Err(error)) => last_error = error,
                Err(_) => last_error = "probe timed out after 5s".into(),
            }
            if started.elapsed() > STARTUP_TIMEOUT {
                return Err(self.timeout(component, what, last_error));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Awaits `condition`, failing early if any process exits or the startup deadline passes;
    /// for conditions a watch reports, where [`Self::wait_until`] would poll.
    async fn wait_for(
        &self,
        component: &'static str,
        what: &str,
        started: Instant,
        condition: impl Future<Output = Result<(), String>>,
    ) -> Result<(), ControlPlaneError> {
        let mut condition = std::pin::pin!(condition);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                result = &mut condition => match result {
                    Ok(()) => {
                        tracing::debug!(what, elapsed = ?started.elapsed(), "control plane: done waiting");
                        return Ok(());
                    }
                    Err(error) => return Err(self.timeout(component, what, error)),
                },
                _ = tick.tick() => {
                    self.check_alive()?;
                    if started.elapsed() > STARTUP_TIMEOUT {
                        return Err(self.timeout(component, what, "still waiting".into()));
                    }
                }
            }
        }
    }

    fn timeout(
        &self,
        component: &'static str,
        what: &str,
        last_error: String,
    ) -> ControlPlaneError {
        let log = self.dir.join(format!("{component}.log"));
        ControlPlaneError::Timeout {
            timeout: STARTUP_TIMEOUT,
            waiting_for: format!("waiting for {what} (last error: {last_error})"),
            tail: log_tail(&log),
            log,
        }
    }

    fn check_alive(&self) -> Result<(), ControlPlaneError> {
        let mut processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        for process in processes.iter_mut() {
            let status = process
                .child
                .try_wait()
                .map_err(io_err(format!("checking on {}", process.name)))?;
            if let Some(status) = status {
                return Err(ControlPlaneError::Exited {
                    component: process.name,
                    status,
                    tail: log_tail(&process.log),
                    log: process.log.clone(),
                });
            }
        }
        Ok(())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn client_for(kubeconfig: Kubeconfig) -> Result<kube::Client, ControlPlaneError> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// GETs `<dir>/<name>` and discards the body; any non-2xx status is an error.
async fn get_ok(client: &kube::Client, dir: &str, name: &str) -> Result<(), String> {
    // kube's request builder stands in for the `http` crate, which is not a direct dependency.
    let request = kube::core::Request::new(dir)
        .get(name, &Default::default())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn is_port_collision(err: &ControlPlaneError) -> bool {
    match err {
        ControlPlaneError::Exited { tail, .. } | ControlPlaneError::Timeout { tail, .. } => {
            tail.contains("address already in use")
        }
        _ => false,
    }
}

/// Asks the kernel to SIGKILL the child when the spawning thread dies, so that a test binary that
/// crashes or is killed never leaves etcd or an apiserver behind.
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe syscalls.
    let parent = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl; then nobody would kill us.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// CPU numbers as `taskset -c` takes them (`0`, `0,2-3`); `None` for anything else.
fn parse_cpus(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for item in list.split(',') {
        let (first, last): (usize, usize) = match item.trim().split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let cpu = item.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        // `cpu_set_t` holds 1024.
        if first > last || last >= 1024 {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

/// Runs the child on `cpus` only.
#[cfg(target_os = "linux")]
fn pin(command: &mut Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET is given numbers under 1024.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: the closure runs between fork and exec and only makes one syscall.
    unsafe {
        command.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn pin(_: &mut Command, _: &[usize]) {
    tracing::warn!("{CPUS_ENV} is only followed on Linux");
}

/// Elsewhere the children get their own process group; `Drop` still kills them, a crash does not.
#[cfg(all(unix, not(target_os = "linux")))]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    command.process_group(0);
}

fn free_ports<const N: usize>() -> Result<[u16; N], ControlPlaneError> {
    // All listeners stay open until every port is chosen, so the N ports are distinct.
    let listeners = (0..N)
        .map(|_| TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("binding a loopback port"))?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(io_err("reading a bound port"))?
            .port();
    }
    Ok(ports)
}

fn create_private_dir() -> Result<PathBuf, ControlPlaneError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{nanos}", std::process::id()));
    // Private keys live here.
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(io_err(format!("creating {}", dir.display())))?;
    Ok(dir)
}

/// Removes directories left by planes whose owning process is gone (killed before it could clean
/// up). Directories of live processes, including other test binaries running now, are kept.
fn sweep_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid as u32 != std::process::id() && !pid_alive(pid) {
            tracing::debug!(dir = %entry.path().display(), "removing stale control-plane directory");
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn pid_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn log_tail(path: &Path) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        // Klog lines are long; 64 KiB holds the last few dozen with room to spare.
        file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("<cannot read log: {error}>"),
    }
}

fn write_private(path: &Path, contents: &[u8]) -> Result<(), ControlPlaneError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(contents))
        .map_err(io_err(format!("writing {}", path.display())))
}

fn kubeconfig_yaml(server: &str, ca: &str, cert: &str, key: &str, user: &str) -> String {
    let b64 = |pem: &str| BASE64.encode(pem);
    let mut yaml = String::new();
    let _ = write!(
        yaml,
        "apiVersion: v1
kind: Config
clusters:
- name: metascript
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: metascript
  context:
    cluster: metascript
    user: {user}
    namespace: default
current-context: metascript
",
        ca = b64(ca),
        cert = b64(cert),
        key = b64(key),
    );
    yaml
}

/// The file (in the plane's `pki/`) of the CA that signs the API server's webhook client
/// certificate.
const WEBHOOK_CLIENT_CA_FILE: &str = "webhook-client-ca.crt";

/// The API server's admission configuration: the kubeconfig its webhook clients use, which
/// presents a client certificate to every webhook (`*`).
fn admission_configuration(webhook_kubeconfig: &Path) -> String {
    let path = webhook_kubeconfig.display();
    let plugin = |name: &str| {
        format!(
            "- name: {name}
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: {path}
"
        )
    };
    format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
{}{}",
        plugin("ValidatingAdmissionWebhook"),
        plugin("MutatingAdmissionWebhook")
    )
}

/// The kubeconfig the API server calls webhooks with: a client certificate for any of them.
fn webhook_kubeconfig((cert, key): &(String, String)) -> String {
    format!(
        "apiVersion: v1
kind: Config
users:
- name: \"*\"
  user:
    client-certificate-data: {}
    client-key-data: {}
",
        BASE64.encode(cert),
        BASE64.encode(key)
    )
}

/// Certificates and keys as PEM: (certificate, private key) pairs.
struct Pki {
    ca_pem: String,
    /// The CA of the API server's webhook client certificate, and that certificate.
    webhook_client_ca_pem: String,
    webhook_client: (String, String),
    apiserver: (String, String),
    admin: (String, String),
    controller_manager: (String, String),
    controller_manager_serving: (String, String),
    scheduler: (String, String),
    scheduler_serving: (String, String),
    kwok: (String, String),
    service_account_private: String,
    service_account_public: String,
}

struct PkiFiles {
    ca_cert: PathBuf,
    apiserver_cert: PathBuf,
    apiserver_key: PathBuf,
    kcm_serving_cert: PathBuf,
    kcm_serving_key: PathBuf,
    scheduler_serving_cert: PathBuf,
    scheduler_serving_key: PathBuf,
    sa_private: PathBuf,
    sa_public: PathBuf,
    webhook_kubeconfig: PathBuf,
}

impl Pki {
    fn generate() -> Result<Pki, ControlPlaneError> {
        let cert_err = |e: rcgen::Error| ControlPlaneError::Certificates(e.to_string());
        // ECDSA P-256 throughout: generation is instant, where RSA would cost a noticeable part of
        // the startup budget, and every component accepts it.
        let ca_key = KeyPair::generate().map_err(cert_err)?;
        let mut ca_params = CertificateParams::new(Vec::new()).map_err(cert_err)?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "metascript-control-plane-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(cert_err)?;
        let ca = Issuer::new(ca_params, ca_key);

        let leaf = |cn: &str,
                    orgs: &[&str],
                    sans: &[&str],
                    usage: ExtendedKeyUsagePurpose|
         -> Result<(String, String), ControlPlaneError> {
            let key = KeyPair::generate().map_err(cert_err)?;
            let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
            let mut params = CertificateParams::new(sans).map_err(cert_err)?;
            params.distinguished_name.push(DnType::CommonName, cn);
            for org in orgs {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, *org);
            }
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![usage];
            params.use_authority_key_identifier_extension = true;
            let cert = params.signed_by(&key, &ca).map_err(cert_err)?;
            Ok((cert.pem(), key.serialize_pem()))
        };

        let apiserver = leaf(
            "kube-apiserver",
            &[],
            &[
                "127.0.0.1",
                "localhost",
                SERVICE_IP,
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let admin = leaf(
            "metascript-admin",
            &["system:masters"],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        // The user name the bootstrap RBAC policy grants the controller-manager's role to.
        let controller_manager = leaf(
            "system:kube-controller-manager",
            &[],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let controller_manager_serving = leaf(
            "kube-controller-manager",
            &[],
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        // The user name the bootstrap RBAC policy grants the scheduler's roles to.
        let scheduler = leaf(
            "system:kube-scheduler",
            &[],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let scheduler_serving = leaf(
            "kube-scheduler",
            &[],
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        // kwok plays the kubelet of every simulated Node (status, leases, pod status, deletes),
        // which no bootstrap role covers short of a Node identity per Node; it is test
        // infrastructure, so it gets the admin group, as kwokctl gives it.
        let kwok = leaf(
            "kwok",
            &["system:masters"],
            &[],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        let (webhook_client_ca_pem, webhook_client) = {
            let ca_key = KeyPair::generate().map_err(cert_err)?;
            let mut params = CertificateParams::new(Vec::new()).map_err(cert_err)?;
            params
                .distinguished_name
                .push(DnType::CommonName, "metascript-webhook-client-ca");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let ca_cert = params.self_signed(&ca_key).map_err(cert_err)?;
            let issuer = Issuer::new(params, ca_key);
            let key = KeyPair::generate().map_err(cert_err)?;
            let mut params = CertificateParams::new(Vec::new()).map_err(cert_err)?;
            params
                .distinguished_name
                .push(DnType::CommonName, "kube-apiserver-webhook-client");
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.use_authority_key_identifier_extension = true;
            let cert = params.signed_by(&key, &issuer).map_err(cert_err)?;
            (ca_cert.pem(), (cert.pem(), key.serialize_pem()))
        };
        let sa_key = KeyPair::generate().map_err(cert_err)?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            webhook_client_ca_pem,
            webhook_client,
            apiserver,
            admin,
            controller_manager,
            controller_manager_serving,
            scheduler,
            scheduler_serving,
            kwok,
            service_account_private: sa_key.serialize_pem(),
            service_account_public: sa_key.public_key_pem(),
        })
    }

    fn write(&self, dir: &Path) -> Result<PkiFiles, ControlPlaneError> {
        let pki = dir.join("pki");
        fs::create_dir(&pki).map_err(io_err(format!("creating {}", pki.display())))?;
        let put = |name: &str, contents: &str| -> Result<PathBuf, ControlPlaneError> {
            let path = pki.join(name);
            write_private(&path, contents.as_bytes())?;
            Ok(path)
        };
        // Read through [`ControlPlane::webhook_client_ca`].
        put(WEBHOOK_CLIENT_CA_FILE, &self.webhook_client_ca_pem)?;
        Ok(PkiFiles {
            ca_cert: put("ca.crt", &self.ca_pem)?,
            apiserver_cert: put("apiserver.crt", &self.apiserver.0)?,
            apiserver_key: put("apiserver.key", &self.apiserver.1)?,
            kcm_serving_cert: put("controller-manager.crt", &self.controller_manager_serving.0)?,
            kcm_serving_key: put("controller-manager.key", &self.controller_manager_serving.1)?,
            scheduler_serving_cert: put("scheduler.crt", &self.scheduler_serving.0)?,
            scheduler_serving_key: put("scheduler.key", &self.scheduler_serving.1)?,
            sa_private: put("sa.key", &self.service_account_private)?,
            sa_public: put("sa.pub", &self.service_account_public)?,
            webhook_kubeconfig: put(
                "webhook-client.kubeconfig",
                &webhook_kubeconfig(&self.webhook_client),
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cpus;

    #[test]
    fn plane_cpus_are_read_as_taskset_takes_them() {
        assert_eq!(parse_cpus("0"), Some(vec![0]));
        assert_eq!(parse_cpus("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpus(" 1 , 3 "), Some(vec![1, 3]));
        for bad in ["", "a", "3-1", "0,", "1024", "-1"] {
            assert_eq!(parse_cpus(bad), None, "{bad:?}");
        }
    }
}
