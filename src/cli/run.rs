//! `metascript run`: the operator.

use super::logging::Traces;
use crate::admission::AdmissionConfig;
use crate::api::Budget;
use crate::hooks::egress::AllowEntry;
use crate::runtime::report::metrics::Metrics;
use crate::runtime::watch::schemas::LiveSchemas;
use crate::runtime::work::health::WorkerHealth;
use crate::runtime::{LeaseConfig, Operator, OperatorConfig, ShardConfig};
use crate::script::ceilings::{DEFAULT_CEILINGS, LimitCeilings};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Kubeconfig to use; without it, $KUBECONFIG (a list is merged), ~/.kube/config or the
    /// in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
    /// How many objects are synced at once.
    #[arg(long, default_value_t = 16, env = "METASCRIPT_WORKERS")]
    pub workers: usize,
    /// Dev loop: a file in this directory named like a hook's ConfigMap key is used instead of
    /// that key, and saving it re-syncs the affected targets.
    #[arg(long, env = "METASCRIPT_SCRIPTS_DIR")]
    pub scripts_dir: Option<PathBuf>,
    /// Seconds between controller status updates (written only when changed).
    #[arg(long, default_value_t = 2.0)]
    pub status_interval: f64,
    /// Seconds between rewrites of a controller's `status.usage` when nothing else in its status
    /// changed (hook calls and minutes passing change it; other changes carry it at once).
    #[arg(long, default_value_t = 30.0, env = "METASCRIPT_USAGE_REFRESH")]
    pub usage_refresh: f64,
    /// Milliseconds of hook CPU per minute for a controller whose `spec.budget` sets none (its
    /// work is paced past it); none by default.
    #[arg(long, value_name = "MILLIS_PER_MINUTE", value_parser = clap::value_parser!(i64).range(1..))]
    pub default_cpu_budget: Option<i64>,
    /// Writes per minute for a controller whose `spec.budget` sets none; none by default.
    #[arg(long, value_name = "WRITES_PER_MINUTE", value_parser = clap::value_parser!(i64).range(1..))]
    pub default_write_budget: Option<i64>,
    /// The most hook CPU per minute (milliseconds) any controller's budget allows, whatever it
    /// asks for; none by default.
    #[arg(long, value_name = "MILLIS_PER_MINUTE", value_parser = clap::value_parser!(i64).range(1..))]
    pub max_cpu_budget: Option<i64>,
    /// The most writes per minute any controller's budget allows; none by default.
    #[arg(long, value_name = "WRITES_PER_MINUTE", value_parser = clap::value_parser!(i64).range(1..))]
    pub max_write_budget: Option<i64>,
    /// Seconds between reads of the Secrets and ConfigMaps webhook credentials name (with each
    /// controller's account): a rotated one reloads its controller within this time.
    #[arg(
        long,
        default_value_t = 30.0,
        env = "METASCRIPT_CREDENTIALS_POLL_INTERVAL"
    )]
    pub credentials_poll_interval: f64,
    /// Take part in leader election, so only one of several replicas writes (the others keep
    /// warm caches and take over when it stops).
    #[arg(long, env = "METASCRIPT_LEADER_ELECTION")]
    pub leader_election: bool,
    /// The namespace of the election's Lease; default: the pod's namespace (POD_NAMESPACE, or
    /// the service account's), else metascript-system.
    #[arg(long, env = "METASCRIPT_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The name of the election's Lease: replicas with the same one elect one leader.
    #[arg(
        long,
        default_value = "metascript",
        env = "METASCRIPT_LEADER_ELECTION_ID"
    )]
    pub leader_election_id: String,
    /// How long a lease stays valid after its last renewal: the longest a failover waits for a
    /// leader that died without releasing it or, sharded, before a dead replica's objects move
    /// to the others (e.g. `15s`, `1m`; whole seconds, at least 3).
    #[arg(long, default_value = "15s", value_parser = parse_lease_duration, env = "METASCRIPT_LEASE_DURATION")]
    pub lease_duration: Duration,
    /// `auto`: every replica is active, and each object is synced and written by one of the
    /// live replicas, chosen by consistent hashing (membership through a Lease per replica;
    /// docs/operations.md, "Sharding"). `off`: this replica writes everything (alone, or the
    /// elected one with --leader-election).
    #[arg(long, value_enum, default_value_t = Sharding::Off, env = "METASCRIPT_SHARDS", conflicts_with = "leader_election")]
    pub shards: Sharding,
    /// The namespace of the replicas' shard Leases; default: the pod's namespace (POD_NAMESPACE,
    /// or the service account's), else metascript-system.
    #[arg(long, env = "METASCRIPT_SHARD_NAMESPACE")]
    pub shard_namespace: Option<String>,
    /// Where the snapshots of the revisions staged rollouts serve are kept (ControllerRevisions);
    /// default: the pod's namespace (POD_NAMESPACE, or the service account's), else
    /// metascript-system. It must exist: without it a rollout cannot be undone after a restart.
    #[arg(long, env = "METASCRIPT_SNAPSHOT_NAMESPACE")]
    pub snapshot_namespace: Option<String>,
    /// Replicas with the same shard group share the work (their Leases carry it as a label,
    /// and are named after it).
    #[arg(long, default_value = "metascript", env = "METASCRIPT_SHARD_GROUP")]
    pub shard_group: String,
    /// Whether a controller without `spec.serviceAccountName` may write as the operator itself.
    /// Say false in a shared cluster: then every controller writes as (and can do only what RBAC
    /// grants) a ServiceAccount of its own.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "METASCRIPT_ALLOW_UNIMPERSONATED")]
    pub allow_unimpersonated: bool,
    /// Where to serve the validating admission webhook (HTTPS, path /validate), e.g.
    /// 0.0.0.0:9443; `none` (the default) turns it off.
    #[arg(long, default_value = "none", env = "METASCRIPT_WEBHOOK_ADDR")]
    pub webhook_addr: String,
    /// The Secret (NAMESPACE/NAME) holding the webhook's certificate, shared by all replicas
    /// (created when missing); default: <the pod's namespace>/metascript-webhook-tls.
    #[arg(long, env = "METASCRIPT_WEBHOOK_SECRET")]
    pub webhook_secret: Option<String>,
    /// The ValidatingWebhookConfiguration whose caBundle is set to the certificate's CA.
    #[arg(
        long,
        default_value = "metascript",
        env = "METASCRIPT_WEBHOOK_CONFIGURATION"
    )]
    pub webhook_configuration: String,
    /// Names the webhook certificate is for (comma-separated DNS names or IP addresses);
    /// default: the metascript-webhook Service in the pod's namespace.
    #[arg(long, value_delimiter = ',', env = "METASCRIPT_WEBHOOK_NAMES")]
    pub webhook_names: Vec<String>,
    /// A PEM file of the CA that signs the API server's client certificate for admission
    /// webhooks (its AdmissionConfiguration's kubeConfigFile): callers without one are refused
    /// at the TLS handshake, and ConfigMaps are read to check the scripts of the controllers
    /// the API server sends. Without it anyone who reaches the port may call, and no ConfigMap
    /// is read for them (docs/security.md#admission).
    #[arg(long, env = "METASCRIPT_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<PathBuf>,
    /// The most seconds one admission review may take (compiling, running spec.tests); keep it
    /// under the webhook configuration's timeoutSeconds (10 as shipped).
    #[arg(long, default_value_t = crate::admission::DEFAULT_REVIEW_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=29), env = "METASCRIPT_WEBHOOK_REVIEW_TIMEOUT")]
    pub webhook_review_timeout: u64,
    /// Record every hook call into this directory as ready-to-run test cases (`metascript test
    /// DIR` replays them): a file pair per controller, hook and script revision; Secrets
    /// redacted; calls deduplicated; at most 50 cases per file.
    #[arg(long, env = "METASCRIPT_RECORD")]
    pub record: Option<PathBuf>,
    /// Serve only the controllers (of every kind) whose labels match this selector
    /// (kubectl syntax, e.g. `team=payments` or `shard notin (b)`), so several operators can
    /// share a cluster or a canary can take a few controllers.
    #[arg(long, env = "METASCRIPT_CONTROLLER_SELECTOR")]
    pub controller_selector: Option<String>,
    /// Make every periodic resync run every hook, as if nothing had been synced before. By
    /// default a resync skips the work items whose last sync was pure (a script that read no
    /// clock or randomness) and saw exactly what the cache holds now (docs/operations.md).
    #[arg(long, env = "METASCRIPT_FULL_RESYNC")]
    pub full_resync: bool,
    /// Where to serve /metrics, /healthz and /readyz; `none` turns the endpoint off. Loopback by
    /// default, so a workstation does not publish them; in a pod, give 0.0.0.0:9090 (deploy/, the
    /// Helm chart and the image's METASCRIPT_METRICS_ADDR do) for the kubelet and Prometheus.
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "METASCRIPT_METRICS_ADDR"
    )]
    pub metrics_addr: String,
    /// The memory every hook call together may hold beyond the 4 MiB each call always has, as a
    /// Kubernetes quantity (`256Mi`, `1Gi`): a call that would take more fails like any budget,
    /// so one runaway script cannot exhaust the operator's memory (docs/operations.md).
    #[arg(long, default_value = "256Mi", value_parser = parse_quantity, env = "METASCRIPT_SCRIPT_MEMORY")]
    pub script_memory: u64,
    /// The most a hook's `limits.maxOperations` may ask for: a controller asking more is refused
    /// at admission, and does not load.
    #[arg(long, default_value_t = DEFAULT_CEILINGS.max_operations, env = "METASCRIPT_MAX_HOOK_OPERATIONS")]
    pub max_hook_operations: u64,
    /// The longest `limits.timeoutMillis` a hook may ask for (`10s`, `1500ms`): a call holds a
    /// worker every controller shares.
    #[arg(long, default_value = "10s", value_parser = parse_duration, env = "METASCRIPT_MAX_HOOK_TIMEOUT")]
    pub max_hook_timeout: Duration,
    /// The most a hook's `limits.maxMemoryBytes` may ask for, as a Kubernetes quantity.
    #[arg(long, default_value = "128Mi", value_parser = parse_quantity, env = "METASCRIPT_MAX_HOOK_MEMORY")]
    pub max_hook_memory: u64,
    /// How long one work item may run before /healthz reports its worker stuck (and the
    /// liveness probe restarts the pod): far longer than hook and API deadlines add up to.
    #[arg(long, default_value = "15m", value_parser = parse_duration, env = "METASCRIPT_WORKER_STUCK_AFTER")]
    pub worker_stuck_after: Duration,
    /// The most objects one hook response may return in a list (attachments, outputs): a
    /// response with more is refused before anything of it is applied.
    #[arg(long, default_value_t = crate::script::DEFAULT_MAX_CHILDREN, env = "METASCRIPT_MAX_CHILDREN")]
    pub max_children: usize,
    /// The share of the workers one controller may hold while another controller's work waits
    /// (more than 0, at most 1).
    #[arg(long, default_value_t = crate::runtime::DEFAULT_CONTROLLER_SHARE, value_parser = parse_share, env = "METASCRIPT_CONTROLLER_SHARE")]
    pub controller_share: f64,
    /// Where webhook hooks may connect (repeatable, or comma-separated): CIDR ranges
    /// (10.96.0.0/12), addresses, host names (hooks.example.com) and `*.suffix` wildcards. None
    /// by default: no webhook is called until an admin lists some. Loopback, link-local,
    /// unspecified and multicast addresses and the API server's are allowed only by an address
    /// or range entry inside them (127.0.0.0/8, 10.96.0.1), never by a name or a wider range
    /// (docs/security.md, "Webhook egress").
    #[arg(
        long,
        value_name = "ENTRY",
        value_delimiter = ',',
        env = "METASCRIPT_WEBHOOK_ALLOW"
    )]
    pub webhook_allow: Vec<String>,
    /// The longest webhook answer read, as a Kubernetes quantity (`4Mi`): a longer one fails
    /// the call unread. What reading it as JSON may take is drawn from --script-memory first
    /// (docs/operations.md, "Sizing").
    #[arg(long, default_value = "4Mi", value_parser = parse_quantity, env = "METASCRIPT_WEBHOOK_MAX_RESPONSE_BYTES")]
    pub webhook_max_response_bytes: u64,
    /// Log filter, in tracing's env-filter syntax.
    #[arg(long, default_value = "info", env = "METASCRIPT_LOG")]
    pub log: String,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,
    /// Send traces of the work (one per work item: queue wait, hook calls, reads, writes) to
    /// this OpenTelemetry collector over OTLP/HTTP, e.g. `http://collector:4318` (its base URL,
    /// `/v1/traces` is added); off without it.
    #[arg(
        long,
        value_name = "URL",
        env = "METASCRIPT_OTLP_ENDPOINT",
        hide_env_values = true
    )]
    pub otlp_endpoint: Option<String>,
    /// The share of work items traced, from 0 to 1, chosen by trace id (with --otlp-endpoint).
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "RATIO",
        value_parser = super::logging::parse_ratio,
        env = "METASCRIPT_TRACE_SAMPLE_RATIO"
    )]
    pub trace_sample_ratio: f64,
}

