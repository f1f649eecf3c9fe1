//! Reads from scripts: the `get` and `list` helpers over an object store (the operator's watch
//! caches, `render`'s manifests, a test case's `cluster`), limited to the types a controller
//! declares in `spec.reads`, with every read recorded as a [`Dependency`] so the runtime can
//! re-run exactly the work that read something when it changes.
//!
//! Both engines reach this through one helper implementation (`script::helpers`), so the
//! arguments, results and errors are the same in Rhai and Lua.

use crate::object;
use crate::resources::ResourceType;
use crate::selector::{self, FieldRequirement, Selector};
use crate::store::ObjectStore;
use parking_lot::Mutex;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The most dependencies one work item keeps. Beyond it, each type read counts as read whole
/// (every object of the type, in every namespace): re-syncs become coarser but are never
/// missed, and memory per work item stays bounded.
pub(crate) const MAX_DEPENDENCIES: usize = 256;

/// A read a script made, as what would change its result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dependency {
    /// `get`: one object, present or not.
    Object {
        resource: ResourceType,
        namespace: Option<String>,
        name: String,
    },
    /// `list`: every object of a type in a namespace (or all) that the filter matches.
    List {
        resource: ResourceType,
        namespace: Option<String>,
        filter: ListFilter,
    },
}

impl Dependency {
    pub(crate) fn resource(&self) -> &ResourceType {
        match self {
            Dependency::Object { resource, .. } | Dependency::List { resource, .. } => resource,
        }
    }

    /// Whether a version of an object of the dependency's type would be (or was) part of what
    /// the read returned.
    pub(crate) fn covers(&self, candidate: &Value) -> bool {
        match self {
            Dependency::Object {
                resource,
                namespace,
                name,
            } => {
                resource.scope_of(candidate) == namespace.as_deref()
                    && object::name(candidate) == name
            }
            Dependency::List {
                resource,
                namespace,
                filter,
            } => {
                (namespace.is_none() || resource.scope_of(candidate) == namespace.as_deref())
                    && filter.matches(candidate)
            }
        }
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dependency::Object {
                resource,
                namespace,
                name,
            } => {
                write!(f, "get {} ", resource.group_key())?;
                if let Some(namespace) = namespace {
                    write!(f, "{namespace}/")?;
                }
                f.write_str(name)
            }
            Dependency::List {
                resource,
                namespace,
                filter,
            } => {
                write!(f, "list {}", resource.group_key())?;
                if let Some(namespace) = namespace {
                    write!(f, " namespace={namespace}")?;
                }
                if !filter.labels.is_empty() {
                    write!(f, " labels={}", filter.labels)?;
                }
                for field in &filter.fields {
                    let op = if field.equal { "=" } else { "!=" };
                    write!(f, " {}{op}{}", field.field.path(), field.value)?;
                }
                Ok(())
            }
        }
    }
}

/// What a `list` keeps of the objects in its scope: a label selector and field requirements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ListFilter {
    pub labels: Selector,
    pub fields: Vec<FieldRequirement>,
}

impl ListFilter {
    pub(crate) fn matches(&self, candidate: &Value) -> bool {
        self.labels
            .matches(&object::metadata_map(candidate, "labels"))
            && self.fields.iter().all(|f| f.holds(candidate))
    }
}

/// Why a read failed; the helper prefixes its name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    #[error(
        "{api_version} {kind} is not declared in spec.reads of this controller (declared: {declared}); add {{apiVersion: {api_version}, resource: <plural>}} to spec.reads"
    )]
    Undeclared {
        api_version: String,
        kind: String,
        declared: String,
    },
    /// The controller's ServiceAccount may not read this (see [`ReadPolicy`]).
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("{0}")]
    Argument(String),
    /// What a read found would not fit in what the call may still allocate.
    #[error(
        "the result needs about {} and the call may allocate {} more",
        mib(*needed),
        mib(*room)
    )]
    TooLarge { needed: usize, room: usize },
}

fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// What one call (or one work item: several hook calls) may read, and what it read.
#[derive(Clone)]
pub struct ReadAccess {
    store: Arc<dyn ObjectStore + Send + Sync>,
    declared: Arc<[ResourceType]>,
    recorded: Arc<Mutex<Recorded>>,
    /// Whose reads these are: `None` reads with the operator's access (a controller without a
    /// ServiceAccount, `render`, tests).
    policy: Option<Arc<dyn ReadPolicy>>,
    /// The first read the policy refused in this work item: the work fails with it, whatever
    /// a script did with the error its helper got.
    refused: Arc<Mutex<Option<Refusal>>>,
}

#[derive(Debug, Default)]
struct Recorded {
    /// Each with a fingerprint of what it returned when first read (see
    /// [`ReadAccess::changed_since_read`]).
    dependencies: Vec<(Dependency, u64)>,
    /// Set when more than [`MAX_DEPENDENCIES`] were read: the types read, each counted whole.
    overflowed: bool,
}

impl fmt::Debug for ReadAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadAccess")
            .field("declared", &self.declared)
            .finish_non_exhaustive()
    }
}

impl ReadAccess {
    /// Whether the controller may read nothing, so no call can have recorded a dependency.
    pub(crate) fn declares_nothing(&self) -> bool {
        self.declared.is_empty()
    }

