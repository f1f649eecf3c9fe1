//! The fields of the objects in a hook's request, from their types' OpenAPI schemas: built-in
//! types from k8s-openapi's, custom resources from the CustomResourceDefinitions in the workspace
//! (or the manifest being edited), and `request.controller` from the controller kind's own CRD.

use super::complete::{ObjectSchemas, SchemaField};
use super::scripts::Manifest;
use super::workspace::Workspace;
use crate::api::ResourceRef;
use crate::kinds;
use crate::object;
use crate::resources::{ResourceResolver, StaticResolver};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// No schemas: a script file, whose controller is not known.
pub struct NoSchemas;

impl ObjectSchemas for NoSchemas {
    fn fields(&self, _field: &str, _path: &[String]) -> Vec<SchemaField> {
        Vec::new()
    }
}

/// The schemas of the objects one controller's hooks are handed.
pub struct RequestSchemas {
    /// Request field → the schema of the object in it.
    schemas: HashMap<&'static str, Arc<Value>>,
}

impl RequestSchemas {
    pub fn new(
        controller: &Value,
        workspace: &Workspace,
        manifest: Option<&Manifest>,
    ) -> RequestSchemas {
        let mut schemas = HashMap::new();
        let Some(kind) = kinds::of(controller) else {
            return RequestSchemas { schemas };
        };
        if let Some(schema) = crd_schema(
            &serde_json::to_value(kind.crd()).unwrap_or_default(),
            crate::api::API_VERSION,
        ) {
            schemas.insert("controller", Arc::new(schema));
        }
        let mut resolver: StaticResolver = workspace.resolver.clone();
        let mut crds: Vec<&Value> = workspace.crds.iter().collect();
        for (_, value) in manifest.into_iter().flat_map(|m| &m.documents) {
            if object::kind(value) == "CustomResourceDefinition" && resolver.add_crd(value) {
                crds.push(value);
            }
        }
        for (field, spec_path) in kind.name().request_types() {
            let mut rule = spec_path
                .split('.')
                .fold(controller, |value, step| &value[step]);
            if let Some(first) = rule.as_array().and_then(|rules| rules.first()) {
                rule = first;
            }
            let reference = ResourceRef {
                api_version: rule["apiVersion"].as_str().unwrap_or_default().to_string(),
                resource: rule["resource"].as_str().unwrap_or_default().to_string(),
            };
            let Ok(resource) = resolver.resolve(&reference) else {
                continue;
            };
            let schema = builtin_schema(&resource.api_version, &resource.kind).or_else(|| {
                crds.iter()
                    .filter(|crd| crd["spec"]["names"]["kind"] == resource.kind.as_str())
                    .find_map(|crd| crd_schema(crd, &resource.api_version))
                    .map(Arc::new)
            });
            if let Some(schema) = schema {
                schemas.insert(field, schema);
            }
        }
        RequestSchemas { schemas }
    }
}

impl ObjectSchemas for RequestSchemas {
    fn fields(&self, field: &str, path: &[String]) -> Vec<SchemaField> {
        let Some(root) = self.schemas.get(field) else {
            return Vec::new();
        };
        let mut node = resolve(root, root);
        for step in path {
            let Some(next) = child(root, node, step) else {
                return Vec::new();
            };
            node = next;
        }
        let Some(properties) = node["properties"].as_object() else {
            return Vec::new();
        };
        properties
            .iter()
            .map(|(name, schema)| {
                let schema = resolve(root, schema);
                SchemaField {
                    name: name.clone(),
                    type_name: type_name(root, schema),
                    description: schema["description"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                }
            })
            .collect()
    }
}

/// The `openAPIV3Schema` of a CRD's version (its first served one when that is absent).
fn crd_schema(crd: &Value, api_version: &str) -> Option<Value> {
    let version = api_version.rsplit('/').next().unwrap_or(api_version);
    let versions = crd["spec"]["versions"].as_array()?;
    versions
        .iter()
        .find(|v| v["name"] == version)
        .or_else(|| versions.first())
        .map(|v| v["schema"]["openAPIV3Schema"].clone())
        .filter(|schema| schema.is_object())
}

/// A schema with its `$ref` (and a lone `allOf`, as schemars writes a described reference)
/// followed.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let mut schema = schema;
    for _ in 0..8 {
        if let Some(reference) = schema["$ref"].as_str() {
            let name = reference.rsplit('/').next().unwrap_or_default();
            let definitions = if root["$defs"].is_object() {
                &root["$defs"]
            } else {
                &root["definitions"]
            };
            match definitions.get(name) {
                Some(target) => schema = target,
                None => break,
            }
        } else if let Some([only]) = schema["allOf"].as_array().map(Vec::as_slice) {
            schema = only;
        } else {
            break;
        }
    }
    schema
}

/// The schema one step below `schema`: a property, or a map's value.
fn child<'a>(root: &'a Value, schema: &'a Value, step: &str) -> Option<&'a Value> {
    let next = schema["properties"].get(step).or_else(|| {
        schema["additionalProperties"]
            .as_object()
            .map(|_| &schema["additionalProperties"])
    })?;
    Some(resolve(root, next))
}

fn type_name(root: &Value, schema: &Value) -> String {
    let named = |schema: &Value| match schema["type"].as_str() {
        Some(name) => name.to_string(),
        // Nullable types are `["string", "null"]` to schemars.
        None => match schema["type"].as_array() {
            Some(names) => names
                .iter()
                .filter_map(Value::as_str)
                .find(|n| *n != "null")
                .unwrap_or("any")
                .to_string(),
            None if schema["properties"].is_object() => "object".into(),
            None => "any".into(),
        },
    };
    match named(schema).as_str() {
        "array" => format!("array of {}", named(resolve(root, &schema["items"]))),
        other => other.to_string(),
    }
}

