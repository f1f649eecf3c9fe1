//! `metascript lsp`: the language server, with what it needs from this layer: `metascript
//! test`'s harness for its code lenses and, when told to read a cluster, the reading of the
//! cluster's CustomResourceDefinitions through the kubeconfig handling the other commands share.

use super::harness::LensRunner;
use crate::lsp::{ClusterCrds, ClusterError};
use kube::config::ExecInteractiveMode;
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Reading a cluster is asked for, never assumed: the editor's environment names whatever
/// cluster is current (a production one, a credential plugin that opens a browser), and an
/// editor that merely opened a file must not reach it.
#[derive(Debug, clap::Args)]
pub(crate) struct LspArgs {
    /// What to log, to standard error (which editors keep in their LSP log), as a tracing
    /// filter (`debug` shows how long each check took). Kube's client is quiet by default: the
    /// server says once, itself, why a cluster could not be read.
    #[arg(long, default_value = "warn,kube_client=off")]
    pub log: String,
    /// Read the CustomResourceDefinitions of this kubeconfig's cluster (at start, and again on
    /// the editor's `metascript.readCluster` command): completion and checks then know the
    /// custom resources the workspace does not define. In the background: the editor is
    /// answered meanwhile, and a cluster that does not answer is one warning.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Read the cluster of this context (of --kubeconfig, else of $KUBECONFIG or
    /// ~/.kube/config).
    #[arg(long)]
    pub context: Option<String>,
    /// Read the cluster of $KUBECONFIG or ~/.kube/config (its current context), or the
    /// in-cluster config. Without this, --kubeconfig or --context, no cluster is read.
    #[arg(long)]
    pub cluster: bool,
}

impl LspArgs {
    /// The cluster to read, if one is asked for.
    fn cluster(&self) -> Option<Arc<dyn ClusterCrds>> {
        (self.cluster || self.kubeconfig.is_some() || self.context.is_some()).then(|| {
            Arc::new(KubeCrds {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
            }) as Arc<dyn ClusterCrds>
        })
    }
}

pub(super) fn run(args: LspArgs) -> ExitCode {
    if let Err(error) = super::logging::init(&args.log, false, None) {
        eprintln!("error: {error}");
        return ExitCode::FAILURE;
    }
    match crate::lsp::serve_stdio(&LensRunner, args.cluster()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A cluster's CustomResourceDefinitions, read through a kubeconfig.
struct KubeCrds {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
}

impl ClusterCrds for KubeCrds {
    fn describe(&self) -> String {
        match (&self.kubeconfig, &self.context) {
            (Some(path), Some(context)) => {
                format!("the cluster of context {context} in {}", path.display())
            }
            (Some(path), None) => format!("the cluster of {}", path.display()),
            (None, Some(context)) => format!("the cluster of context {context}"),
            (None, None) => "the current cluster".into(),
        }
    }

    fn read(&self, within: Duration) -> Result<Vec<Value>, ClusterError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        // Cancelled at the bound: kube sets no read timeout, and a server that accepts the
        // connection and never answers would hold this thread and its socket for good.
        runtime.block_on(async {
            tokio::time::timeout(within, self.list())
                .await
                .map_err(|_| ClusterError::TimedOut(within))?
        })
    }
}

impl KubeCrds {
    async fn list(&self) -> Result<Vec<Value>, ClusterError> {
        let mut config =
            super::run::kube_config_for(self.kubeconfig.as_deref(), self.context.as_deref())
                .await
                // The first line: the rest is a hint about starting a local operator.
                .map_err(|error| {
                    let message = format!("{error:#}");
                    ClusterError::Config(message.lines().next().unwrap_or_default().into())
                })?;
        // The server's standard input is the editor's messages: a credential plugin allowed
        // to prompt would be handed it, and read them.
        if let Some(exec) = &mut config.auth_info.exec {
            exec.interactive_mode = Some(ExecInteractiveMode::Never);
        }
        let client = kube::Client::try_from(config)
            .map_err(|error| ClusterError::Config(error.to_string()))?;
        super::cluster::crds(client)
            .await
            .map_err(ClusterError::List)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(line: &[&str]) -> LspArgs {
        let cli = crate::cli::Cli::try_parse_from(line).unwrap();
        let crate::cli::Command::Lsp(args) = cli.command else {
            panic!("not lsp");
        };
        args
    }

    #[test]
    fn a_cluster_is_read_only_when_asked_for() {
        assert!(args(&["metascript", "lsp"]).cluster().is_none());
        let read = |line: &[&str]| args(line).cluster().map(|cluster| cluster.describe());
        assert_eq!(
            read(&["metascript", "lsp", "--cluster"]).as_deref(),
            Some("the current cluster")
        );
        assert_eq!(
            read(&["metascript", "lsp", "--kubeconfig", "dev.yaml"]).as_deref(),
            Some("the cluster of dev.yaml")
        );
        assert_eq!(
            read(&["metascript", "lsp", "--context", "kind-dev"]).as_deref(),
            Some("the cluster of context kind-dev")
        );
    }
}
