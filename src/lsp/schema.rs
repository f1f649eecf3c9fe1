//! The fields of the objects in a hook's request, from their types' OpenAPI schemas: built-in
//! types from k8s-openapi's, custom resources from the CustomResourceDefinitions of the manifest
//! being edited, the workspace and the cluster (if the server reads one), and
//! `request.controller` from the controller kind's own CRD.

use super::complete::{INDEX, Object, ObjectSchemas, SchemaField};
use super::scripts::Manifest;
use super::workspace::Workspace;
use crate::api::ResourceRef;
use crate::kinds;
use crate::object;
use crate::resources::ResourceResolver;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// No schemas: a script file, whose controller is not known.
pub(super) struct NoSchemas;

impl ObjectSchemas for NoSchemas {
    fn fields(&self, _object: Object<'_>, _path: &[String]) -> Vec<SchemaField> {
        Vec::new()
    }
}

/// The schemas of the objects one controller's hooks are handed.
pub(super) struct RequestSchemas<'a> {
    /// Request field → the schema of the object in it.
    schemas: HashMap<&'static str, Arc<Value>>,
    /// The CustomResourceDefinitions known, the edited manifest's first: the first of a type
    /// is its schema.
    crds: Vec<&'a Value>,
}

impl<'a> RequestSchemas<'a> {
    pub(super) fn new(
        controller: &Value,
        workspace: &'a Workspace,
        manifest: Option<&'a Manifest>,
    ) -> RequestSchemas<'a> {
        let mut found = RequestSchemas {
            schemas: HashMap::new(),
            crds: Vec::new(),
        };
        let Some(kind) = kinds::of(controller) else {
            return found;
        };
        if let Some(schema) = crd_schema(
            &serde_json::to_value(kind.crd()).unwrap_or_default(),
            crate::api::API_VERSION,
        ) {
            found.schemas.insert("controller", Arc::new(schema));
        }
        // The manifest's own types are what the user is editing: they come first. The
        // workspace's resolver, which may hold a whole cluster's types, is copied only when
        // the manifest adds to it.
        let mut resolver = Cow::Borrowed(&workspace.resolver);
        for (_, value) in manifest.into_iter().flat_map(|m| &m.documents) {
            if object::kind(value) == "CustomResourceDefinition" && resolver.to_mut().add_crd(value)
            {
                found.crds.push(value);
            }
        }
        found.crds.extend(workspace.crds());
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
            if let Some(schema) = found.type_schema(&resource.api_version, &resource.kind) {
                found.schemas.insert(field, schema);
            }
        }
        found
    }

    /// The schema of a type: built in, or from the first CRD that defines it.
    fn type_schema(&self, api_version: &str, kind: &str) -> Option<Arc<Value>> {
        builtin_schema(api_version, kind).or_else(|| {
            let group = api_version.rsplit_once('/').map(|(group, _)| group)?;
            self.crds
                .iter()
                .filter(|crd| crd["spec"]["group"] == group && crd["spec"]["names"]["kind"] == kind)
                .find_map(|crd| crd_schema(crd, api_version))
                .map(Arc::new)
        })
    }
}