    pub(crate) fn new(
        store: Arc<dyn ObjectStore + Send + Sync>,
        declared: impl Into<Arc<[ResourceType]>>,
    ) -> ReadAccess {
        ReadAccess {
            store,
            declared: declared.into(),
            recorded: Arc::default(),
            policy: None,
            refused: Arc::default(),
        }
    }

    /// Reads limited to what `policy` allows (a controller's ServiceAccount).
    pub(crate) fn with_policy(mut self, policy: Option<Arc<dyn ReadPolicy>>) -> ReadAccess {
        self.policy = policy;
        self
    }

    #[cfg(test)]
    /// Whether reads are limited by a policy (a controller with a ServiceAccount).
    pub(crate) fn is_limited(&self) -> bool {
        self.policy.is_some()
    }

    /// Asks the policy whether a read may be handed to a hook; a refusal is kept (see
    /// [`ReadAccess::refusal`]). Everything is allowed without a policy.
    pub(crate) fn check(&self, scope: &ReadScope) -> Result<(), Refusal> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        policy.check(scope).inspect_err(|refusal| {
            let mut refused = self.refused.lock();
            if refused.is_none() {
                *refused = Some(refusal.clone());
            }
        })
    }

    /// [`ReadAccess::check`] of several scopes, in order, stopping at the first refusal.
    pub(crate) fn check_all<'a>(
        &self,
        scopes: impl IntoIterator<Item = &'a ReadScope>,
    ) -> Result<(), Refusal> {
        scopes.into_iter().try_for_each(|scope| self.check(scope))
    }

    /// The first read refused so far in this work item.
    pub(crate) fn refusal(&self) -> Option<Refusal> {
        self.refused.lock().clone()
    }

    /// What was read so far, deduplicated, in the order first read (bounded, see
    /// [`MAX_DEPENDENCIES`]).
    /// How many reads were recorded so far.
    pub(crate) fn count(&self) -> usize {
        self.recorded.lock().dependencies.len()
    }

    pub(crate) fn dependencies(&self) -> Vec<Dependency> {
        let recorded = self.recorded.lock();
        recorded
            .dependencies
            .iter()
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// Whether anything read differs now from what the hooks saw. A change that lands between
    /// a read and the moment its dependency is indexed would otherwise be missed (its event
    /// found nothing to re-sync), so the runtime checks this right after indexing and syncs
    /// the work item again when it says yes. Not checked once reads collapsed to whole types
    /// (those were never read whole).
    pub(crate) fn changed_since_read(&self) -> bool {
        let recorded = self.recorded.lock();
        !recorded.overflowed
            && recorded
                .dependencies
                .iter()
                .any(|(dependency, seen)| fingerprint(&self.current(dependency)) != *seen)
    }

    /// One digest of what every read returned when it was first made, in the order made; `None`
    /// once reads collapsed to whole types (those were never read whole). Equal to
    /// [`current_digest`] of [`ReadAccess::dependencies`] while nothing read has changed.
    pub(crate) fn seen_digest(&self) -> Option<u64> {
        let recorded = self.recorded.lock();
        (!recorded.overflowed).then(|| combine(recorded.dependencies.iter().map(|(_, seen)| *seen)))
    }

    fn current(&self, dependency: &Dependency) -> Vec<Arc<Value>> {
        current(&*self.store, dependency)
    }

    /// Reads through a dependency and records it.
    fn read(&self, dependency: Dependency) -> Vec<Arc<Value>> {
        let found = self.current(&dependency);
        self.record(dependency, fingerprint(&found));
        found
    }

    fn declared(&self, api_version: &str, kind: &str) -> Result<&ResourceType, ReadError> {
        self.declared
            .iter()
            .find(|t| t.api_version == api_version && t.kind == kind)
            .ok_or_else(|| ReadError::Undeclared {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                declared: if self.declared.is_empty() {
                    "nothing".to_string()
                } else {
                    self.declared
                        .iter()
                        .map(ResourceType::group_key)
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            })
    }

    fn record(&self, dependency: Dependency, seen: u64) {
        let mut recorded = self.recorded.lock();
        if recorded.dependencies.iter().any(|(d, _)| *d == dependency) {
            return;
        }
        if recorded.overflowed || recorded.dependencies.len() >= MAX_DEPENDENCIES {
            let whole = Dependency::List {
                resource: dependency.resource().clone(),
                namespace: None,
                filter: ListFilter::default(),
            };
            if !recorded.overflowed {
                // Collapse to one whole-type dependency per type read.
                let mut types: Vec<ResourceType> = Vec::new();
                for (d, _) in &recorded.dependencies {
                    if !types.contains(d.resource()) {
                        types.push(d.resource().clone());
                    }
                }
                recorded.dependencies = types
                    .into_iter()
                    .map(|resource| {
                        let whole = Dependency::List {
                            resource,
                            namespace: None,
                            filter: ListFilter::default(),
                        };
                        (whole, 0)
                    })
                    .collect();
                recorded.overflowed = true;
                tracing::debug!(
                    limit = MAX_DEPENDENCIES,
                    "too many reads in one work item; tracking the types read as a whole"
                );
            }
            if !recorded.dependencies.iter().any(|(d, _)| *d == whole) {
                recorded.dependencies.push((whole, 0));
            }
            return;
        }
        recorded.dependencies.push((dependency, seen));
    }

    /// `get(apiVersion, kind, namespace, name)`: the object, or null. Refused when copying it
    /// for the script would take more than `room` bytes ([`copy_out`]).
    pub(crate) fn get(&self, args: &[Value], room: usize) -> Result<Value, ReadError> {
        let api_version = string(args, 0, "the apiVersion")?;
        let kind = string(args, 1, "the kind")?;
        let namespace = match args.get(2) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err(ReadError::Argument(format!(
                    "the namespace must be a string or null, got {}",
                    object::json_type(other)
                )));
            }
        };
        let name = string(args, 3, "the name")?;
        let resource = self.declared(api_version, kind)?;
        if resource.namespaced && namespace.is_none() {
            return Err(ReadError::Argument(format!(
                "{} is namespaced: give a namespace",
                resource.group_key()
            )));
        }
        let span = if crate::telemetry::take_read_span() {
            crate::telemetry::span!(
                "get",
                resource = %resource.group_key(),
                namespace = namespace.map(crate::telemetry::bounded),
                name = crate::telemetry::bounded(name),
                found = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let _traced = span.enter();
        let read = self
            .check(&ReadScope::new(ReadVerb::Get, resource, namespace))
            .map_err(ReadError::from)
            .and_then(|()| {
                let found = self.read(Dependency::Object {
                    resource: resource.clone(),
                    namespace: resource.scope(namespace).map(str::to_string),
                    name: name.to_string(),
                });
                span.record("found", !found.is_empty());
                Ok(copy_out(&found, room)?.pop().unwrap_or(Value::Null))
            });
        traced_result(&span, read)
    }

    /// `list(apiVersion, kind [, {namespace, labelSelector, fieldSelector}])`: the matching
    /// objects, sorted by namespace then name. Refused when copying them for the script would
    /// take more than `room` bytes ([`copy_out`]).
    pub(crate) fn list(&self, args: &[Value], room: usize) -> Result<Value, ReadError> {
        let api_version = string(args, 0, "the apiVersion")?;
        let kind = string(args, 1, "the kind")?;
        let resource = self.declared(api_version, kind)?;
        let options = match args.get(2) {
            None | Some(Value::Null) => serde_json::Map::new(),
            Some(Value::Object(map)) => map.clone(),
            Some(other) => {
                return Err(ReadError::Argument(format!(
                    "the options must be a map, got {}",
                    object::json_type(other)
                )));
            }
        };
        let mut namespace = None;
        let mut filter = ListFilter::default();
        for (key, value) in &options {
            match (key.as_str(), value) {
                (_, Value::Null) => {}
                ("namespace", Value::String(s)) if s.is_empty() => {}
                ("namespace", Value::String(s)) => namespace = Some(s.clone()),
                ("labelSelector", Value::String(text)) => {
                    filter.labels = selector::parse_label_selector(text)
                        .map_err(|e| ReadError::Argument(e.0))?
                }
                ("labelSelector", Value::Object(_)) => {
                    let selector = crate::selector::LabelSelector::from_json(value)
                        .map_err(|e| ReadError::Argument(format!("labelSelector: {e}")))?;
                    filter.labels = Selector::from(&selector);
                }
                ("fieldSelector", Value::String(text)) => {
                    filter.fields = selector::parse_field_selector(text)
                        .map_err(|e| ReadError::Argument(e.0))?
                }
                ("namespace" | "labelSelector" | "fieldSelector", other) => {
                    return Err(ReadError::Argument(format!(
                        "{key} has the wrong type ({})",
                        object::json_type(other)
                    )));
                }
                (other, _) => {
                    return Err(ReadError::Argument(format!(
                        "unknown option {other:?} (use namespace, labelSelector, fieldSelector)"
                    )));
                }
            }
        }
        let span = if crate::telemetry::take_read_span() {
            crate::telemetry::span!(
                "list",
                resource = %resource.group_key(),
                namespace = namespace.as_deref().map(crate::telemetry::bounded),
                selector = crate::telemetry::bounded(&filter.labels.to_string()),
                found = tracing::field::Empty,
            )
        } else {
            tracing::Span::none()
        };
        let _traced = span.enter();
        let read = self
            .check(&ReadScope::new(
                ReadVerb::List,
                resource,
                namespace.as_deref(),
            ))
            .map_err(ReadError::from)
            .and_then(|()| {
                let found = self.read(Dependency::List {
                    resource: resource.clone(),
                    namespace: resource.scope(namespace.as_deref()).map(str::to_string),
                    filter,
                });
                span.record("found", i64::try_from(found.len()).unwrap_or(i64::MAX));
                Ok(Value::Array(copy_out(&found, room)?))
            });
        traced_result(&span, read)
    }
}

/// A read's result, its span marked failed when it failed.
fn traced_result(span: &tracing::Span, read: Result<Value, ReadError>) -> Result<Value, ReadError> {
    if let Err(error) = &read {
        crate::telemetry::fail(span, error);
    }
    read
}

/// How many times a read's result is held while it reaches a script: the copy made here and
/// the engine's own copy of it (Rhai values, Lua tables, about the same size), made from it.
const COPIES: usize = 2;

/// Copies what a read found, once its size is known to fit in `room` bytes: the objects are
/// shared with the caches, and a copy is only counted against the call's memory budget by the
/// engines' next progress check, after it was made whole (a `list()` of every Pod of a big
/// cluster). The size is [`heap_bytes`], a walk rather than a size kept with each cached
/// object: the caches keep none, and the walk allocates nothing and costs less than the copy.
fn copy_out(found: &[Arc<Value>], room: usize) -> Result<Vec<Value>, ReadError> {
    let mut needed = 0usize;
    for object in found {
        needed = needed.saturating_add(heap_bytes(object).saturating_mul(COPIES));
        if needed > room {
            return Err(ReadError::TooLarge { needed, room });
        }
    }
    Ok(found.iter().map(|object| (**object).clone()).collect())
}

/// What a copy of `value` allocates, nearly exactly (a test holds it to the allocator's count):
/// each string's text, each list's items, and for each object a B-tree node per 11 entries
/// (`serde_json::Map` is a `BTreeMap` here) plus its keys' text.
fn heap_bytes(value: &Value) -> usize {
    const VALUE: usize = std::mem::size_of::<Value>();
    /// A `BTreeMap<String, Value>` leaf: 11 keys, 11 values, its parent link and lengths.
    const NODE: usize = 11 * (std::mem::size_of::<String>() + VALUE) + 16;
    match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.len() * VALUE + items.iter().map(heap_bytes).sum::<usize>(),
        Value::Object(map) => {
            map.len().div_ceil(11) * NODE
                + map
                    .iter()
                    .map(|(key, item)| key.len() + heap_bytes(item))
                    .sum::<usize>()
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

/// How a read reaches the API, as RBAC sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReadVerb {
    Get,
    List,
}

impl ReadVerb {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReadVerb::Get => "get",
            ReadVerb::List => "list",
        }
    }
}

