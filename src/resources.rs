//! Resource types: what `apiVersion` + `resource` resolve to (kind, scope, status subresource).
//!
//! The operator resolves through API discovery; `render` and the test harness resolve offline
//! from a table of built-in types plus any CustomResourceDefinitions they were given.

use crate::api::ResourceRef;
use crate::object;
use serde_json::Value;
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

/// A resolved resource type, shared: every object reference in the operator's indexes and
/// queue carries one, so a clone copies a pointer rather than three strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceType(Arc<TypeInfo>);

/// What a resource type is (read through [`ResourceType`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeInfo {
    pub api_version: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    pub has_status: bool,
}

impl From<TypeInfo> for ResourceType {
    fn from(info: TypeInfo) -> ResourceType {
        ResourceType(Arc::new(info))
    }
}

impl Deref for ResourceType {
    type Target = TypeInfo;

    fn deref(&self) -> &TypeInfo {
        &self.0
    }
}

impl ResourceType {
    /// The key hooks see this type under: `<Kind>.<apiVersion>` (e.g. `StatefulSet.apps/v1`).
    pub(crate) fn group_key(&self) -> String {
        format!("{}.{}", self.kind, self.api_version)
    }

    pub(crate) fn group(&self) -> &str {
        object::group_of(&self.api_version)
    }

    /// The kube-rs description used to address this type's API.
    pub fn api_resource(&self) -> kube::discovery::ApiResource {
        let (group, version) = match self.api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", self.api_version.as_str()),
        };
        kube::discovery::ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether a JSON object is of this type.
    pub(crate) fn describes(&self, object: &Value) -> bool {
        object::kind(object) == self.kind && object::api_version(object) == self.api_version
    }

    /// The namespace to look for objects of this type in: `namespace` when the type is
    /// namespaced, none (cluster scope, or every namespace) when it is not. This is the one
    /// place the rule lives: a cluster-scoped type ignores whatever namespace a caller has.
    pub(crate) fn scope<'a>(&self, namespace: Option<&'a str>) -> Option<&'a str> {
        namespace.filter(|_| self.namespaced)
    }

    /// The namespace `object` gives for this type: its own when the type is namespaced (e.g.
    /// a parent's namespace for its inputs or children), none otherwise.
    pub(crate) fn scope_of<'a>(&self, object: &'a Value) -> Option<&'a str> {
        self.scope(object::namespace(object))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error(
        "unknown resource {resource:?} in {api_version}: not a built-in type and no \
         CustomResourceDefinition for it was given"
    )]
    Unknown {
        api_version: String,
        resource: String,
    },
    #[error(
        "{api_version}/{resource} cannot be read by scripts (spec.reads): its objects hold \
         credentials, and reads go through the operator's own access"
    )]
    NotReadable {
        api_version: String,
        resource: String,
    },
    /// The type resolves, but cannot be used the way the controller asks.
    #[error("{api_version}/{resource} {reason}")]
    Unsupported {
        api_version: String,
        resource: String,
        reason: String,
    },
    #[error("discovery of {api_version}/{resource} failed: {message}")]
    Discovery {
        api_version: String,
        resource: String,
        message: String,
    },
}

/// Types that scripts may never read, whatever a controller declares: their contents are
/// credentials, and the operator's read-all role must not become a way to reach them.
pub(crate) const NEVER_READABLE: &[(&str, &str)] = &[("", "secrets")];

/// Whether a declared read is refused outright (see [`NEVER_READABLE`]).
pub(crate) fn never_readable(resource: &ResourceType) -> bool {
    NEVER_READABLE
        .iter()
        .any(|(group, plural)| resource.group() == *group && resource.plural == *plural)
}

/// Resolves the types a controller declares in `spec.reads`, refusing those scripts may never
/// read ([`never_readable`]).
pub(crate) fn resolve_reads(
    references: &[ResourceRef],
    resolver: &dyn ResourceResolver,
) -> Result<std::sync::Arc<[ResourceType]>, ResolveError> {
    references
        .iter()
        .map(|reference| {
            let resource = resolver.resolve(reference)?;
            if never_readable(&resource) {
                return Err(ResolveError::NotReadable {
                    api_version: reference.api_version.clone(),
                    resource: reference.resource.clone(),
                });
            }
            Ok(resource)
        })
        .collect()
}

/// Turns a user's `apiVersion` + `resource` into a full type description.
pub trait ResourceResolver {
    fn resolve(&self, reference: &ResourceRef) -> Result<ResourceType, ResolveError>;
}

/// Offline resolution: the built-in types and the CRDs found among the input objects.
#[derive(Clone, Debug, Default)]
pub struct StaticResolver {
    types: HashMap<(String, String), ResourceType>,
}

