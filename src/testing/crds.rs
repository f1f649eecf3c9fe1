//! Installing the metascript CRDs into a cluster, for tests, benchmarks and the demo.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

/// How long a CRD may take to become Established. It normally takes well under a second; the
/// margin is for a loaded 2-core CI machine.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallCrdsError {
    /// The apply request failed.
    #[error("installing CRD {name}: {source}")]
    Apply {
        /// The CRD's name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The apiserver accepted the CRD but never served it.
    #[error("CRD {name} did not become Established within {timeout:?}")]
    NotEstablished {
        /// The CRD's name.
        name: String,
        /// How long was waited.
        timeout: Duration,
    },
}

/// Applies every metascript CRD (server-side, forced, so a re-run simply updates them) and waits
/// until each is Established: the operator resolves its types through discovery at start, so a
/// CRD that is stored but not yet served would make it fail.
pub async fn install_crds(client: &kube::Client) -> Result<(), InstallCrdsError> {
    install_these_crds(client, crate::kinds::all_crds()).await
}

/// Applies `these` CRDs as [`install_crds`] does its own (a benchmark installs another
/// system's beside them).
pub async fn install_these_crds(
    client: &kube::Client,
    these: impl IntoIterator<Item = CustomResourceDefinition>,
) -> Result<(), InstallCrdsError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in these {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(
            &name,
            &PatchParams::apply("metascript.dev/testing").force(),
            &Patch::Apply(&crd),
        )
        .await
        .map_err(|source| InstallCrdsError::Apply {
            name: name.clone(),
            source,
        })?;
        let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
        while !established(&crds, &name).await {
            if tokio::time::Instant::now() > deadline {
                return Err(InstallCrdsError::NotEstablished {
                    name,
                    timeout: ESTABLISH_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) -> bool {
    // A failed read is treated like "not yet": the deadline reports it if it persists.
    crds.get(name)
        .await
        .ok()
        .and_then(|crd| crd.status)
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True")
}