/// How the work is shared between replicas (`--shards`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Sharding {
    Off,
    Auto,
}

pub(super) fn run(args: RunArgs) -> ExitCode {
    let traces = args.otlp_endpoint.as_ref().map(|endpoint| Traces {
        endpoint: endpoint.clone(),
        sample_ratio: args.trace_sample_ratio,
        instance: Some(identity()),
    });
    // Kept until the end: dropping it sends the traces still batched.
    let _exporter = match super::logging::init(&args.log, args.log_json, traces) {
        Ok(exporter) => exporter,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match crate::script::runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: RunArgs) -> anyhow::Result<()> {
    if let Some(dir) = &args.scripts_dir
        && !dir.is_dir()
    {
        anyhow::bail!("--scripts-dir {}: not a directory", dir.display());
    }
    if args.max_hook_memory > args.script_memory {
        anyhow::bail!(
            "--max-hook-memory {} is more than --script-memory {}: one call could hold every \
             call's memory",
            args.max_hook_memory,
            args.script_memory
        );
    }
    let status_interval = positive_seconds(args.status_interval)
        .context("--status-interval must be a positive number of seconds")?;
    let usage_refresh = positive_seconds(args.usage_refresh)
        .context("--usage-refresh must be a positive number of seconds")?;
    let credentials_poll_interval = positive_seconds(args.credentials_poll_interval)
        .context("--credentials-poll-interval must be a positive number of seconds")?;
    let group = &args.shard_group;
    let valid_group = !group.is_empty()
        && group.len() <= 63
        && group.starts_with(|c: char| c.is_ascii_lowercase())
        && group
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid_group {
        anyhow::bail!(
            "--shard-group {group:?}: lowercase letters, digits and '-', starting with a letter, \
             at most 63 characters (it names Leases and is a label value)"
        );
    }
    let metrics_addr: Option<std::net::SocketAddr> = match args.metrics_addr.as_str() {
        "none" | "" => None,
        addr => Some(
            addr.parse()
                .with_context(|| format!("--metrics-addr {addr:?}: expected HOST:PORT or none"))?,
        ),
    };
    let webhook_allow = webhook_allow(&args.webhook_allow)?;
    let webhook = webhook_config(&args)?;
    let kube = kube_config(&args).await?;
    let (metrics, ready) = (Metrics::default(), Arc::new(AtomicBool::new(false)));
    let health = Arc::new(WorkerHealth::new(args.worker_stuck_after));
    // Up first, so the liveness probe sees the process while the operator starts (waiting for
    // the API server or the CRDs); ready only once every controller has loaded.
    let endpoint = match metrics_addr {
        Some(addr) => {
            // Bound here, so a taken port is an error at start, not a silent log line.
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-addr {addr}"))?;
            let (metrics, ready, health) = (metrics.clone(), ready.clone(), health.clone());
            Some(tokio::spawn(async move {
                if let Err(error) =
                    crate::runtime::report::metrics::serve(listener, &metrics, ready, health).await
                {
                    tracing::error!(%error, "the metrics endpoint stopped");
                }
            }))
        }
        None => None,
    };
    let mut config = OperatorConfig {
        workers: args.workers.max(1),
        scripts_dir: args.scripts_dir.clone(),
        status_interval,
        usage_refresh,
        default_budget: Budget {
            cpu_millis_per_minute: args.default_cpu_budget,
            writes_per_minute: args.default_write_budget,
        },
        max_budget: Budget {
            cpu_millis_per_minute: args.max_cpu_budget,
            writes_per_minute: args.max_write_budget,
        },
        credentials_poll_interval,
        controller_selector: args.controller_selector.clone(),
        allow_unimpersonated: args.allow_unimpersonated,
        leader_election: args.leader_election.then(|| LeaseConfig {
            namespace: args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(own_namespace),
            name: args.leader_election_id.clone(),
            identity: identity(),
            duration: args.lease_duration,
        }),
        shards: (args.shards == Sharding::Auto).then(|| ShardConfig {
            namespace: args.shard_namespace.clone().unwrap_or_else(own_namespace),
            group: args.shard_group.clone(),
            identity: identity(),
            duration: args.lease_duration,
        }),
        record_dir: args.record.clone(),
        full_resync: args.full_resync,
        script_memory: usize::try_from(args.script_memory).unwrap_or(usize::MAX),
        max_children: args.max_children,
        controller_share: args.controller_share,
        webhook_allow,
        webhook_max_response_bytes: args.webhook_max_response_bytes,
        snapshot_namespace: args
            .snapshot_namespace
            .clone()
            .unwrap_or_else(own_namespace),
        limit_ceilings: limit_ceilings(&args),
        metrics,
        ready,
        health,
        schemas: None,
    };
    let webhook = match webhook {
        Some(webhook) => {
            let client = kube::Client::try_from(kube.clone())?;
            // One set of CRD watches for the operator and the webhook.
            let schemas = Arc::new(LiveSchemas::for_cluster(client.clone()).await);
            config.schemas = Some(schemas.clone());
            Some(crate::admission::start(client, webhook, schemas).await?)
        }
        None => None,
    };
    let operator = Operator::start(kube, config, &crate::kinds::runtime()).await?;
    shutdown_signal().await;
    for task in [endpoint, webhook].into_iter().flatten() {
        task.abort();
    }
    tracing::info!("shutting down");
    operator.shutdown().await;
    Ok(())
}

/// The `--webhook-allow` entries. An empty one lists nothing, so `METASCRIPT_WEBHOOK_ALLOW=""`
/// (as deploy/ sets it) is the default, nothing allowed.
fn webhook_allow(given: &[String]) -> anyhow::Result<Vec<AllowEntry>> {
    given
        .iter()
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            entry
                .parse()
                .map_err(|error| anyhow::anyhow!("--webhook-allow {error}"))
        })
        .collect()
}

