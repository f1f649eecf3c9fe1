//! What the commands that look at a live cluster (`explain`, `diff`, `lsp`, `rollout`, `top`) read from it,
//! read-only: the types it serves, its controllers, objects as hooks see them, the ConfigMaps
//! and Secrets a controller's hooks load from, and its CustomResourceDefinitions.

use super::offline::OfflineController;
use crate::api::{ControllerSpec, CredentialSource};
use crate::kinds;
use crate::object;
use crate::resources::{ResourceType, StaticResolver, TypeInfo};
use anyhow::Context as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use serde_json::Value;
use std::path::Path;

/// The types a cluster serves, as discovery found them.
pub(super) struct ServedTypes {
    /// Resolves the types controllers name.
    pub types: StaticResolver,
    /// Each served type with what the client needs to reach it, preferred versions first.
    pub resources: Vec<(ResourceType, ApiResource)>,
}

/// A client for the kubeconfig given (or $KUBECONFIG, ~/.kube/config, the in-cluster config),
/// as `metascript run` finds it.
pub(super) async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let config = super::run::kube_config_for(kubeconfig, context).await?;
    Ok(kube::Client::try_from(config)?)
}

impl ServedTypes {
    pub(super) async fn discover(client: &kube::Client) -> anyhow::Result<ServedTypes> {
        let discovery = kube::discovery::Discovery::new(client.clone())
            .run()
            .await
            .context("discovering the cluster's types")?;
        let mut types = StaticResolver::with_builtins();
        let mut resources = Vec::new();
        for group in discovery.groups() {
            // The preferred version first, so a bare kind finds it.
            for (api, capabilities) in group.recommended_resources() {
                let resolved =
                    crate::runtime::watch::discovery::resolved_type(api.clone(), &capabilities);
                types.insert(resolved.resource.clone());
                resources.push((resolved.resource, api));
            }
        }
        Ok(ServedTypes { types, resources })
    }

    /// A served type by kind, plural or singular (case-insensitive), optionally `.group`.
    pub(super) fn find(&self, wanted: &str) -> Option<(ResourceType, ApiResource)> {
        let wanted = wanted.to_lowercase();
        let (name, group) = match wanted.split_once('.') {
            Some((name, group)) => (name.to_string(), Some(group.to_string())),
            None => (wanted.clone(), None),
        };
        self.resources
            .iter()
            .find(|(resource, api)| {
                let names = [
                    resource.kind.to_lowercase(),
                    api.plural.clone(),
                    api.plural.trim_end_matches('s').to_string(),
                ];
                names.contains(&name) && group.as_ref().is_none_or(|g| api.group == *g)
            })
            .cloned()
    }

    /// How the client reaches a resolved type, when the cluster serves it.
    pub(super) fn api_resource(&self, resource: &ResourceType) -> Option<&ApiResource> {
        self.resources
            .iter()
            .find(|(served, _)| served == resource)
            .map(|(_, api)| api)
    }

    /// Every controller of every kind in the cluster (those that do not parse are left out).
    pub(super) async fn controllers(
        &self,
        client: &kube::Client,
    ) -> anyhow::Result<Vec<OfflineController>> {
        let mut controllers = Vec::new();
        for kind in kinds::ALL.iter().copied() {
            let Some((_, api_resource)) = self.resources.iter().find(|(resource, _)| {
                resource.api_version == crate::api::API_VERSION
                    && resource.kind == kind.name().object_kind()
            }) else {
                continue;
            };
            let listed = Api::<DynamicObject>::all_with(client.clone(), api_resource)
                .list(&ListParams::default())
                .await
                .map(|list| list.items)
                .unwrap_or_default();
            for object in listed {
                let object = value(object, api_resource);
                if let Ok(controller) = kind.parse(&object) {
                    controllers.push(OfflineController {
                        kind,
                        controller,
                        object,
                    });
                }
            }
        }
        Ok(controllers)
    }

    /// Every object of a type, in one namespace or in all, as hooks see them.
    pub(super) async fn list(
        &self,
        client: &kube::Client,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> anyhow::Result<Vec<Value>> {
        let api_resource = self
            .api_resource(resource)
            .with_context(|| format!("the cluster does not serve {}", resource.group_key()))?;
        let listed = api(client, api_resource, resource.scope(namespace))
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}", resource.group_key()))?;
        Ok(listed
            .items
            .into_iter()
            .map(|o| value(o, api_resource))
            .collect())
    }
}

