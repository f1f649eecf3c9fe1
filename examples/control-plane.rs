//! Starts a throwaway Kubernetes control plane on loopback for the demo and for poking around.
//!
//! ```sh
//! hack/control-plane/build.sh            # once; cached afterwards
//! cargo run --example control-plane
//! ```
//!
//! It prints the `KUBECONFIG` to export, then runs until Ctrl-C (or SIGTERM) and cleans up.
//!
//! `--kubeconfig PATH` also writes the admin kubeconfig to PATH once the plane is ready (and
//! removes it on exit), so a script can wait for that file instead of parsing the output; this
//! is what `hack/demo.sh` does.

use std::path::{Path, PathBuf};

use metascript::testing::{ControlPlane, kubectl};

/// The kubectl `hack/control-plane/build.sh` puts next to the control-plane binaries, if any.
/// The `--kubeconfig PATH` argument, if given.
fn kubeconfig_arg() -> anyhow::Result<Option<PathBuf>> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kubeconfig" => match args.next() {
                Some(value) => path = Some(PathBuf::from(value)),
                None => anyhow::bail!("--kubeconfig needs a path"),
            },
            _ => match arg.strip_prefix("--kubeconfig=") {
                Some(value) => path = Some(PathBuf::from(value)),
                None => anyhow::bail!(
                    "unknown argument {arg}; usage: control-plane [--kubeconfig PATH]"
                ),
            },
        }
    }
    Ok(path)
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

    let kubeconfig_copy = kubeconfig_arg()?;
    // Handlers first: a stop request while the plane is still starting must also clean up (the
    // default SIGTERM action would skip destructors and leave the plane's directory behind).
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let started = std::time::Instant::now();
    let plane = tokio::select! {
        plane = ControlPlane::start() => plane?,
        // Dropping the unfinished start kills what it started and removes its directory.
        _ = stopped(&mut term) => return Ok(()),
    };
    let client = plane.client().await?;
    let version = client.apiserver_version().await?;

    println!(
        "Kubernetes {} is up at {} (started in {:.1?}).",
        version.git_version,
        plane.server(),
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