/// The webhook's settings, when it is on.
fn webhook_config(args: &RunArgs) -> anyhow::Result<Option<AdmissionConfig>> {
    let addr = match args.webhook_addr.as_str() {
        "none" | "" => return Ok(None),
        addr => addr
            .parse()
            .with_context(|| format!("--webhook-addr {addr:?}: expected HOST:PORT or none"))?,
    };
    let namespace = own_namespace();
    let secret = match &args.webhook_secret {
        Some(reference) => {
            let (namespace, name) = reference.split_once('/').with_context(|| {
                format!("--webhook-secret {reference:?}: expected NAMESPACE/NAME")
            })?;
            (namespace.to_string(), name.to_string())
        }
        None => (namespace.clone(), "metascript-webhook-tls".to_string()),
    };
    let names = if args.webhook_names.is_empty() {
        vec![
            format!("metascript-webhook.{namespace}.svc"),
            format!("metascript-webhook.{namespace}.svc.cluster.local"),
        ]
    } else {
        args.webhook_names.clone()
    };
    let client_ca = args
        .webhook_client_ca
        .as_ref()
        .map(|path| {
            std::fs::read_to_string(path)
                .with_context(|| format!("--webhook-client-ca {}", path.display()))
        })
        .transpose()?;
    Ok(Some(AdmissionConfig {
        addr,
        secret,
        configuration: args.webhook_configuration.clone(),
        names,
        client_ca,
        deadline: Duration::from_secs(args.webhook_review_timeout),
        limit_ceilings: limit_ceilings(args),
    }))
}

