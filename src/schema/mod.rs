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
    /// The value is as it is in the object now: the API server lets an unchanged value be
    /// (ratcheting), or another field manager's part of the object makes up for it.
    pub unchanged: bool,
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
    /// A string that does not read as its `format`: said, not held against the object (the API
    /// server's parsers take more forms than this check knows of).
    Format,
    Duplicate,
    Alternatives,
    /// Deeper than the check walks: said, not held against the object.
    TooDeep,
    /// An `x-kubernetes-validations` rule that failed or could not be evaluated on the object.
    Rule,
    /// A rule this check cannot evaluate: said, never held against the object.
    Unchecked,
}

impl Violation {
    /// Whether the object must not be written: a violation of a value the output changes,
    /// of a kind the API server would refuse as surely.
    pub fn blocks(&self) -> bool {
        !self.unchanged
            && !matches!(
                self.kind,
                ViolationKind::Unchecked | ViolationKind::Format | ViolationKind::TooDeep
            )
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
        if let Some(rule) = &self.rule
            && !self.message.contains(rule.as_str())
        {
            write!(f, " (rule: {rule})")?;
        }
        if self.unchanged {
            write!(f, " (as it is now, so left to the API server)")?;
        }
        Ok(())
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
    /// Whether a rule reads `oldSelf`: only then is the observed object needed before a
    /// violation is found (reading it from the cache costs a decode).
    transition_rules: bool,
    /// Where the schema came from, for messages: a CRD's name, or the bundle's version.
    pub origin: String,
    /// Whether a field the schema does not declare is refused. Not for built-in types when the
    /// cluster runs another Kubernetes version than the bundle's: the field may be a newer
    /// version's, and the API server's strict field validation judges it.
    unknown_fields_refused: bool,
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
            transition_rules: rules::has_transition_rules(schema),
            schema: Arc::new(schema.clone()),
            origin: format!("CustomResourceDefinition {}", object::name(crd)),
            unknown_fields_refused: true,
        })
    }

    fn builtin(api_version: &str, kind: &str, current: bool) -> Option<TypeSchema> {
        let schema = builtin::schema(api_version, kind)?;
        Some(TypeSchema {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            dialect: Dialect::Builtin,
            rules: std::sync::OnceLock::from(None),
            transition_rules: false,
            schema: Arc::new(schema.clone()),
            origin: format!("Kubernetes {}", builtin::KUBERNETES_VERSION),
            unknown_fields_refused: current,
        })
    }

    /// Everything wrong with `object` as this type; `old`, the object as it is now, is
    /// `oldSelf` to transition rules (which are skipped without it).
    pub fn check(&self, object: &Value, old: Option<&Value>, part: Part) -> Vec<Violation> {
        let mut walk = Walk {
            dialect: self.dialect,
            definitions: (self.dialect == Dialect::Builtin).then(builtin::definitions),
            object_meta: Some(builtin::object_meta()),
            // A Secret's values stay out of messages (Events, conditions, logs).
            quotes_values: self.kind != "Secret",
            trial: false,
            violations: Vec::new(),
        };
        walk.check(&self.schema, object, true);
        let mut violations = walk.violations;
        violations.retain(|v| part.covers(&v.field));
        if !self.unknown_fields_refused {
            for violation in &mut violations {
                if violation.kind == ViolationKind::Unknown {
                    violation.kind = ViolationKind::Unchecked;
                    violation.message.push_str(&format!(
                        "; the schemas bundled are of Kubernetes {} and the cluster runs another \
                         version, so the API server judges it",
                        builtin::KUBERNETES_VERSION
                    ));
                }
            }
        }
        let blocking = violations.iter().any(Violation::blocks);
        // As the API server: rules run only on an object whose structure holds, so a rule
        // never trips over a field of the wrong type.
        if !blocking && let Some(compiled) = self.rules.get_or_init(|| rules::compile(&self.schema))
        {
            let found = rules::check(compiled, object, old, (&self.api_version, &self.kind));
            violations.extend(found.into_iter().filter(|v| part.covers(&v.field)));
        }
        if let Some(old) = old {
            mark_unchanged(&mut violations, object, old);
        }
        violations
    }
}

fn mark_unchanged(violations: &mut [Violation], object: &Value, old: &Value) {
    for violation in violations {
        violation.unchanged = is_unchanged(object, old, violation);
    }
}

/// Whether what a violation is about is as it is in the object now: the same value at its
/// field, or, for a missing required field, a value there now (another field manager's, which
/// an apply leaves in place).
fn is_unchanged(object: &Value, old: &Value, violation: &Violation) -> bool {
    let before = at_path(old, &violation.field);
    match violation.kind {
        ViolationKind::Required => before.is_some_and(|value| !value.is_null()),
        _ => before.is_some() && before == at_path(object, &violation.field),
    }
}

/// The value at a violation's field path (`spec.ports[0].name`, `metadata.labels[app]`).
fn at_path<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    let mut here = value;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, mut rest) = match segment.find('[') {
            Some(open) => (&segment[..open], &segment[open..]),
            None => (segment, ""),
        };
        if !name.is_empty() {
            here = here.get(name)?;
        }
        while let Some(inner) = rest.strip_prefix('[') {
            let close = inner.find(']')?;
            let key = &inner[..close];
            here = match (here, key.parse::<usize>()) {
                (Value::Array(items), Ok(index)) => items.get(index)?,
                _ => here.get(key)?,
            };
            rest = &inner[close + 1..];
        }
    }
    Some(here)
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