/// One read as RBAC authorizes it: a verb on a type, in one namespace or in all of them
/// (`None`; always `None` for cluster-scoped types). Names are not part of it: reads are
/// checked per type and namespace, so a Role limited to `resourceNames` does not allow them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReadScope {
    pub verb: ReadVerb,
    pub resource: ResourceType,
    pub namespace: Option<String>,
}

impl ReadScope {
    /// A read of `resource` in `namespace` (ignored for cluster-scoped types; `None` for a
    /// namespaced type: every namespace).
    pub(crate) fn new(
        verb: ReadVerb,
        resource: &ResourceType,
        namespace: Option<&str>,
    ) -> ReadScope {
        ReadScope {
            verb,
            namespace: resource.scope(namespace).map(str::to_string),
            resource: resource.clone(),
        }
    }

    /// A read of an object: `get` of its type in its namespace.
    pub(crate) fn object(resource: &ResourceType, object: &Value) -> ReadScope {
        ReadScope::new(ReadVerb::Get, resource, resource.scope_of(object))
    }
}

impl fmt::Display for ReadScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = match self.resource.group() {
            "" => "core".to_string(),
            group => group.to_string(),
        };
        write!(
            f,
            "{} {} ({group})",
            self.verb.as_str(),
            self.resource.plural
        )?;
        match (&self.namespace, self.resource.namespaced) {
            (Some(namespace), _) => write!(f, " in namespace {namespace}"),
            (None, true) => f.write_str(" in every namespace"),
            (None, false) => Ok(()),
        }
    }
}