/// What `--max-hook-*` allow.
fn limit_ceilings(args: &RunArgs) -> LimitCeilings {
    LimitCeilings {
        max_operations: args.max_hook_operations,
        timeout_millis: u64::try_from(args.max_hook_timeout.as_millis()).unwrap_or(u64::MAX),
        max_memory_bytes: args.max_hook_memory,
    }
}

/// A number of seconds as a duration: positive, and within what a `Duration` holds.
fn positive_seconds(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|duration| !duration.is_zero())
}

/// A positive duration in Go's form (`10s`, `5m`, `1500ms`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration like 10s, 5m or 1500ms: {e}"))?;
    if duration.is_negative() || duration.is_zero() {
        return Err(format!("{text:?}: must be longer than zero"));
    }
    Ok(duration.unsigned_abs())
}

/// A lease duration: whole seconds, at least 3 (a renewal every third of it must be possible).
fn parse_lease_duration(text: &str) -> Result<Duration, String> {
    let duration: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration like 15s or 1m: {e}"))?;
    let seconds = duration.as_secs();
    if duration.subsec_nanos() != 0 || seconds < 3 {
        return Err(format!("{text:?}: a lease lasts whole seconds, at least 3"));
    }
    Ok(Duration::from_secs(seconds as u64))
}