/// apiVersion → kind → schema: looked up by `&str` on every write, so without allocating.
type ByType = HashMap<String, HashMap<String, Arc<TypeSchema>>>;

/// The schemas known: CRDs added (from files or the cluster) and, when asked for, the bundled
/// built-in types. Each is compiled once, when added or first used.
#[derive(Default)]
pub struct Schemas {
    builtins: bool,
    /// The cluster's Kubernetes version is another than the bundle's (see
    /// [`TypeSchema::unknown_fields_refused`]).
    builtins_elsewhere: bool,
    known: RwLock<Known>,
}

/// One lock for both maps: a CRD's types change with its entry, never half.
#[derive(Default)]
struct Known {
    /// By CRD name: its versions' types, to replace or drop them all when it changes.
    crds: HashMap<String, Vec<TypeKey>>,
    types: ByType,
}

impl Known {
    fn remove_crd(&mut self, name: &str) {
        for (api_version, kind) in self.crds.remove(name).into_iter().flatten() {
            if let Some(kinds) = self.types.get_mut(&api_version) {
                kinds.remove(&kind);
                if kinds.is_empty() {
                    self.types.remove(&api_version);
                }
            }
        }
    }
}

impl fmt::Debug for Schemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schemas")
            .field("builtins", &self.builtins)
            .field("crds", &self.known.read().crds.len())
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

    /// [`Schemas::with_builtins`] for a cluster whose API server says it runs `git_version`
    /// (`v1.37.2`, `v1.36.0-gke.1`): of another minor version than the bundle's, unknown fields
    /// of built-in types are said and left to the API server. Unknown: taken as the bundle's.
    pub fn for_server(git_version: Option<&str>) -> Schemas {
        let mut schemas = Schemas::with_builtins();
        schemas.serve_version(git_version);
        schemas
    }

    /// Judges built-in types as [`Schemas::for_server`] does; before the first check (a
    /// built-in type's schema is kept as first judged).
    pub fn serve_version(&mut self, git_version: Option<&str>) {
        self.builtins_elsewhere = git_version.is_some_and(|version| !builtin::same_minor(version));
    }

    /// Whether the bundled built-in schemas are another Kubernetes version's than the cluster's.
    pub fn builtins_elsewhere(&self) -> bool {
        self.builtins_elsewhere
    }

    /// Adds (or replaces) the types a CustomResourceDefinition serves.
    pub fn add_crd(&self, crd: &Value) {
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        // A legacy CRD that keeps unknown fields has no pruning: none of its fields is unknown.
        let preserves = crd.pointer("/spec/preserveUnknownFields") == Some(&Value::Bool(true));
        let compiled: Vec<TypeSchema> = versions
            .into_iter()
            .flatten()
            .filter(|v| v.get("served") != Some(&Value::Bool(false)))
            .filter(|_| !preserves)
            .filter_map(|version| TypeSchema::of_crd(crd, version))
            .collect();
        let name = object::name(crd).to_string();
        let mut known = self.known.write();
        known.remove_crd(&name);
        let mut keys = Vec::with_capacity(compiled.len());
        for schema in compiled {
            keys.push((schema.api_version.clone(), schema.kind.clone()));
            known
                .types
                .entry(schema.api_version.clone())
                .or_default()
                .insert(schema.kind.clone(), Arc::new(schema));
        }
        known.crds.insert(name, keys);
    }

    /// Whether a CRD of this name was added.
    pub fn knows_crd(&self, name: &str) -> bool {
        self.known.read().crds.contains_key(name)
    }

    /// Forgets the types of the CRD named `name`.
    pub fn remove_crd(&self, name: &str) {
        self.known.write().remove_crd(name);
    }
}

impl SchemaSource for Schemas {
    fn schema(&self, api_version: &str, kind: &str) -> Option<Arc<TypeSchema>> {
        let known = self.known.read();
        if let Some(found) = known
            .types
            .get(api_version)
            .and_then(|kinds| kinds.get(kind))
        {
            return Some(found.clone());
        }
        drop(known);
        if !self.builtins {
            return None;
        }
        let schema = Arc::new(TypeSchema::builtin(
            api_version,
            kind,
            !self.builtins_elsewhere,
        )?);
        Some(
            self.known
                .write()
                .types
                .entry(api_version.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_insert(schema)
                .clone(),
        )
    }
}

/// The Kubernetes release whose built-in schemas are bundled.
pub const BUNDLED_KUBERNETES: &str = builtin::KUBERNETES_VERSION;

/// Reads the bundled built-in schemas now: parsing them takes milliseconds, better spent at
/// start than in the first check, which runs before a write.
pub fn load_bundle() {
    builtin::load();
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

/// Checks a part of `object` against its type's schema, if `schemas` has one. `old` finds the
/// object as it is now: asked for only when the type has transition rules or the object
/// breaks its schema (to tell an unchanged value from a new one), since most checks find
/// nothing and reading the observed object costs.
pub fn check<Old: std::ops::Deref<Target = Value>>(
    schemas: &dyn SchemaSource,
    object: &Value,
    old: impl FnOnce() -> Option<Old>,
    part: Part,
) -> Vec<Violation> {
    let Some(schema) = schemas.schema(object::api_version(object), object::kind(object)) else {
        return Vec::new();
    };
    if schema.transition_rules {
        return schema.check(object, old().as_deref(), part);
    }
    let mut violations = schema.check(object, None, part);
    if !violations.is_empty()
        && let Some(old) = old()
    {
        mark_unchanged(&mut violations, object, &old);
    }
    violations
}

#[cfg(test)]
mod tests;