impl ObjectSchemas for RequestSchemas<'_> {
    fn fields(&self, object: Object<'_>, path: &[String]) -> Vec<SchemaField> {
        let root = match object {
            Object::Request(field) => self.schemas.get(field).cloned(),
            Object::Type { api_version, kind } => self.type_schema(api_version, kind),
        };
        let Some(root) = root else {
            return Vec::new();
        };
        let mut node = resolve(&root, &root);
        for step in path {
            let Some(next) = child(&root, node, step) else {
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
                let schema = resolve(&root, schema);
                SchemaField {
                    name: name.clone(),
                    type_name: type_name(&root, schema),
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

/// The schema one step below `schema`: a property or a map's value, or for [`INDEX`] an
/// array's element or a map's value.
fn child<'a>(root: &'a Value, schema: &'a Value, step: &str) -> Option<&'a Value> {
    let map_value = || {
        schema["additionalProperties"]
            .as_object()
            .map(|_| &schema["additionalProperties"])
    };
    let next = if step == INDEX {
        schema["items"].as_object().map(|_| &schema["items"])
    } else {
        schema["properties"].get(step)
    }
    .or_else(map_value)?;
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

    fn path(steps: &[&str]) -> Vec<String> {
        steps.iter().map(|step| step.to_string()).collect()
    }

    const OBJECT: Object = Object::Request("object");

    /// A CRD of `kind` in `group` whose `spec` has the one field `field`.
    fn crd(group: &str, kind: &str, field: &str) -> Value {
        let plural = format!("{}s", kind.to_lowercase());
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": {
                                field: {"type": "integer", "description": "How big."}}}}}}}]}
        })
    }

    #[test]
    fn a_builtin_objects_fields_come_from_its_openapi_schema() {
        let workspace = Workspace::scan(None, Arc::new([]));
        let schemas = RequestSchemas::new(&decorator("apps/v1", "statefulsets"), &workspace, None);
        let top = schemas.fields(OBJECT, &[]);
        assert!(names(&top).contains(&"spec") && names(&top).contains(&"metadata"));
        let spec = schemas.fields(OBJECT, &path(&["spec"]));
        let replicas = spec.iter().find(|f| f.name == "replicas").unwrap();
        assert_eq!(replicas.type_name, "integer");
        assert!(replicas.description.contains("replicas"), "{replicas:?}");
        let template = schemas.fields(OBJECT, &path(&["spec", "template", "spec"]));
        let containers = template.iter().find(|f| f.name == "containers").unwrap();
        assert_eq!(containers.type_name, "array of object");
        // An element of an array.
        let container = schemas.fields(
            OBJECT,
            &path(&["spec", "template", "spec", "containers", INDEX]),
        );
        assert!(
            names(&container).contains(&"image"),
            "{:?}",
            names(&container)
        );
        // Labels are a map of strings: below them, or below one, nothing to complete.
        for below in [&["metadata", "labels"][..], &["metadata", "labels", INDEX]] {
            assert!(schemas.fields(OBJECT, &path(below)).is_empty());
        }
        // The controller is its kind's own.
        let controller = schemas.fields(Object::Request("controller"), &path(&["spec"]));
        assert!(
            names(&controller).contains(&"resources"),
            "{:?}",
            names(&controller)
        );
        assert!(schemas.fields(OBJECT, &path(&["nope"])).is_empty());
        // Any built-in type, as the maps keyed by type hold them.
        let service = Object::Type {
            api_version: "v1",
            kind: "Service",
        };
        let ports = schemas.fields(service, &path(&["spec", "ports", INDEX]));
        assert!(names(&ports).contains(&"targetPort"), "{:?}", names(&ports));
    }

    #[test]
    fn a_custom_resources_fields_come_from_its_crd() {
        let mut workspace = Workspace::scan(None, Arc::new([]));
        let widget = crd("example.com", "Widget", "size");
        workspace.resolver.add_crd(&widget);
        workspace.crds.push(widget);
        let schemas =
            RequestSchemas::new(&decorator("example.com/v1", "widgets"), &workspace, None);
        let spec = schemas.fields(OBJECT, &path(&["spec"]));
        assert_eq!(
            spec,
            [SchemaField {
                name: "size".into(),
                type_name: "integer".into(),
                description: "How big.".into()
            }]
        );
    }

    #[test]
    fn a_type_is_its_own_groups_crd_and_the_edited_manifests_first() {
        // Two Widgets, of two groups, in the cluster; the edited manifest defines one again.
        let cluster: Arc<[Value]> = vec![
            crd("other.example.com", "Widget", "colour"),
            crd("example.com", "Widget", "size"),
        ]
        .into();
        let workspace = Workspace::scan(None, cluster);
        let fields = |manifest: Option<&Manifest>| {
            let schemas = RequestSchemas::new(
                &decorator("example.com/v1", "widgets"),
                &workspace,
                manifest,
            );
            let of_type = schemas.fields(
                Object::Type {
                    api_version: "example.com/v1",
                    kind: "Widget",
                },
                &path(&["spec"]),
            );
            let object = schemas.fields(OBJECT, &path(&["spec"]));
            assert_eq!(of_type, object);
            names(&object)
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(fields(None), ["size"]);
        let edited = Manifest::parse(
            &serde_json::to_string(&crd("example.com", "Widget", "length")).unwrap(),
        )
        .unwrap();
        assert_eq!(fields(Some(&edited)), ["length"]);
    }
}
