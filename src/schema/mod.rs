//! Checking an object against its type's schema, before anything writes it: the OpenAPI v3
//! schema ([`structural`]) and a custom resource's CEL rules ([`rules`]), in the API server's
//! order (CEL only when the structure holds). One check serves `render`, `diff`, `test`,
//! `validate` and the operator before it applies.
//!
//! Schemas come from CustomResourceDefinitions (the manifests given, or the cluster's) and,
//! for built-in types, from the schemas bundled with the binary ([`builtin`]).

pub(crate) mod builtin;
mod formats;
mod rules;
mod structural;

use crate::object;
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use structural::{Dialect, Walk};

/// What a check found wrong at one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where, as the API server writes it: `spec.ports[0].port`; empty for the whole object.
    pub field: String,
    pub message: String,
    /// The CEL rule that failed, for a rule's violation.
    pub rule: Option<String>,
    pub kind: ViolationKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    Type,
    Required,
    /// A field the schema does not declare: the API server refuses it (strict field
    /// validation) or drops it (a CRD's pruning).
    Unknown,
    Enum,
    Bounds,
    Pattern,
    Format,
    Duplicate,
    Alternatives,
    TooDeep,
    /// An `x-kubernetes-validations` rule that failed or could not be evaluated on the object.
    Rule,
    /// A rule this check cannot evaluate: said, never held against the object.
    Unchecked,
}

impl Violation {
    /// Whether the object must not be written: everything but an unchecked rule.
    pub fn blocks(&self) -> bool {
        self.kind != ViolationKind::Unchecked
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = if self.field.is_empty() {
            "(the object)"
        } else {
            &self.field
        };
        write!(f, "{field}: {}", self.message)?;
        match &self.rule {
            Some(rule) if !self.message.contains(rule.as_str()) => write!(f, " (rule: {rule})"),
            _ => Ok(()),
        }
    }
}

/// Which part of an object a check is about. A child is applied without its status (the API
/// server ignores what an apply sends there for a type with a status subresource); a target's
/// or parent's status is written alone, through that subresource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Everything but `status`.
    Resource,
    /// Only `status`.
    Status,
}

impl Part {
    fn covers(self, field: &str) -> bool {
        let in_status =
            field == "status" || field.starts_with("status.") || field.starts_with("status[");
        match self {
            Part::Resource => !in_status,
            Part::Status => in_status,
        }
    }
}

/// One version of one type's schema, ready to check objects: its rules compiled once.
pub struct TypeSchema {
    api_version: String,
    kind: String,
    dialect: Dialect,
    schema: Arc<Value>,
    /// Compiled when first needed: a cluster may have hundreds of CRDs, and outputs of few.
    rules: std::sync::OnceLock<Option<kube_cel::CompiledSchema>>,
    /// Where the schema came from, for messages: a CRD's name, or the bundle's version.
    pub origin: String,
}

impl fmt::Debug for TypeSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypeSchema")
            .field("api_version", &self.api_version)
            .field("kind", &self.kind)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl TypeSchema {
    /// The schema of one version of a CRD, if it has one.
    fn of_crd(crd: &Value, version: &Value) -> Option<TypeSchema> {
        let schema = version.pointer("/schema/openAPIV3Schema")?;
        let group = object::str_at(crd, "/spec/group").unwrap_or_default();
        let kind = object::str_at(crd, "/spec/names/kind")?;
        let version_name = version.get("name").and_then(Value::as_str)?;
        Some(TypeSchema {
            api_version: format!("{group}/{version_name}"),
            kind: kind.to_string(),
            dialect: Dialect::Crd,
            rules: std::sync::OnceLock::new(),
            schema: Arc::new(schema.clone()),
            origin: format!("CustomResourceDefinition {}", object::name(crd)),
        })
    }

    fn builtin(api_version: &str, kind: &str) -> Option<TypeSchema> {
        let schema = builtin::schema(api_version, kind)?;
        Some(TypeSchema {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            dialect: Dialect::Builtin,
            rules: std::sync::OnceLock::from(None),
            schema: Arc::new(schema.clone()),
            origin: format!("Kubernetes {}", builtin::KUBERNETES_VERSION),
        })
    }

    /// Everything wrong with `object` as this type; `old`, the object as it is now, is
    /// `oldSelf` to transition rules (which are skipped without it).
    pub fn check(&self, object: &Value, old: Option<&Value>, part: Part) -> Vec<Violation> {
        let mut walk = Walk {
            dialect: self.dialect,
            definitions: (self.dialect == Dialect::Builtin).then(builtin::definitions),
            object_meta: Some(builtin::object_meta()),
            violations: Vec::new(),
        };
        walk.check(&self.schema, object, "", true);
        let mut violations = walk.violations;
        violations.retain(|v| part.covers(&v.field));
        // As the API server: rules run only on an object whose structure holds, so a rule
        // never trips over a field of the wrong type.
        if violations.is_empty()
            && let Some(compiled) = self.rules.get_or_init(|| rules::compile(&self.schema))
        {
            let found = rules::check(compiled, object, old, (&self.api_version, &self.kind));
            violations.extend(found.into_iter().filter(|v| part.covers(&v.field)));
        }
        violations
    }
}

