//! Resolving `apiVersion` + plural `resource` to a full type through the apiserver's discovery.
//!
//! Results are cached for the life of the process. A miss re-discovers just that group/version,
//! so a CustomResourceDefinition created after start is found without a restart, but at most
//! once per [`REFRESH_INTERVAL`] per group/version, so a typo in a controller that is retried in
//! a loop cannot turn into a stream of discovery requests.

use crate::api::ResourceRef;
use crate::resources::{ResolveError, ResourceResolver, ResourceType, TypeInfo};
use kube::core::gvk::GroupVersion;
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest time between two discoveries of the same group/version.
pub(crate) const REFRESH_INTERVAL: Duration = Duration::from_secs(2);

/// A resolved type: what the controllers reason about, and what a client needs to call the API.
#[derive(Clone, Debug)]
pub struct ResolvedType {
    pub resource: ResourceType,
    pub api: ApiResource,
}

/// The outcome of the last discovery of one group/version, for rate limiting.
struct Refresh {
    at: Instant,
    /// Why it failed, if it did; repeated to callers until the next refresh is allowed.
    error: Option<String>,
}

/// Discovery with a cache; shared by every controller of the operator.
pub struct Discovery {
    client: kube::Client,
    /// Keyed by (apiVersion, plural).
    known: RwLock<HashMap<(String, String), ResolvedType>>,
    /// One async lock per group/version: concurrent misses of the same group/version wait for
    /// one discovery instead of each making their own (or being refused by the rate limit).
    refreshes: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Refresh>>>>>,
}

impl Discovery {
    pub fn new(client: kube::Client) -> Arc<Discovery> {
        Arc::new(Discovery {
            client,
            known: RwLock::default(),
            refreshes: Mutex::default(),
        })
    }

    /// Resolves a reference, discovering its group/version on a cache miss (rate-limited).
    pub async fn resolve(&self, reference: &ResourceRef) -> Result<ResolvedType, ResolveError> {
        if let Some(resolved) = self.cached(reference) {
            return Ok(resolved);
        }
        let gv = parse_group_version(reference)?;
        let api_version = gv.api_version();
        let slot = self
            .refreshes
            .lock()
            .entry(api_version.clone())
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        // Another caller may have refreshed while this one waited for the lock.
        if let Some(resolved) = self.cached(reference) {
            return Ok(resolved);
        }
        if let Some(refresh) = last.as_ref().filter(|r| r.at.elapsed() < REFRESH_INTERVAL) {
            return Err(match &refresh.error {
                Some(message) => discovery_error(reference, message.clone()),
                None => unknown(reference),
            });
        }
        let started = Instant::now();
        let outcome = self.discover(&gv).await;
        tracing::debug!(
            api_version = %api_version,
            resource = %reference.resource,
            elapsed_ms = started.elapsed().as_millis() as u64,
            ok = outcome.is_ok(),
            "discovered group/version after a cache miss"
        );
        *last = Some(Refresh {
            at: Instant::now(),
            error: outcome.as_ref().err().cloned(),
        });
        match outcome {
            Ok(()) => self.cached(reference).ok_or_else(|| unknown(reference)),
            Err(message) => {
                tracing::warn!(api_version = %api_version, error = %message, "API discovery failed");
                Err(discovery_error(reference, message))
            }
        }
    }

    /// The cached resolution of a reference, without asking the apiserver.
    pub(crate) fn cached(&self, reference: &ResourceRef) -> Option<ResolvedType> {
        self.known
            .read()
            .get(&(reference.api_version.clone(), reference.resource.clone()))
            .cloned()
    }

    /// The client-side description of a type resolved earlier.
    pub fn api_resource(&self, resource: &ResourceType) -> Option<ApiResource> {
        self.known
            .read()
            .get(&(resource.api_version.clone(), resource.plural.clone()))
            .map(|resolved| resolved.api.clone())
    }

    /// Replaces the cached types of one group/version with what the apiserver serves now. A
    /// group/version the apiserver does not serve (404) is an empty success: it has no types.
    async fn discover(&self, gv: &GroupVersion) -> Result<(), String> {
        let resources = match discovery::pinned_group(&self.client, gv).await {
            Ok(group) => group.versioned_resources(&gv.version),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            Err(error) => return Err(error.to_string()),
        };
        let api_version = gv.api_version();
        let mut known = self.known.write();
        // Types removed from the group/version (a deleted CRD version) stop resolving.
        known.retain(|(known_version, _), _| *known_version != api_version);
        for (api, capabilities) in resources {
            let resolved = resolved_type(api, &capabilities);
            known.insert(
                (
                    resolved.resource.api_version.clone(),
                    resolved.resource.plural.clone(),
                ),
                resolved,
            );
        }
        Ok(())
    }
}