/// A byte count as a Kubernetes quantity: a number with an optional binary (`Ki`, `Mi`, `Gi`)
/// or decimal (`k`, `M`, `G`) suffix.
fn parse_quantity(text: &str) -> Result<u64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let unit: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        other => {
            return Err(format!(
                "{text:?}: unknown suffix {other:?} (use a byte count such as 256Mi, 1Gi or \
                 500M)"
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|bytes| *bytes > 0)
        .ok_or_else(|| format!("{text:?} is not a positive byte count such as 256Mi"))
}

/// A share of the workers: more than 0, at most 1.
fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!(
            "{text:?}: a share of the workers is a number above 0 and at most 1 (e.g. 0.5)"
        )),
    }
}

/// The namespace the operator runs in, for its Leases and the snapshots of revisions its
/// staged rollouts serve.
fn own_namespace() -> String {
    const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| std::fs::read_to_string(SERVICE_ACCOUNT).ok())
        .map(|namespace| namespace.trim().to_string())
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or_else(|| crate::runtime::DEFAULT_NAMESPACE.into())
}

/// This replica's name in the election or among the shards: the pod (or host) name and the
/// process, so two processes on one host never share an identity.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "metascript".into());
    format!("{host}_{}", std::process::id())
}

async fn kube_config(args: &RunArgs) -> anyhow::Result<kube::Config> {
    kube_config_for(args.kubeconfig.as_deref(), args.context.as_deref()).await
}