/// Where schemas are looked up by type.
pub trait SchemaSource: Send + Sync {
    /// The schema of `kind` in `apiVersion`, if known.
    fn schema(&self, api_version: &str, kind: &str) -> Option<Arc<TypeSchema>>;
}

/// No schemas: nothing is checked.
pub struct NoSchemas;

impl SchemaSource for NoSchemas {
    fn schema(&self, _: &str, _: &str) -> Option<Arc<TypeSchema>> {
        None
    }
}

type TypeKey = (String, String);

/// The schemas known: CRDs added (from files or the cluster) and, when asked for, the bundled
/// built-in types. Each is compiled once, when added or first used.
#[derive(Default)]
pub struct Schemas {
    builtins: bool,
    /// By CRD name: its versions' types, to replace or drop them all when it changes.
    crds: RwLock<HashMap<String, Vec<TypeKey>>>,
    types: RwLock<HashMap<TypeKey, Arc<TypeSchema>>>,
}

impl fmt::Debug for Schemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schemas")
            .field("builtins", &self.builtins)
            .field("crds", &self.crds.read().len())
            .finish()
    }
}

impl Schemas {
    /// Built-in types from the bundle, and whatever CRDs are added.
    pub fn with_builtins() -> Schemas {
        Schemas {
            builtins: true,
            ..Schemas::default()
        }
    }

    /// Adds (or replaces) the types a CustomResourceDefinition serves.
    pub fn add_crd(&self, crd: &Value) {
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        let compiled: Vec<TypeSchema> = versions
            .into_iter()
            .flatten()
            .filter(|v| v.get("served") != Some(&Value::Bool(false)))
            .filter_map(|version| TypeSchema::of_crd(crd, version))
            .collect();
        self.remove_crd(object::name(crd));
        let keys: Vec<TypeKey> = compiled
            .iter()
            .map(|t| (t.api_version.clone(), t.kind.clone()))
            .collect();
        let mut types = self.types.write();
        for schema in compiled {
            types.insert(
                (schema.api_version.clone(), schema.kind.clone()),
                Arc::new(schema),
            );
        }
        self.crds
            .write()
            .insert(object::name(crd).to_string(), keys);
    }

    /// Whether a CRD of this name was added.
    pub fn knows_crd(&self, name: &str) -> bool {
        self.crds.read().contains_key(name)
    }

    /// Forgets the types of the CRD named `name`.
    pub fn remove_crd(&self, name: &str) {
        if let Some(keys) = self.crds.write().remove(name) {
            let mut types = self.types.write();
            for key in keys {
                types.remove(&key);
            }
        }
    }
}

impl SchemaSource for Schemas {
    fn schema(&self, api_version: &str, kind: &str) -> Option<Arc<TypeSchema>> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(found) = self.types.read().get(&key) {
            return Some(found.clone());
        }
        if !self.builtins {
            return None;
        }
        let schema = Arc::new(TypeSchema::builtin(api_version, kind)?);
        Some(self.types.write().entry(key).or_insert(schema).clone())
    }
}

/// Whether the bundle has the schema of this type (the rest are custom resources, or types of
/// an aggregated API, which have none to check against).
pub fn is_builtin(api_version: &str, kind: &str) -> bool {
    builtin::schema(api_version, kind).is_some()
}

/// What is used of a CustomResourceDefinition: its name and spec (names, scope, versions and
/// their schemas). Its status and the rest of its metadata are left behind: managedFields alone
/// name every field of the schema again.
pub fn crd_essentials(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd.metadata.name},
        "spec": crd.spec,
    })
}

/// Checks a part of `object` against its type's schema, if `schemas` has one.
pub fn check(
    schemas: &dyn SchemaSource,
    object: &Value,
    old: Option<&Value>,
    part: Part,
) -> Vec<Violation> {
    match schemas.schema(object::api_version(object), object::kind(object)) {
        Some(schema) => schema.check(object, old, part),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