/// The schema of a built-in type, from k8s-openapi (generated once per type).
fn builtin_schema(api_version: &str, kind: &str) -> Option<Arc<Value>> {
    type Cache = Mutex<HashMap<(String, String), Arc<Value>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (api_version.to_string(), kind.to_string());
    if let Some(schema) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Some(schema.clone());
    }
    let schema = Arc::new(generate_builtin(api_version, kind)?);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, schema.clone());
    Some(schema)
}

macro_rules! builtin_types {
    ($($api_version:literal $kind:literal => $type:ty,)*) => {
        fn generate_builtin(api_version: &str, kind: &str) -> Option<Value> {
            match (api_version, kind) {
                $(($api_version, $kind) => Some(schemars::schema_for!($type).to_value()),)*
                _ => None,
            }
        }
    };
}

use k8s_openapi::api::{apps, autoscaling, batch, core, networking, policy, rbac};

// The built-in types `resources` knows (its `BUILTIN` table).
builtin_types! {
    "v1" "Pod" => core::v1::Pod,
    "v1" "Service" => core::v1::Service,
    "v1" "ConfigMap" => core::v1::ConfigMap,
    "v1" "Secret" => core::v1::Secret,
    "v1" "ServiceAccount" => core::v1::ServiceAccount,
    "v1" "PersistentVolumeClaim" => core::v1::PersistentVolumeClaim,
    "v1" "Endpoints" => core::v1::Endpoints,
    "v1" "Event" => core::v1::Event,
    "v1" "LimitRange" => core::v1::LimitRange,
    "v1" "ResourceQuota" => core::v1::ResourceQuota,
    "v1" "Namespace" => core::v1::Namespace,
    "v1" "Node" => core::v1::Node,
    "v1" "PersistentVolume" => core::v1::PersistentVolume,
    "apps/v1" "Deployment" => apps::v1::Deployment,
    "apps/v1" "StatefulSet" => apps::v1::StatefulSet,
    "apps/v1" "DaemonSet" => apps::v1::DaemonSet,
    "apps/v1" "ReplicaSet" => apps::v1::ReplicaSet,
    "apps/v1" "ControllerRevision" => apps::v1::ControllerRevision,
    "batch/v1" "Job" => batch::v1::Job,
    "batch/v1" "CronJob" => batch::v1::CronJob,
    "networking.k8s.io/v1" "Ingress" => networking::v1::Ingress,
    "networking.k8s.io/v1" "NetworkPolicy" => networking::v1::NetworkPolicy,
    "policy/v1" "PodDisruptionBudget" => policy::v1::PodDisruptionBudget,
    "rbac.authorization.k8s.io/v1" "Role" => rbac::v1::Role,
    "rbac.authorization.k8s.io/v1" "RoleBinding" => rbac::v1::RoleBinding,
    "rbac.authorization.k8s.io/v1" "ClusterRole" => rbac::v1::ClusterRole,
    "rbac.authorization.k8s.io/v1" "ClusterRoleBinding" => rbac::v1::ClusterRoleBinding,
    "autoscaling/v2" "HorizontalPodAutoscaler" => autoscaling::v2::HorizontalPodAutoscaler,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(fields: &[SchemaField]) -> Vec<&str> {
        fields.iter().map(|f| f.name.as_str()).collect()
    }

    fn decorator(api_version: &str, resource: &str) -> Value {
        json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "d"},
            "spec": {"resources": [{"apiVersion": api_version, "resource": resource}], "hooks": {}}
        })
    }

    #[test]
    fn a_builtin_objects_fields_come_from_its_openapi_schema() {
        let workspace = Workspace::scan(None);
        let schemas = RequestSchemas::new(&decorator("apps/v1", "statefulsets"), &workspace, None);
        let top = schemas.fields("object", &[]);
        assert!(names(&top).contains(&"spec") && names(&top).contains(&"metadata"));
        let spec = schemas.fields("object", &["spec".into()]);
        let replicas = spec.iter().find(|f| f.name == "replicas").unwrap();
        assert_eq!(replicas.type_name, "integer");
        assert!(replicas.description.contains("replicas"), "{replicas:?}");
        let template = schemas.fields("object", &["spec".into(), "template".into(), "spec".into()]);
        let containers = template.iter().find(|f| f.name == "containers").unwrap();
        assert_eq!(containers.type_name, "array of object");
        // Labels are a map: below them, nothing to complete.
        assert!(
            schemas
                .fields("object", &["metadata".into(), "labels".into()])
                .is_empty()
        );
        // The controller is its kind's own.
        let controller = schemas.fields("controller", &["spec".into()]);
        assert!(
            names(&controller).contains(&"resources"),
            "{:?}",
            names(&controller)
        );
        assert!(schemas.fields("object", &["nope".into()]).is_empty());
    }

    #[test]
    fn a_custom_resources_fields_come_from_its_crd() {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": {
                                "size": {"type": "integer", "description": "How big."}}}}}}}]}
        });
        let mut workspace = Workspace::scan(None);
        workspace.resolver.add_crd(&crd);
        workspace.crds.push(crd);
        let schemas =
            RequestSchemas::new(&decorator("example.com/v1", "widgets"), &workspace, None);
        let spec = schemas.fields("object", &["spec".into()]);
        assert_eq!(
            spec,
            [SchemaField {
                name: "size".into(),
                type_name: "integer".into(),
                description: "How big.".into()
            }]
        );
    }
}