/// A read a controller's hooks may not be handed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{account} may not {scope}, so its hooks are not given it; grant the account that read \
         (a Role or ClusterRole), or leave it out"
    )]
    Forbidden {
        account: String,
        scope: Box<ReadScope>,
    },
    #[error("cannot check whether {account} may {scope}: {message}")]
    CheckFailed {
        account: String,
        scope: Box<ReadScope>,
        message: String,
    },
}

impl Refusal {
    /// The reason Events and conditions give for it.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Refusal::Forbidden { .. } => crate::reasons::READ_FORBIDDEN,
            Refusal::CheckFailed { .. } => crate::reasons::READ_CHECK_FAILED,
        }
    }

    pub(crate) fn scope(&self) -> &ReadScope {
        match self {
            Refusal::Forbidden { scope, .. } | Refusal::CheckFailed { scope, .. } => scope,
        }
    }
}

/// Whose reads a controller's hooks get: the operator reads everything through its caches, and
/// hands a hook an object only when the controller's ServiceAccount may read it itself (the
/// runtime answers with SubjectAccessReviews; tests with a fixed list).
pub trait ReadPolicy: Send + Sync {
    fn check(&self, scope: &ReadScope) -> Result<(), Refusal>;
}

#[cfg(test)]
/// The reads a [`ReadPolicy`] of fixed answers allows, for tests.
#[derive(Debug, Default)]
pub(crate) struct AllowList {
    pub account: String,
    pub allowed: Vec<ReadScope>,
}

#[cfg(test)]
impl ReadPolicy for AllowList {
    fn check(&self, scope: &ReadScope) -> Result<(), Refusal> {
        let covered = self.allowed.iter().any(|allowed| {
            allowed.verb == scope.verb
                && allowed.resource == scope.resource
                && (allowed.namespace.is_none() || allowed.namespace == scope.namespace)
        });
        if covered {
            Ok(())
        } else {
            Err(Refusal::Forbidden {
                account: self.account.clone(),
                scope: Box::new(scope.clone()),
            })
        }
    }
}