/// (apiVersion, plural, kind, namespaced) of the built-in types hooks commonly use.
const BUILTIN: &[(&str, &str, &str, bool)] = &[
    ("v1", "pods", "Pod", true),
    ("v1", "services", "Service", true),
    ("v1", "configmaps", "ConfigMap", true),
    ("v1", "secrets", "Secret", true),
    ("v1", "serviceaccounts", "ServiceAccount", true),
    (
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
    ),
    ("v1", "endpoints", "Endpoints", true),
    ("v1", "events", "Event", true),
    ("v1", "limitranges", "LimitRange", true),
    ("v1", "resourcequotas", "ResourceQuota", true),
    ("v1", "namespaces", "Namespace", false),
    ("v1", "nodes", "Node", false),
    ("v1", "persistentvolumes", "PersistentVolume", false),
    ("apps/v1", "deployments", "Deployment", true),
    ("apps/v1", "statefulsets", "StatefulSet", true),
    ("apps/v1", "daemonsets", "DaemonSet", true),
    ("apps/v1", "replicasets", "ReplicaSet", true),
    ("apps/v1", "controllerrevisions", "ControllerRevision", true),
    ("batch/v1", "jobs", "Job", true),
    ("batch/v1", "cronjobs", "CronJob", true),
    ("networking.k8s.io/v1", "ingresses", "Ingress", true),
    (
        "networking.k8s.io/v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    (
        "policy/v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    ),
    ("rbac.authorization.k8s.io/v1", "roles", "Role", true),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
    (
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
    ),
    ("coordination.k8s.io/v1", "leases", "Lease", true),
];

/// Built-in types without a status subresource.
const WITHOUT_STATUS: &[&str] = &[
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Endpoints",
    "Event",
    "LimitRange",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "Lease",
    "NetworkPolicy",
    "ControllerRevision",
];

impl StaticResolver {
    pub fn with_builtins() -> StaticResolver {
        let mut resolver = StaticResolver::default();
        for (api_version, plural, kind, namespaced) in BUILTIN {
            resolver.insert(ResourceType::from(TypeInfo {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                namespaced: *namespaced,
                has_status: !WITHOUT_STATUS.contains(kind),
            }));
        }
        resolver
    }

    pub(crate) fn insert(&mut self, resource: ResourceType) {
        self.types.insert(
            (resource.api_version.clone(), resource.plural.clone()),
            resource,
        );
    }

    /// The type with this apiVersion and kind, if known.
    pub fn find_kind(&self, api_version: &str, kind: &str) -> Option<ResourceType> {
        self.types
            .values()
            .find(|resource| resource.api_version == api_version && resource.kind == kind)
            .cloned()
    }

    /// Registers every served version of a CustomResourceDefinition given as JSON. Returns false
    /// when the value is not a usable CRD.
    pub fn add_crd(&mut self, crd: &Value) -> bool {
        let spec = &crd["spec"];
        let (Some(group), Some(kind), Some(plural)) = (
            spec["group"].as_str(),
            spec["names"]["kind"].as_str(),
            spec["names"]["plural"].as_str(),
        ) else {
            return false;
        };
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        let Some(versions) = spec["versions"].as_array() else {
            return false;
        };
        for version in versions {
            let Some(name) = version["name"].as_str() else {
                continue;
            };
            self.insert(ResourceType::from(TypeInfo {
                api_version: format!("{group}/{name}"),
                kind: kind.to_string(),
                plural: plural.to_string(),
                namespaced,
                has_status: version["subresources"]["status"].is_object(),
            }));
        }
        true
    }
}

impl ResourceResolver for StaticResolver {
    fn resolve(&self, reference: &ResourceRef) -> Result<ResourceType, ResolveError> {
        self.types
            .get(&(reference.api_version.clone(), reference.resource.clone()))
            .cloned()
            .ok_or_else(|| ResolveError::Unknown {
                api_version: reference.api_version.clone(),
                resource: reference.resource.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reference(api_version: &str, resource: &str) -> ResourceRef {
        ResourceRef {
            api_version: api_version.into(),
            resource: resource.into(),
        }
    }

    #[test]
    fn builtins_and_crds_resolve_with_scope_and_status() {
        let mut resolver = StaticResolver::with_builtins();
        let sts = resolver
            .resolve(&reference("apps/v1", "statefulsets"))
            .unwrap();
        assert_eq!(sts.group_key(), "StatefulSet.apps/v1");
        assert!(sts.namespaced && sts.has_status);
        let cm = resolver.resolve(&reference("v1", "configmaps")).unwrap();
        assert_eq!(cm.group_key(), "ConfigMap.v1");
        assert!(!cm.has_status);
        assert!(
            !resolver
                .resolve(&reference("v1", "namespaces"))
                .unwrap()
                .namespaced
        );

        assert!(matches!(
            resolver.resolve(&reference("example.com/v1", "widgets")),
            Err(ResolveError::Unknown { .. })
        ));
        assert!(resolver.add_crd(&json!({"spec": {
            "group": "example.com", "scope": "Cluster",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "subresources": {"status": {}}}, {"name": "v2"}]
        }})));
        let widget = resolver
            .resolve(&reference("example.com/v1", "widgets"))
            .unwrap();
        assert!(!widget.namespaced && widget.has_status);
        assert!(
            !resolver
                .resolve(&reference("example.com/v2", "widgets"))
                .unwrap()
                .has_status
        );
    }
}