/// The cluster a command talks to: the kubeconfig file given (its context, or the one named),
/// else $KUBECONFIG (a list is merged) or ~/.kube/config, else the in-cluster config.
pub(super) async fn kube_config_for(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|error| {
                NoCluster::Kubeconfig {
                    source_name: format!("--kubeconfig {}", path.display()),
                    reason: error.to_string(),
                }
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => match kube::Config::infer().await {
            Ok(config) => config,
            // kube's error repeats one cause three times (its message, its source, the source's
            // source) and names neither --kubeconfig nor a way to get a cluster.
            Err(_) => return Err(no_cluster().await.into()),
        },
    };
    Ok(config)
}

/// Why no cluster was found, once, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoCluster {
    #[error(
        "no cluster to connect to: no --kubeconfig given, KUBECONFIG is not set, {home} does not \
         exist, and this is not a pod (KUBERNETES_SERVICE_HOST is not set)\n{HINT}"
    )]
    NothingConfigured { home: String },
    #[error("cannot use the kubeconfig ({source_name}): {reason}\n{HINT}")]
    Kubeconfig { source_name: String, reason: String },
    #[error("cannot use the in-cluster config: {reason}")]
    InCluster { reason: String },
}

const HINT: &str = "Point metascript at a cluster with --kubeconfig FILE (or KUBECONFIG=FILE), \
or, from a metascript checkout, run the operator against a local control plane it starts:\n  \
bash hack/run-local.sh [FLAGS OF metascript run]   # prints the KUBECONFIG it uses";

