//! `metascript run`: the operator.

use crate::runtime::{Operator, OperatorConfig};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kubeconfig to use; without it, $KUBECONFIG (a list is merged), ~/.kube/config or the
    /// in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long)]
    pub context: Option<String>,
    /// How many objects are synced at once.
    #[arg(long, default_value_t = 8, env = "METASCRIPT_WORKERS")]
    pub workers: usize,
    /// Dev loop: a file in this directory named like a hook's ConfigMap key is used instead of
    /// that key, and saving it re-syncs the affected targets.
    #[arg(long, env = "METASCRIPT_SCRIPTS_DIR")]
    pub scripts_dir: Option<PathBuf>,
    /// Seconds between controller status updates (written only when changed).
    #[arg(long, default_value_t = 2.0)]
    pub status_interval: f64,
    /// Serve only the DecoratorControllers and MapControllers whose labels match this selector
    /// (kubectl syntax, e.g. `team=payments` or `shard notin (b)`), so several operators can
    /// share a cluster or a canary can take a few controllers.
    #[arg(long, env = "METASCRIPT_CONTROLLER_SELECTOR")]
    pub controller_selector: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz; `none` turns the endpoint off.
    #[arg(long, default_value = "0.0.0.0:9090", env = "METASCRIPT_METRICS_ADDR")]
    pub metrics_addr: String,
    /// Log filter, in tracing's env-filter syntax.
    #[arg(long, default_value = "info", env = "METASCRIPT_LOG")]
    pub log: String,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    pub log_json: bool,
}

pub fn run(args: RunArgs) -> ExitCode {
    init_logging(&args.log, args.log_json);
    let runtime = match tokio::runtime::Runtime::new() {
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
    if args.status_interval.is_nan() || args.status_interval <= 0.0 {
        anyhow::bail!("--status-interval must be a positive number of seconds");
    }
    let metrics_addr: Option<std::net::SocketAddr> = match args.metrics_addr.as_str() {
        "none" | "" => None,
        addr => Some(
            addr.parse()
                .with_context(|| format!("--metrics-addr {addr:?}: expected HOST:PORT or none"))?,
        ),
    };
    let client = client(&args).await?;
    let config = OperatorConfig {
        workers: args.workers.max(1),
        scripts_dir: args.scripts_dir.clone(),
        status_interval: Duration::from_secs_f64(args.status_interval),
        controller_selector: args.controller_selector.clone(),
    };
    let ready = Arc::new(AtomicBool::new(false));
    let operator = Operator::start(client, config).await?;
    ready.store(true, Ordering::Relaxed);
    let endpoint = match metrics_addr {
        Some(addr) => {
            // Bind before serving so a taken port is an error at start, not a silent log line.
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-addr {addr}"))?;
            let (metrics, ready) = (operator.metrics().clone(), ready.clone());
            Some(tokio::spawn(async move {
                if let Err(error) = crate::runtime::metrics::serve(listener, &metrics, ready).await
                {
                    tracing::error!(%error, "the metrics endpoint stopped");
                }
            }))
        }
        None => None,
    };
    shutdown_signal().await;
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    tracing::info!("shutting down");
    operator.shutdown().await;
    Ok(())
}

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("finding a cluster (kubeconfig or in-cluster)")?,
    };
    Ok(kube::Client::try_from(config)?)
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

fn init_logging(filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
