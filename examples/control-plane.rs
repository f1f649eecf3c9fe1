//! Starts a throwaway Kubernetes control plane on loopback for the demo and for poking around.
//!
//! ```sh
//! hack/control-plane/build.sh            # once; cached afterwards
//! cargo run --example control-plane
//! ```
//!
//! It prints the `KUBECONFIG` to export, then runs until Ctrl-C (or SIGTERM) and cleans up.
//!
//! By default the plane behaves like a cluster: every kube-controller-manager controller,
//! kube-scheduler, and kwok simulating 3 Nodes, so workloads get Pods that run and become Ready.
//! `--nodes N` simulates N Nodes (hundreds are fine); `--lean` starts only etcd, kube-apiserver
//! and the garbage-collector and namespace controllers (quicker and lighter; no Pods ever).
//!
//! `--install-crds` installs the metascript CRDs (and waits until they are served) before the
//! plane counts as ready, so an operator can start against it at once.
//!
//! `--kubeconfig PATH` also writes the admin kubeconfig to PATH once the plane is ready (and
//! removes it on exit), so a script can wait for that file instead of parsing the output; this
//! is what `hack/demo.sh` and `hack/run-local.sh` do.

use std::path::{Path, PathBuf};

use metascript::testing::{ControlPlane, Flavor, install_crds, kubectl};

const USAGE: &str =
    "usage: control-plane [--lean | --nodes N] [--install-crds] [--kubeconfig PATH]";

struct Args {
    flavor: Flavor,
    /// `--kubeconfig PATH`, if given.
    kubeconfig: Option<PathBuf>,
    install_crds: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = std::env::args().skip(1);
    let mut kubeconfig = None;
    let mut lean = false;
    let mut install_crds = false;
    let mut nodes = None;
    while let Some(arg) = args.next() {
        // `--flag value` and `--flag=value` alike.
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value; {USAGE}"))
        };
        match flag.as_str() {
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value()?)),
            "--nodes" => {
                let n: usize = value()?
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--nodes: {e}"))?;
                anyhow::ensure!(n > 0, "--nodes must be at least 1 (or use --lean)");
                nodes = Some(n);
            }
            "--lean" if inline.is_none() => lean = true,
            "--install-crds" if inline.is_none() => install_crds = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => anyhow::bail!("unknown argument {arg}; {USAGE}"),
        }
    }
    let flavor = match (lean, nodes) {
        (true, Some(_)) => anyhow::bail!("--lean has no Nodes; {USAGE}"),
        (true, None) => Flavor::Lean,
        (false, nodes) => Flavor::Cluster {
            nodes: nodes.unwrap_or(Flavor::DEFAULT_NODES),
        },
    };
    Ok(Args {
        flavor,
        kubeconfig,
        install_crds,
    })
}

/// Copies the kubeconfig under a temporary name and renames it into place, so whoever waits for
/// `to` never reads a half-written file.
fn publish_kubeconfig(from: &Path, to: &Path) -> anyhow::Result<()> {
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::copy(from, &tmp).map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, to).map_err(|e| anyhow::anyhow!("writing {}: {e}", to.display()))?;
    Ok(())
}

/// Waits for Ctrl-C or SIGTERM.
async fn stopped(term: &mut tokio::signal::unix::Signal) {
    tokio::select! {
        // An error installing the handler leaves SIGTERM to stop us.
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "metascript=info".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    let args = parse_args()?;
    let kubeconfig_copy = args.kubeconfig;
    // Handlers first: a stop request while the plane is still starting must also clean up (the
    // default SIGTERM action would skip destructors and leave the plane's directory behind).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let started = std::time::Instant::now();
    let plane = tokio::select! {
        plane = ControlPlane::start_with(args.flavor) => plane?,
        // Dropping the unfinished start kills what it started and removes its directory.
        _ = stopped(&mut term) => return Ok(()),
    };
    let client = plane.client().await?;
    let version = client.apiserver_version().await?;
    if args.install_crds {
        install_crds(&client).await?;
    }

    let what = match args.flavor {
        Flavor::Lean => "lean: garbage collector and namespace controllers only".to_string(),
        Flavor::Cluster { nodes } => format!(
            "every controller, kube-scheduler, kwok with {nodes} simulated Node{}",
            if nodes == 1 { "" } else { "s" }
        ),
    };
    println!(
        "Kubernetes {} is up at {} ({what}{}; started in {:.1?}).",
        version.git_version,
        plane.server(),
        if args.install_crds {
            "; metascript CRDs installed"
        } else {
            ""
        },
        started.elapsed()
    );
    let kubeconfig = match &kubeconfig_copy {
        Some(path) => {
            // The copy keeps the private file's mode: it holds the admin key.
            publish_kubeconfig(plane.kubeconfig_path(), path)?;
            path.as_path()
        }
        None => plane.kubeconfig_path(),
    };
    println!();
    println!("  export KUBECONFIG={}", kubeconfig.display());
    match kubectl() {
        Some(kubectl) => println!("  {} get namespaces", kubectl.display()),
        None => println!("  kubectl get namespaces    # build it: hack/control-plane/build.sh"),
    }
    println!();
    println!("Logs are in {}.", plane.dir().display());
    println!("Press Ctrl-C to stop and clean up.");

    stopped(&mut term).await;
    println!("Stopping...");
    if let Some(path) = &kubeconfig_copy {
        // It names a plane that no longer exists.
        let _ = std::fs::remove_file(path);
    }
    drop(plane);
    Ok(())
}