/// The reason `Config::infer` failed, found again the way it looked: the kubeconfig when there is
/// one, else the pod's service account when in a pod, else nothing at all.
async fn no_cluster() -> NoCluster {
    let home_config =
        std::env::var_os("HOME").map(|home| std::path::PathBuf::from(home).join(".kube/config"));
    let kubeconfig_env = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty());
    let source_name = match (&kubeconfig_env, &home_config) {
        (Some(paths), _) => Some(format!("KUBECONFIG={}", paths.to_string_lossy())),
        (None, Some(path)) if path.exists() => Some(path.display().to_string()),
        _ => None,
    };
    if let Some(source_name) = source_name {
        let options = kube::config::KubeConfigOptions::default();
        if let Err(error) = kube::Config::from_kubeconfig(&options).await {
            return NoCluster::Kubeconfig {
                source_name,
                reason: error.to_string(),
            };
        }
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && let Err(error) = kube::Config::incluster()
    {
        return NoCluster::InCluster {
            reason: error.to_string(),
        };
    }
    NoCluster::NothingConfigured {
        home: home_config.map_or_else(|| "~/.kube/config".into(), |p| p.display().to_string()),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags' defaults are the ceilings the docs and the admission webhook's tests name.
    #[test]
    fn hook_ceilings_default_to_the_documented_ones() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from(["metascript", "run"]).unwrap();
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let overridden = [
            "METASCRIPT_MAX_HOOK_OPERATIONS",
            "METASCRIPT_MAX_HOOK_TIMEOUT",
            "METASCRIPT_MAX_HOOK_MEMORY",
        ]
        .iter()
        .any(|name| std::env::var_os(name).is_some());
        if !overridden {
            assert_eq!(limit_ceilings(&args), DEFAULT_CEILINGS);
        }
        assert_eq!(
            args.worker_stuck_after,
            crate::runtime::work::health::DEFAULT_STUCK_AFTER
        );
    }

    #[test]
    fn durations_and_seconds_are_positive_and_bounded() {
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("soon").is_err());
        assert_eq!(positive_seconds(2.0), Some(Duration::from_secs(2)));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e300] {
            assert_eq!(positive_seconds(bad), None, "{bad}");
        }
    }

    /// Loopback unless told otherwise: the manifests say 0.0.0.0 for themselves.
    #[test]
    fn metrics_are_served_on_loopback_by_default() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from(["metascript", "run"]).unwrap();
        let crate::cli::Command::Run(args) = cli.command else {
            panic!("not run");
        };
        if std::env::var_os("METASCRIPT_METRICS_ADDR").is_none() {
            assert_eq!(args.metrics_addr, "127.0.0.1:9090");
        }
    }

    #[test]
    fn the_webhook_body_limit_defaults_to_the_hooks_default_and_reads_a_quantity() {
        use clap::Parser as _;
        let parsed = |args: &[&str]| {
            let cli = crate::cli::Cli::try_parse_from(args).unwrap();
            let crate::cli::Command::Run(args) = cli.command else {
                panic!("not run");
            };
            args.webhook_max_response_bytes
        };
        if std::env::var_os("METASCRIPT_WEBHOOK_MAX_RESPONSE_BYTES").is_none() {
            assert_eq!(
                parsed(&["metascript", "run"]),
                crate::hooks::DEFAULT_MAX_RESPONSE_BYTES
            );
        }
        let given = ["metascript", "run", "--webhook-max-response-bytes", "1Mi"];
        assert_eq!(parsed(&given), 1 << 20);
    }

    #[test]
    fn webhook_allow_entries_are_read_and_empty_ones_list_nothing() {
        let given =
            |list: &[&str]| webhook_allow(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(given(&[""]).unwrap().is_empty());
        let entries = given(&["10.96.0.0/12", "", " *.svc.cluster.local"]).unwrap();
        let shown: Vec<String> = entries.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.96.0.0/12", "*.svc.cluster.local"]);
        let error = given(&["10.0.0.1", "https://hooks.example.com"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "--webhook-allow \"https://hooks.example.com\": give a host name, an address or a \
             CIDR range, without a scheme, port, path or user"
        );
    }

    #[test]
    fn lease_durations_are_whole_seconds_of_at_least_three() {
        assert_eq!(parse_lease_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_lease_duration("1m"), Ok(Duration::from_secs(60)));
        for bad in ["2s", "1.5s", "soon", "-5s"] {
            let error = parse_lease_duration(bad).expect_err(bad);
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn script_memory_is_a_byte_quantity_and_the_share_a_fraction() {
        assert_eq!(parse_quantity("256Mi"), Ok(256 << 20));
        assert_eq!(parse_quantity("1Gi"), Ok(1 << 30));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("4096"), Ok(4096));
        for bad in ["", "0", "12MB", "-1Gi", "1.5Gi"] {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_share("0.25"), Ok(0.25));
        assert_eq!(parse_share("1"), Ok(1.0));
        for bad in ["0", "1.5", "half", "-0.5"] {
            assert!(parse_share(bad).is_err(), "{bad}");
        }
    }
}