/// The types whose contents are secret: never written to a recording, `explain` or a log, and
/// handed to a hook only when the controller's account may read them (like every type).
pub(crate) fn is_sensitive(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// What replaces a secret value: base64 of `REDACTED`, so a script decoding a recorded
/// Secret still can.
pub const REDACTED: &str = "UkVEQUNURUQ=";

/// Replaces the values of every sensitive object's `data` and `stringData` in a JSON tree (a
/// hook request or response) with [`REDACTED`], keeping the keys, and drops the
/// last-applied-configuration annotation that would repeat them. Returns how many objects it
/// redacted.
pub(crate) fn redact(value: &mut Value) -> usize {
    match value {
        Value::Object(map) => {
            let sensitive = matches!(
                (map.get("apiVersion"), map.get("kind")),
                (Some(Value::String(v)), Some(Value::String(k))) if is_sensitive(v, k)
            );
            if sensitive {
                for field in ["data", "stringData"] {
                    if let Some(Value::Object(data)) = map.get_mut(field) {
                        for value in data.values_mut() {
                            *value = Value::String(REDACTED.into());
                        }
                    }
                }
                if let Some(Value::Object(annotations)) = map
                    .get_mut("metadata")
                    .and_then(|m| m.get_mut("annotations"))
                {
                    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
                }
                1
            } else {
                map.values_mut().map(redact).sum()
            }
        }
        Value::Array(items) => items.iter_mut().map(redact).sum(),
        _ => 0,
    }
}

/// The secret strings in a JSON tree: every value of a sensitive object's `data` (base64,
/// and decoded when it is text) and `stringData`, for scrubbing them (see [`Secrets`]). Values
/// already redacted are not secret.
fn secret_strings(value: &Value, into: &mut Vec<String>) {
    use base64::Engine as _;
    match value {
        Value::Object(map) => {
            let sensitive = matches!(
                (map.get("apiVersion"), map.get("kind")),
                (Some(Value::String(v)), Some(Value::String(k))) if is_sensitive(v, k)
            );
            if !sensitive {
                return map.values().for_each(|v| secret_strings(v, into));
            }
            // Short values would scrub ordinary words out of what is scrubbed.
            let mut keep = |text: String| {
                if text.len() >= 4 && text != REDACTED && text != "REDACTED" {
                    into.push(text);
                }
            };
            for field in ["data", "stringData"] {
                let Some(Value::Object(data)) = map.get(field) else {
                    continue;
                };
                for value in data.values().filter_map(Value::as_str) {
                    keep(value.to_string());
                    if field == "data"
                        && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(value)
                        && let Ok(text) = String::from_utf8(bytes)
                    {
                        keep(text);
                    }
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| secret_strings(v, into)),
        _ => {}
    }
}

/// The values of the Secrets one work item's hook calls were handed (their requests, what
/// their `get` and `list` calls returned), base64 and decoded, whoever may read them. What the
/// calls produce besides their responses is scrubbed of them: log lines, the notes of the
/// Events they ask for, error messages, recorded fixtures, `explain`. Cheap to clone: clones
/// share the values.
#[derive(Clone, Default)]
pub struct Secrets(Arc<Mutex<Vec<String>>>);

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secrets({} values)", self.0.lock().len())
    }
}

impl Secrets {
    /// Notes the values of every Secret in `value` (a request, a read's result).
    pub(crate) fn note(&self, value: &Value) {
        let mut found = Vec::new();
        secret_strings(value, &mut found);
        if found.is_empty() {
            return;
        }
        let mut known = self.0.lock();
        for secret in found {
            if !known.contains(&secret) {
                known.push(secret);
            }
        }
        // Longest first: a value holding another (a password and its prefix) goes whole.
        known.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    }

    /// `text` with every value noted replaced by [`REDACTED`]; borrowed when none is in it.
    pub(crate) fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let known = self.0.lock();
        let mut text = Cow::Borrowed(text);
        for secret in known.iter() {
            if text.contains(secret.as_str()) {
                text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
            }
        }
        text
    }

    /// [`Secrets::scrub`] of every string in a JSON tree (keys are left as they are).
    pub(crate) fn scrub_value(&self, value: &mut Value) {
        match value {
            Value::String(text) => {
                if let Cow::Owned(scrubbed) = self.scrub(text) {
                    *text = scrubbed;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.scrub_value(v)),
            _ => {}
        }
    }
}

/// What reading `dependencies` from `store` returns now, as one digest (see
/// [`ReadAccess::seen_digest`]).
pub(crate) fn current_digest(store: &dyn ObjectStore, dependencies: &[Dependency]) -> u64 {
    combine(
        dependencies
            .iter()
            .map(|dependency| fingerprint(&current(store, dependency))),
    )
}

/// What [`ReadAccess::seen_digest`] says of calls that read nothing.
pub(crate) fn nothing_read() -> u64 {
    combine(std::iter::empty())
}

fn combine(fingerprints: impl Iterator<Item = u64>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for fingerprint in fingerprints {
        fingerprint.hash(&mut hasher);
    }
    hasher.finish()
}

/// What a dependency returns now, sorted by namespace then name: the one path the helpers,
/// [`ReadAccess::changed_since_read`] and [`current_digest`] read through.
fn current(store: &dyn ObjectStore, dependency: &Dependency) -> Vec<Arc<Value>> {
    match dependency {
        Dependency::Object {
            resource,
            namespace,
            name,
        } => store
            .get(resource, namespace.as_deref(), name)
            .into_iter()
            .collect(),
        Dependency::List {
            resource,
            namespace,
            filter,
        } => {
            let mut found: Vec<Arc<Value>> = store
                .list(resource, namespace.as_deref())
                .filter(|o| filter.matches(o))
                .collect();
            // The caches list in this order already, the offline stores need not; sorting
            // keeps the contract whatever the store.
            found.sort_by(|a, b| {
                (object::namespace(a), object::name(a))
                    .cmp(&(object::namespace(b), object::name(b)))
            });
            found
        }
    }
}

/// Identifies a read's result by the identity and version of each object in it.
fn fingerprint(objects: &[Arc<Value>]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for o in objects {
        (
            object::namespace(o),
            object::name(o),
            object::uid(o),
            object::str_at(o, "/metadata/resourceVersion"),
        )
            .hash(&mut hasher);
    }
    objects.len().hash(&mut hasher);
    hasher.finish()
}

fn string<'a>(args: &'a [Value], index: usize, what: &str) -> Result<&'a str, ReadError> {
    match args.get(index) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        Some(Value::String(_)) => Err(ReadError::Argument(format!("{what} is empty"))),
        Some(other) => Err(ReadError::Argument(format!(
            "{what} must be a string, got {}",
            object::json_type(other)
        ))),
        None => Err(ReadError::Argument(format!("{what} is missing"))),
    }
}

