//! Starts a throwaway Kubernetes control plane on loopback for the demo and for poking around.
//!
//! ```sh
//! hack/control-plane/build.sh            # once; cached afterwards
//! cargo run --example control-plane
//! ```
//!
//! It prints the `KUBECONFIG` to export, then runs until Ctrl-C (or SIGTERM) and cleans up.

use std::path::PathBuf;

use metascript::testing::{BIN_DIR_ENV, ControlPlane, default_bin_dir};

/// The kubectl `hack/control-plane/build.sh` puts next to the control-plane binaries, if any.
fn kubectl() -> Option<PathBuf> {
    let dir = std::env::var_os(BIN_DIR_ENV)
        .map(PathBuf::from)
        .or_else(default_bin_dir)?;
    Some(dir.join("kubectl")).filter(|path| path.is_file())
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

    let started = std::time::Instant::now();
    let plane = ControlPlane::start().await?;
    let client = plane.client().await?;
    let version = client.apiserver_version().await?;

    println!(
        "Kubernetes {} is up at {} (started in {:.1?}).",
        version.git_version,
        plane.server(),
        started.elapsed()
    );
    println!();
    println!("  export KUBECONFIG={}", plane.kubeconfig_path().display());
    match kubectl() {
        Some(kubectl) => println!("  {} get namespaces", kubectl.display()),
        None => println!("  kubectl get namespaces    # build it: hack/control-plane/build.sh"),
    }
    println!();
    println!("Logs are in {}.", plane.dir().display());
    println!("Press Ctrl-C to stop and clean up.");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = term.recv() => {}
    }
    println!("Stopping...");
    drop(plane);
    Ok(())
}