/// How the client reaches a kind's controller objects (every kind is cluster-scoped).
pub(super) fn controller_resource(kind: &dyn kinds::ControllerKind) -> ApiResource {
    ResourceType::from(TypeInfo {
        api_version: crate::api::API_VERSION.to_string(),
        kind: kind.name().object_kind().to_string(),
        plural: kind.name().plural().to_string(),
        namespaced: false,
        has_status: true,
    })
    .api_resource()
}

pub(super) fn api(
    client: &kube::Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, resource),
        None => Api::all_with(client.clone(), resource),
    }
}

/// An object as hooks see it: plain JSON with apiVersion and kind, without managedFields (the
/// operator's caches drop them too).
pub(super) fn value(object: DynamicObject, api: &ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = api.api_version.clone().into();
    value["kind"] = api.kind.clone().into();
    if let Some(metadata) = object::metadata_mut(&mut value) {
        metadata.remove("managedFields");
    }
    value
}

/// What a controller's hooks load from: the ConfigMaps of its scripts and libraries, and the
/// Secrets and ConfigMaps of its webhooks' credentials. What is missing is left out, so loading
/// names it; a credential the user may not read is left out too (loading then says which).
pub(super) async fn hook_sources(
    client: &kube::Client,
    spec: &ControllerSpec,
) -> anyhow::Result<Vec<Value>> {
    let mut sources: Vec<(&str, String, String)> = spec
        .config_map_refs()
        .map(|r| ("ConfigMap", r.namespace.clone(), r.name.clone()))
        .collect();
    sources.extend(
        spec.credential_sources()
            .into_iter()
            .map(|source| match source {
                CredentialSource::Secret { namespace, name } => ("Secret", namespace, name),
                CredentialSource::ConfigMap { namespace, name } => ("ConfigMap", namespace, name),
            }),
    );
    sources.sort();
    sources.dedup();
    let mut found = Vec::new();
    for (kind, namespace, name) in sources {
        let read = match kind {
            "Secret" => Api::<Secret>::namespaced(client.clone(), &namespace)
                .get_opt(&name)
                .await
                .map(|s| s.map(|s| serde_json::to_value(s).unwrap_or_default())),
            _ => Api::<ConfigMap>::namespaced(client.clone(), &namespace)
                .get_opt(&name)
                .await
                .map(|c| c.map(|c| serde_json::to_value(c).unwrap_or_default())),
        };
        let mut value = match read {
            Ok(Some(value)) => value,
            Ok(None) => continue,
            Err(kube::Error::Api(status)) if status.code == 403 && kind == "Secret" => continue,
            Err(error) => {
                return Err(error).with_context(|| format!("reading {kind} {namespace}/{name}"));
            }
        };
        value["apiVersion"] = "v1".into();
        value["kind"] = kind.into();
        found.push(value);
    }
    Ok(found)
}

/// CustomResourceDefinitions per page: a cluster may have thousands, each with its whole schema.
const CRD_PAGE: u32 = 100;

/// The cluster's CustomResourceDefinitions, a page at a time, as
/// [`crate::schema::crd_essentials`] keeps them.
pub(super) async fn crds(client: kube::Client) -> Result<Vec<Value>, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let mut read = Vec::new();
    let mut params = ListParams::default().limit(CRD_PAGE);
    loop {
        let page = crds.list(&params).await?;
        read.extend(page.items.into_iter().map(crate::schema::crd_essentials));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(read),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crd_is_kept_without_its_status_and_bookkeeping() {
        let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "resourceVersion": "7",
                         "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": [{"name": "v1", "served": true, "storage": true}]},
            "status": {"storedVersions": ["v1"]}
        }))
        .unwrap();
        let kept = crate::schema::crd_essentials(crd);
        assert_eq!(
            kept["metadata"],
            serde_json::json!({"name": "widgets.example.com"})
        );
        assert_eq!(kept["spec"]["names"]["kind"], "Widget");
        assert!(kept.get("status").is_none());
        // What the server's resolver takes.
        assert!(crate::resources::StaticResolver::default().add_crd(&kept));
    }
}