/// Resolution from what discovery has already found, without a request: the operator resolves
/// every type a controller names (asynchronously) before it builds the controller's planner,
/// so planning code can stay synchronous and never blocks a thread on the network.
impl ResourceResolver for Discovery {
    fn resolve(&self, reference: &ResourceRef) -> Result<ResourceType, ResolveError> {
        self.cached(reference)
            .map(|resolved| resolved.resource)
            .ok_or_else(|| unknown(reference))
    }
}

pub(crate) fn resolved_type(api: ApiResource, capabilities: &ApiCapabilities) -> ResolvedType {
    ResolvedType {
        resource: ResourceType::from(TypeInfo {
            api_version: api.api_version.clone(),
            kind: api.kind.clone(),
            plural: api.plural.clone(),
            namespaced: capabilities.scope == Scope::Namespaced,
            has_status: capabilities
                .subresources
                .iter()
                .any(|(subresource, _)| subresource.plural == "status"),
        }),
        api,
    }
}

/// `v1` or `<group>/<version>`; anything else cannot name a served type.
fn parse_group_version(reference: &ResourceRef) -> Result<GroupVersion, ResolveError> {
    let gv: GroupVersion = reference
        .api_version
        .parse()
        .map_err(|_| unknown(reference))?;
    let valid = !gv.version.is_empty()
        && !gv.version.contains('/')
        && (reference.api_version.contains('/') != gv.group.is_empty());
    if valid {
        Ok(gv)
    } else {
        Err(unknown(reference))
    }
}

fn unknown(reference: &ResourceRef) -> ResolveError {
    ResolveError::Unknown {
        api_version: reference.api_version.clone(),
        resource: reference.resource.clone(),
    }
}

fn discovery_error(reference: &ResourceRef, message: String) -> ResolveError {
    ResolveError::Discovery {
        api_version: reference.api_version.clone(),
        resource: reference.resource.clone(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(api_version: &str, resource: &str) -> ResourceRef {
        ResourceRef {
            api_version: api_version.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn malformed_api_versions_are_unknown_without_a_request() {
        for api_version in ["", "/v1", "apps/", "apps/v1/extra"] {
            assert!(
                matches!(
                    parse_group_version(&reference(api_version, "things")),
                    Err(ResolveError::Unknown { .. })
                ),
                "{api_version:?} was accepted"
            );
        }
        let core = parse_group_version(&reference("v1", "pods")).unwrap();
        assert_eq!((core.group.as_str(), core.version.as_str()), ("", "v1"));
        let apps = parse_group_version(&reference("apps/v1", "deployments")).unwrap();
        assert_eq!(apps.api_version(), "apps/v1");
    }

    #[test]
    fn scope_and_status_subresource_come_from_the_capabilities() {
        let api = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        };
        let status = ApiResource {
            plural: "status".into(),
            ..api.clone()
        };
        let capabilities = ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: vec![(
                status,
                ApiCapabilities {
                    scope: Scope::Namespaced,
                    subresources: Vec::new(),
                    operations: Vec::new(),
                },
            )],
            operations: Vec::new(),
        };
        let resolved = resolved_type(api.clone(), &capabilities);
        assert!(resolved.resource.namespaced && resolved.resource.has_status);
        assert_eq!(resolved.resource.group_key(), "Deployment.apps/v1");
        let bare = resolved_type(
            api,
            &ApiCapabilities {
                scope: Scope::Cluster,
                subresources: Vec::new(),
                operations: Vec::new(),
            },
        );
        assert!(!bare.resource.namespaced && !bare.resource.has_status);
    }

    #[tokio::test]
    async fn the_synchronous_resolver_answers_from_the_cache_only() {
        // Port 9 (discard) on loopback: any request would fail, so an answer proves none was made.
        let client =
            kube::Client::try_from(kube::Config::new("https://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let discovery = Discovery::new(client);
        let pods = reference("v1", "pods");
        assert!(matches!(
            ResourceResolver::resolve(&*discovery, &pods),
            Err(ResolveError::Unknown { .. })
        ));
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let capabilities = ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: Vec::new(),
            operations: Vec::new(),
        };
        discovery.known.write().insert(
            ("v1".into(), "pods".into()),
            resolved_type(api, &capabilities),
        );
        let resolved = ResourceResolver::resolve(&*discovery, &pods).unwrap();
        assert_eq!(resolved.kind, "Pod");
    }
}
