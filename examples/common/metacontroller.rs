//! What the benchmarks that run Metacontroller beside metascript share: its binary and CRDs
//! from the command line, and when it answers. Nothing of
//! Metacontroller is in this repository: the user builds its `metacontroller` command from its
//! own source tree and gives the binary and that tree's CRD manifest by path
//! (docs/performance.md, "Beside Metacontroller").

use super::process::OperatorProcess;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use std::path::PathBuf;

/// Metacontroller's binary and the CRDs it needs installed.
pub struct Metacontroller {
    pub bin: PathBuf,
    pub crds: Vec<CustomResourceDefinition>,
}

impl Metacontroller {
    /// From `--metacontroller BIN` and `--metacontroller-crds FILE`, which go together;
    /// `None` when neither is given.
    pub fn from_args(
        bin: Option<PathBuf>,
        crds: Option<PathBuf>,
    ) -> anyhow::Result<Option<Metacontroller>> {
        let (bin, crds) = match (bin, crds) {
            (None, None) => return Ok(None),
            (Some(bin), Some(crds)) => (bin, crds),
            _ => anyhow::bail!("--metacontroller and --metacontroller-crds go together"),
        };
        anyhow::ensure!(
            bin.is_file(),
            "--metacontroller {}: no such file",
            bin.display()
        );
        let read = || -> anyhow::Result<Vec<CustomResourceDefinition>> {
            let text = std::fs::read_to_string(&crds)?;
            metascript::yaml::parse_documents(&text)?
                .into_iter()
                .map(|document| Ok(serde_json::from_value(document)?))
                .collect()
        };
        let crds = read().map_err(|error| {
            anyhow::anyhow!("--metacontroller-crds {}: {error}", crds.display())
        })?;
        Ok(Some(Metacontroller { bin, crds }))
    }
}

/// Whether a Metacontroller process serves its metrics yet (it has no readiness of its own
/// before a controller exists).
pub fn answers(process: &OperatorProcess) -> bool {
    process.metric("go_goroutines").is_some()
}