/// A map of the dependencies, for test-case assertions and `explain`: their descriptions.
pub(crate) fn describe(dependencies: &[Dependency]) -> Vec<String> {
    dependencies.iter().map(ToString::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::parse_label_selector;
    use crate::store::MemoryStore;
    use serde_json::json;

    /// Room for any read: the budget is not what these tests are about.
    const ROOM: usize = usize::MAX;

    fn types() -> Vec<ResourceType> {
        let resolver = crate::resources::StaticResolver::with_builtins();
        vec![
            resolver.find_kind("v1", "Namespace").unwrap(),
            resolver.find_kind("v1", "Service").unwrap(),
        ]
    }

    fn service(namespace: &str, name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": namespace, "name": name, "labels": labels}})
    }

    fn access() -> ReadAccess {
        let store = MemoryStore::new([
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "shop", "labels": {"team": "a"}}}),
            service("shop", "web", json!({"app": "web"})),
            service("shop", "db", json!({"app": "db"})),
            service("other", "web", json!({"app": "web"})),
        ]);
        ReadAccess::new(Arc::new(store), types())
    }

    #[test]
    fn get_finds_an_object_or_null_and_records_it() {
        let reads = access();
        let ns = reads
            .get(
                &[json!("v1"), json!("Namespace"), Value::Null, json!("shop")],
                ROOM,
            )
            .unwrap();
        assert_eq!(ns["metadata"]["labels"]["team"], "a");
        // A namespace given for a cluster-scoped type is ignored.
        let missing = reads
            .get(
                &[json!("v1"), json!("Namespace"), json!("x"), json!("nope")],
                ROOM,
            )
            .unwrap();
        assert_eq!(missing, Value::Null);
        assert_eq!(
            describe(&reads.dependencies()),
            ["get Namespace.v1 shop", "get Namespace.v1 nope"]
        );
        let err = reads
            .get(
                &[json!("v1"), json!("Service"), Value::Null, json!("web")],
                ROOM,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Service.v1 is namespaced: give a namespace"
        );
    }

    #[test]
    fn undeclared_types_are_refused_by_name() {
        let err = access()
            .get(
                &[json!("v1"), json!("Secret"), json!("shop"), json!("x")],
                ROOM,
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("v1 Secret is not declared in spec.reads of this controller (declared: Namespace.v1, Service.v1)"),
            "{err}"
        );
    }

    #[test]
    fn list_filters_by_namespace_and_selectors_sorted() {
        let reads = access();
        let names = |value: Value| -> Vec<String> {
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|o| format!("{}/{}", object::namespace(o).unwrap(), object::name(o)))
                .collect()
        };
        let all = reads.list(&[json!("v1"), json!("Service")], ROOM).unwrap();
        assert_eq!(names(all), ["other/web", "shop/db", "shop/web"]);
        let web = reads
            .list(
                &[
                    json!("v1"),
                    json!("Service"),
                    json!({"labelSelector": "app=web"}),
                ],
                ROOM,
            )
            .unwrap();
        assert_eq!(names(web), ["other/web", "shop/web"]);
        let map_selector = reads
            .list(
                &[
                    json!("v1"),
                    json!("Service"),
                    json!({"namespace": "shop", "labelSelector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": ["db", "x"]}]}}),
                ],
                ROOM,
            )
            .unwrap();
        assert_eq!(names(map_selector), ["shop/db"]);
        let by_field = reads
            .list(
                &[
                    json!("v1"),
                    json!("Service"),
                    json!({"fieldSelector": "metadata.name=web,metadata.namespace!=shop"}),
                ],
                ROOM,
            )
            .unwrap();
        assert_eq!(names(by_field), ["other/web"]);
        assert_eq!(
            describe(&reads.dependencies()),
            [
                "list Service.v1",
                "list Service.v1 labels=app=web",
                "list Service.v1 namespace=shop labels=app in (db,x)",
                "list Service.v1 metadata.name=web metadata.namespace!=shop",
            ]
        );
        assert!(
            reads
                .list(&[json!("v1"), json!("Service"), json!({"limit": 3})], ROOM)
                .is_err()
        );
        assert!(
            reads
                .list(
                    &[
                        json!("v1"),
                        json!("Service"),
                        json!({"fieldSelector": "spec.x=1"})
                    ],
                    ROOM
                )
                .is_err()
        );
    }

    #[test]
    fn dependencies_cover_old_and_new_versions() {
        let list = Dependency::List {
            resource: types()[1].clone(),
            namespace: Some("shop".into()),
            filter: ListFilter {
                labels: parse_label_selector("app=web").unwrap(),
                fields: Vec::new(),
            },
        };
        assert!(list.covers(&service("shop", "x", json!({"app": "web"}))));
        assert!(!list.covers(&service("shop", "x", json!({"app": "db"}))));
        assert!(!list.covers(&service("other", "x", json!({"app": "web"}))));
        let get = Dependency::Object {
            resource: types()[0].clone(),
            namespace: None,
            name: "shop".into(),
        };
        assert!(get.covers(&json!({"metadata": {"name": "shop"}})));
        assert!(!get.covers(&json!({"metadata": {"name": "other"}})));
    }

    #[test]
    fn a_change_after_a_read_is_noticed() {
        let store = Arc::new(parking_lot::RwLock::new(vec![service(
            "shop",
            "web",
            json!({"app": "web"}),
        )]));
        struct Shared(Arc<parking_lot::RwLock<Vec<Value>>>);
        impl ObjectStore for Shared {
            fn list(
                &self,
                resource: &ResourceType,
                namespace: Option<&str>,
            ) -> crate::store::Listed {
                MemoryStore::new(self.0.read().clone()).list(resource, namespace)
            }
        }
        let reads = ReadAccess::new(Arc::new(Shared(store.clone())), types());
        reads
            .list(
                &[
                    json!("v1"),
                    json!("Service"),
                    json!({"labelSelector": "app=web"}),
                ],
                ROOM,
            )
            .unwrap();
        reads
            .get(
                &[json!("v1"), json!("Service"), json!("shop"), json!("web")],
                ROOM,
            )
            .unwrap();
        assert!(!reads.changed_since_read());
        // What a resync recomputes from the store, given the dependencies the index keeps.
        let seen = reads.seen_digest().expect("not collapsed");
        let now = || current_digest(&Shared(store.clone()), &reads.dependencies());
        assert_eq!(now(), seen);
        // An object the list does not match changes nothing.
        store
            .write()
            .push(service("shop", "db", json!({"app": "db"})));
        assert!(!reads.changed_since_read());
        assert_eq!(now(), seen);
        store.write()[0]["metadata"]["resourceVersion"] = "2".into();
        assert!(reads.changed_since_read());
        assert_ne!(now(), seen);
    }

    #[test]
    fn too_many_reads_collapse_to_whole_types() {
        let reads = access();
        for i in 0..MAX_DEPENDENCIES + 5 {
            reads
                .get(
                    &[
                        json!("v1"),
                        json!("Service"),
                        json!("shop"),
                        json!(format!("s{i}")),
                    ],
                    ROOM,
                )
                .unwrap();
        }
        reads
            .get(
                &[json!("v1"), json!("Namespace"), Value::Null, json!("shop")],
                ROOM,
            )
            .unwrap();
        assert_eq!(
            describe(&reads.dependencies()),
            ["list Service.v1", "list Namespace.v1"]
        );
        assert_eq!(
            reads.seen_digest(),
            None,
            "whole types were never read whole"
        );
    }

    /// A Service the size of a real one: labels, a long annotation, many ports.
    fn big_service(namespace: &str, name: &str) -> Value {
        let annotations: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("example.com/note-{i}"), json!("x".repeat(200))))
            .collect();
        let ports: Vec<Value> = (0..30)
            .map(|i| json!({"name": format!("p{i}"), "port": 8000 + i, "protocol": "TCP"}))
            .collect();
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": namespace, "name": name, "labels": {"app": "web"},
                            "annotations": annotations},
               "spec": {"ports": ports, "selector": {"app": "web"}}})
    }

    #[test]
    fn the_size_of_a_copy_is_what_the_allocator_counts_for_it() {
        let object = big_service("shop", "web");
        let call = crate::script::memory::CallMemory::enter(usize::MAX);
        let copy = object.clone();
        let counted = crate::script::memory::CallMemory::peak();
        drop((copy, call));
        let estimated = heap_bytes(&object);
        assert!(
            estimated * 10 >= counted * 9 && estimated * 10 <= counted * 11,
            "estimated {estimated} bytes, the allocator counted {counted}"
        );
    }

    #[test]
    fn a_read_that_would_not_fit_in_the_call_is_refused_before_it_is_copied() {
        let objects: Vec<Value> = (0..50)
            .map(|i| big_service("shop", &format!("s{i}")))
            .collect();
        let total: usize = objects.iter().map(heap_bytes).sum();
        let reads = ReadAccess::new(Arc::new(MemoryStore::new(objects.clone())), types());
        let everything = [json!("v1"), json!("Service")];
        let err = reads.list(&everything, COPIES * total - 1).unwrap_err();
        let ReadError::TooLarge { needed, room } = err.clone() else {
            panic!("{err:?}")
        };
        assert_eq!(room, COPIES * total - 1);
        assert_eq!(needed, COPIES * total, "counted until it no longer fit");
        assert!(
            err.to_string().starts_with("the result needs about "),
            "{err}"
        );
        // The objects and the engine's copy of them fit: the same list is given whole.
        let listed = reads.list(&everything, COPIES * total).unwrap();
        assert_eq!(listed.as_array().map(Vec::len), Some(50));
        let one = COPIES * heap_bytes(&objects[1]);
        let get = [json!("v1"), json!("Service"), json!("shop"), json!("s1")];
        assert!(matches!(
            reads.get(&get, one - 1),
            Err(ReadError::TooLarge { .. })
        ));
        assert_eq!(reads.get(&get, one).unwrap()["metadata"]["name"], "s1");
    }

    fn limited(allowed: Vec<ReadScope>) -> ReadAccess {
        access().with_policy(Some(Arc::new(AllowList {
            account: "ServiceAccount team/app".into(),
            allowed,
        })))
    }

    #[test]
    fn reads_are_refused_where_the_account_may_not_read_and_the_refusal_is_kept() {
        let [namespace, service] = types().try_into().unwrap();
        let reads = limited(vec![
            ReadScope::new(ReadVerb::Get, &service, Some("shop")),
            ReadScope::new(ReadVerb::List, &service, Some("shop")),
        ]);
        let web = reads
            .get(
                &[json!("v1"), json!("Service"), json!("shop"), json!("web")],
                ROOM,
            )
            .unwrap();
        assert_eq!(web["metadata"]["name"], "web");
        let listed = reads
            .list(
                &[json!("v1"), json!("Service"), json!({"namespace": "shop"})],
                ROOM,
            )
            .unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 2);
        assert_eq!(reads.refusal(), None);
        // Another namespace, every namespace, another type: refused, never an empty answer.
        let other = reads
            .get(
                &[json!("v1"), json!("Service"), json!("other"), json!("web")],
                ROOM,
            )
            .unwrap_err();
        assert_eq!(
            other.to_string(),
            "ServiceAccount team/app may not get services (core) in namespace other, so its \
             hooks are not given it; grant the account that read (a Role or ClusterRole), or \
             leave it out"
        );
        let everywhere = reads
            .list(&[json!("v1"), json!("Service")], ROOM)
            .unwrap_err()
            .to_string();
        assert!(
            everywhere.contains("list services (core) in every namespace"),
            "{everywhere}"
        );
        let cluster = reads
            .get(
                &[json!("v1"), json!("Namespace"), Value::Null, json!("shop")],
                ROOM,
            )
            .unwrap_err()
            .to_string();
        assert!(
            cluster.contains("may not get namespaces (core), so"),
            "{cluster}"
        );
        // The first refusal is what the work item fails with.
        let refusal = reads.refusal().expect("kept");
        assert_eq!(refusal.reason(), crate::reasons::READ_FORBIDDEN);
        assert_eq!(refusal.scope().namespace.as_deref(), Some("other"));
        assert_eq!(refusal.scope().resource, service);
        // Refused reads are not dependencies.
        assert_eq!(reads.dependencies().len(), 2);
        let _ = namespace;
    }

    #[test]
    fn without_a_policy_everything_may_be_read() {
        let reads = access();
        assert!(!reads.is_limited());
        let [_, service] = types().try_into().unwrap();
        let scope = ReadScope::new(ReadVerb::List, &service, None);
        assert_eq!(reads.check(&scope), Ok(()));
        assert_eq!(reads.refusal(), None);
    }

    #[test]
    fn a_cluster_wide_grant_covers_every_namespace_but_not_the_other_verb() {
        let [_, service] = types().try_into().unwrap();
        let reads = limited(vec![ReadScope::new(ReadVerb::List, &service, None)]);
        let in_shop = ReadScope::new(ReadVerb::List, &service, Some("shop"));
        assert_eq!(reads.check(&in_shop), Ok(()));
        let get = ReadScope::new(ReadVerb::Get, &service, Some("shop"));
        assert!(reads.check(&get).is_err());
    }

    #[test]
    fn scopes_ignore_namespaces_of_cluster_scoped_types() {
        let [namespace, _] = types().try_into().unwrap();
        let scope = ReadScope::new(ReadVerb::Get, &namespace, Some("shop"));
        assert_eq!(scope.namespace, None);
        assert_eq!(scope.to_string(), "get namespaces (core)");
        let object = service("shop", "web", json!({}));
        let scope = ReadScope::object(&types()[1], &object);
        assert_eq!(scope.to_string(), "get services (core) in namespace shop");
    }

    #[test]
    fn secrets_are_redacted_and_their_values_found_for_scrubbing() {
        let mut request = json!({
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "kept"}},
            "related": {"Secret.v1": {"db": {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"password\":\"aHVudGVyMg==\"}}",
                    "team": "a"}},
                "data": {"password": "aHVudGVyMg=="},
                "stringData": {"token": "s3cr3t-token"}}}}
        });
        let mut found = Vec::new();
        secret_strings(&request, &mut found);
        assert_eq!(found, ["aHVudGVyMg==", "hunter2", "s3cr3t-token"]);
        let secrets = Secrets::default();
        secrets.note(&request);
        assert_eq!(
            secrets.scrub("hunter2 aHVudGVyMg== s3cr3t-token hunter"),
            format!("{REDACTED} {REDACTED} {REDACTED} hunter")
        );
        assert_eq!(redact(&mut request), 1);
        let text = request.to_string();
        for secret in &found {
            assert!(!text.contains(secret.as_str()), "{secret} in {text}");
        }
        // Redacted values are not secrets: a recording replayed scrubs nothing.
        found.clear();
        secret_strings(&request, &mut found);
        assert_eq!(found, Vec::<String>::new());
        let secret = &request["related"]["Secret.v1"]["db"];
        assert_eq!(secret["data"]["password"], REDACTED);
        assert_eq!(secret["metadata"]["annotations"]["team"], "a");
        assert_eq!(request["object"]["data"]["a"], "kept");
    }
}
