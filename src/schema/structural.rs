//! The OpenAPI v3 half of a schema check: types, required fields, enums, bounds, patterns,
//! formats, unknown fields and list types, walked over the object the way the API server
//! validates a custom resource (defaults first, so a defaulted field is never missing).
//!
//! Two dialects read the same keywords differently. A CRD's schema is structural: an object
//! node without `properties` or `additionalProperties` has no fields, and anything else in it
//! is pruned. The built-in types' published OpenAPI is not: `{"type": "object"}` there is a
//! free-form value (a `RawExtension`), and only a node that lists `properties` can call a field
//! unknown. Built-in schemas name shared parts by `$ref`; CRD schemas never do.

use super::formats;
use super::{Violation, ViolationKind};
use regex::Regex;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};

/// How a schema's object nodes treat fields they do not list (see the module's comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    Crd,
    Builtin,
}

/// What a walk needs besides the schema: where `$ref`s point, and the schema of `metadata`
/// (ObjectMeta) for the root and embedded resources.
pub(crate) struct Walk<'a> {
    pub dialect: Dialect,
    /// `components.schemas`, by name, for `$ref`.
    pub definitions: Option<&'a Map<String, Value>>,
    pub object_meta: Option<&'a Value>,
    /// Whether messages may quote the values they are about (not a Secret's).
    pub quotes_values: bool,
    /// A branch of `anyOf`, `oneOf` or `not` tried: only whether it holds counts, so the walk
    /// stops at its first violation and writes no path or type mismatch for it (a branch's
    /// usual failure: IntOrString's `string` branch fails on every number).
    pub trial: bool,
    pub violations: Vec<Violation>,
}

/// Deep enough for every schema Kubernetes ships; a deeper object is refused, not walked.
const MAX_DEPTH: usize = 64;

const REF_PREFIX: &str = "#/components/schemas/";

impl<'a> Walk<'a> {
    /// Checks `value` at `path` against `schema`, the root of a type when `root` (where
    /// `apiVersion`, `kind` and `metadata` are every object's).
    pub(crate) fn check(&mut self, schema: &'a Value, value: &Value, root: bool) {
        self.node(schema, value, &Path::Root, root, 0);
    }

    fn node(
        &mut self,
        schema: &'a Value,
        value: &Value,
        path: &Path<'_>,
        resource: bool,
        depth: usize,
    ) {
        if self.trial && !self.violations.is_empty() {
            return;
        }
        if depth > MAX_DEPTH {
            self.push(
                path,
                ViolationKind::TooDeep,
                format!("nests deeper than the {MAX_DEPTH} levels checked"),
            );
            return;
        }
        let Some(node) = self.keywords(schema) else {
            return;
        };
        // A null is dropped before validation (unless the schema keeps it), as the API server
        // prunes it; a required field it leaves missing is told by the parent.
        if value.is_null() {
            return;
        }
        for sub in node.all_of.into_iter().flatten() {
            self.node(sub, value, path, resource, depth + 1);
        }
        self.alternatives(&node, value, path, resource, depth);
        if !self.type_matches(&node, value, path) {
            return;
        }
        if let Some(allowed) = node.enumeration
            && !allowed.iter().any(|a| same_value(a, value))
        {
            let listed: Vec<String> = allowed.iter().map(short).collect();
            let message = match self.quotes_values {
                true => format!("must be one of {}, not {}", listed.join(", "), short(value)),
                false => format!("must be one of {}", listed.join(", ")),
            };
            self.push(path, ViolationKind::Enum, message);
        }
        match value {
            Value::String(text) => self.string(&node, text, path),
            Value::Number(_) => self.number(&node, value, path),
            Value::Array(items) => self.array(&node, items, path, depth),
            Value::Object(fields) => self.object(&node, fields, path, resource, depth),
            _ => {}
        }
    }

    /// The keywords of a schema node, after the `$ref`s it is (built-in schemas only); `None`
    /// for a node that is not an object.
    fn keywords(&self, schema: &'a Value) -> Option<Keywords<'a>> {
        Some(Keywords::of(self.deref(schema).as_object()?))
    }

    /// The schema a `$ref` names (built-in schemas only), else the node itself.
    fn deref(&self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        for _ in 0..8 {
            let Some(target) = schema.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let found = target
                .strip_prefix(REF_PREFIX)
                .and_then(|name| self.definitions?.get(name));
            match found {
                Some(next) => schema = next,
                None => break,
            }
        }
        schema
    }

    /// `anyOf`, `oneOf` and `not`: each branch is walked on its own, and only how many pass
    /// counts.
    fn alternatives(
        &mut self,
        node: &Keywords<'a>,
        value: &Value,
        path: &Path<'_>,
        resource: bool,
        depth: usize,
    ) {
        let passes = |walk: &Self, branch: &'a Value| {
            let mut trial = Walk {
                dialect: walk.dialect,
                definitions: walk.definitions,
                object_meta: walk.object_meta,
                quotes_values: walk.quotes_values,
                trial: true,
                violations: Vec::new(),
            };
            trial.node(branch, value, path, resource, depth + 1);
            trial.violations.is_empty()
        };
        if let Some(branches) = node.any_of
            && !branches.is_empty()
            && !branches.iter().any(|b| passes(self, b))
        {
            self.push(
                path,
                ViolationKind::Alternatives,
                format!("matches none of the {} schemas of anyOf", branches.len()),
            );
        }
        if let Some(branches) = node.one_of
            && !branches.is_empty()
        {
            let matched = branches.iter().filter(|b| passes(self, b)).count();
            if matched != 1 {
                self.push(
                    path,
                    ViolationKind::Alternatives,
                    format!(
                        "must match exactly one of the {} schemas of oneOf; it matches {matched}",
                        branches.len()
                    ),
                );
            }
        }
        if let Some(branch) = node.not
            && passes(self, branch)
        {
            self.push(
                path,
                ViolationKind::Alternatives,
                "matches the schema of `not`".to_string(),
            );
        }
    }

    /// Whether the value has the node's type (an `int-or-string` node takes either); says
    /// why not when it does not. A node without a type takes anything.
    fn type_matches(&mut self, node: &Keywords<'_>, value: &Value, path: &Path<'_>) -> bool {
        if node.int_or_string {
            if is_integer(value) || value.is_string() {
                return true;
            }
            self.push(
                path,
                ViolationKind::Type,
                format!(
                    "must be an integer or a string, not {}",
                    self.described(value)
                ),
            );
            return false;
        }
        let Some(wanted) = node.type_name else {
            return true;
        };
        let matches = match wanted {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => is_integer(value),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !matches {
            let message = match self.trial {
                true => String::new(),
                false => format!("must be {}, not {}", article(wanted), self.described(value)),
            };
            self.push(path, ViolationKind::Type, message);
        }
        matches
    }

    fn string(&mut self, node: &Keywords<'_>, text: &str, path: &Path<'_>) {
        let length = text.chars().count();
        if let Some(max) = node.max_length
            && length > max
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("may not be longer than {max} characters (it has {length})"),
            );
        }
        if let Some(min) = node.min_length
            && length < min
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("must be at least {min} characters long (it has {length})"),
            );
        }
        if let Some(pattern) = node.pattern {
            match compiled(pattern) {
                Some(regex) if !regex.is_match(text) => self.push(
                    path,
                    ViolationKind::Pattern,
                    format!("{} must match the pattern {pattern:?}", self.quoted(text)),
                ),
                _ => {}
            }
        }
        if let Some(format) = node.format
            && let Some(problem) = formats::problem(format, text)
        {
            self.push(
                path,
                ViolationKind::Format,
                format!("{} is not a valid {format}: {problem}", self.quoted(text)),
            );
        }
    }

    fn number(&mut self, node: &Keywords<'_>, value: &Value, path: &Path<'_>) {
        let Some(number) = value.as_f64() else {
            return;
        };
        if let Some(max) = node.maximum {
            let exclusive = node.exclusive_maximum;
            if number > max || (exclusive && number == max) {
                let bound = if exclusive { "less than" } else { "at most" };
                self.push(
                    path,
                    ViolationKind::Bounds,
                    format!(
                        "must be {bound} {}, not {}",
                        plain(max),
                        self.described(value)
                    ),
                );
            }
        }
        if let Some(min) = node.minimum {
            let exclusive = node.exclusive_minimum;
            if number < min || (exclusive && number == min) {
                let bound = if exclusive {
                    "greater than"
                } else {
                    "at least"
                };
                self.push(
                    path,
                    ViolationKind::Bounds,
                    format!(
                        "must be {bound} {}, not {}",
                        plain(min),
                        self.described(value)
                    ),
                );
            }
        }
        // As kube-openapi: a factor under one multiplies by its inverse, and a quotient within
        // 1e-9 of a whole number is one (0.3 is a multiple of 0.1).
        if let Some(factor) = node.multiple_of
            && factor > 0.0
        {
            let quotient = match factor < 1.0 {
                true => number * (1.0 / factor),
                false => number / factor,
            };
            if (quotient - quotient.round()).abs() > 1e-9 {
                let message = format!(
                    "must be a multiple of {}, not {}",
                    plain(factor),
                    self.described(value)
                );
                self.push(path, ViolationKind::Bounds, message);
            }
        }
    }

    fn array(&mut self, node: &Keywords<'a>, items: &[Value], path: &Path<'_>, depth: usize) {
        let count = items.len();
        if let Some(max) = node.max_items
            && count > max
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("may have at most {max} items (it has {count})"),
            );
        }
        if let Some(min) = node.min_items
            && count < min
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("must have at least {min} items (it has {count})"),
            );
        }
        let list_type = node.list_type;
        if list_type == Some("set") || node.unique_items {
            for (index, item) in items.iter().enumerate() {
                if items[..index]
                    .iter()
                    .any(|earlier| same_value(earlier, item))
                {
                    self.push(
                        &Path::Index(path, index),
                        ViolationKind::Duplicate,
                        match self.quotes_values {
                            true => {
                                format!("duplicate value {} in a list of unique items", short(item))
                            }
                            false => "duplicate value in a list of unique items".to_string(),
                        },
                    );
                }
            }
        }
        if list_type == Some("map") {
            self.map_list(node, items, path);
        }
        if let Some(item_schema) = node.items {
            for (index, item) in items.iter().enumerate() {
                self.node(
                    item_schema,
                    item,
                    &Path::Index(path, index),
                    false,
                    depth + 1,
                );
            }
        }
    }

    /// A list of type `map`: no two items with the same values of its keys.
    fn map_list(&mut self, node: &Keywords<'_>, items: &[Value], path: &Path<'_>) {
        let keys: Vec<&str> = node
            .list_map_keys
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if keys.is_empty() {
            return;
        }
        let mut seen: HashSet<String> = HashSet::new();
        for (index, item) in items.iter().enumerate() {
            let tuple: Vec<String> = keys
                .iter()
                .map(|key| format!("{key}={}", short(item.get(*key).unwrap_or(&Value::Null))))
                .collect();
            let tuple = tuple.join(",");
            if !seen.insert(tuple.clone()) {
                self.push(
                    &Path::Index(path, index),
                    ViolationKind::Duplicate,
                    format!("duplicate entry for the list's keys [{tuple}]"),
                );
            }
        }
    }

    fn object(
        &mut self,
        node: &Keywords<'a>,
        fields: &Map<String, Value>,
        path: &Path<'_>,
        resource: bool,
        depth: usize,
    ) {
        let count = fields.len();
        if let Some(max) = node.max_properties
            && count > max
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("may have at most {max} fields (it has {count})"),
            );
        }
        if let Some(min) = node.min_properties
            && count < min
        {
            self.push(
                path,
                ViolationKind::Bounds,
                format!("must have at least {min} fields (it has {count})"),
            );
        }
        let properties = node.properties;
        let embedded = node.embedded_resource;
        let resource = resource || embedded;
        for required in node.required.into_iter().flatten() {
            let Some(name) = required.as_str() else {
                continue;
            };
            let property = properties.and_then(|p| p.get(name));
            let says = |key: &str, wanted: fn(&Value) -> bool| {
                property.is_some_and(|p| {
                    p.get(key).is_some_and(wanted) || self.deref(p).get(key).is_some_and(wanted)
                })
            };
            let declares = |key: &str| says(key, |_| true);
            let missing = match fields.get(name) {
                None => true,
                Some(Value::Null) => !says("nullable", |v| v == &Value::Bool(true)),
                Some(_) => false,
            };
            if missing && !declares("default") {
                self.push(
                    &Path::Field(path, name),
                    ViolationKind::Required,
                    "is required".to_string(),
                );
            }
        }
        let additional = node.additional_properties;
        let preserves = node.preserves_unknown_fields;
        let closed = match self.dialect {
            Dialect::Crd => {
                node.type_name == Some("object")
                    && !preserves
                    && additional.is_none_or(|a| a == &Value::Bool(false))
            }
            Dialect::Builtin => {
                properties.is_some() && additional.is_none_or(|a| a == &Value::Bool(false))
            }
        };
        for (name, value) in fields {
            let field_path = Path::Field(path, name);
            if resource && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                self.resource_field(properties, name, value, &field_path, depth);
                continue;
            }
            if let Some(schema) = properties.and_then(|p| p.get(name)) {
                self.node(schema, value, &field_path, false, depth + 1);
            } else if let Some(schema) = additional.filter(|a| a.is_object()) {
                self.node(schema, value, &Path::Key(path, name), false, depth + 1);
            } else if closed {
                let known = properties.map(|p| p.keys().map(String::as_str).collect::<Vec<_>>());
                let hint = known
                    .and_then(|known| closest(name, &known))
                    .map(|near| format!(" (did you mean {near:?}?)"))
                    .unwrap_or_default();
                self.push(
                    &field_path,
                    ViolationKind::Unknown,
                    format!("unknown field, not in the schema{hint}"),
                );
            }
        }
        if embedded {
            for name in ["apiVersion", "kind"] {
                if fields
                    .get(name)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    self.push(
                        &Path::Field(path, name),
                        ViolationKind::Required,
                        "is required in an embedded resource".to_string(),
                    );
                }
            }
        }
    }

    /// `apiVersion`, `kind` and `metadata` of a resource: strings, and ObjectMeta (checked
    /// against its own schema, whatever the type's schema says of it).
    fn resource_field(
        &mut self,
        properties: Option<&'a Map<String, Value>>,
        name: &str,
        value: &Value,
        path: &Path<'_>,
        depth: usize,
    ) {
        if name != "metadata" {
            if !value.is_string() {
                self.push(
                    path,
                    ViolationKind::Type,
                    format!("must be a string, not {}", self.described(value)),
                );
            }
            return;
        }
        match self.object_meta {
            Some(meta) => self.node(meta, value, path, false, depth + 1),
            None => {
                if let Some(schema) = properties.and_then(|p| p.get(name)) {
                    let schema = self.deref(schema);
                    if schema.get("properties").is_some() {
                        self.node(schema, value, path, false, depth + 1);
                    }
                }
            }
        }
    }

    fn described(&self, value: &Value) -> String {
        described(value, self.quotes_values)
    }

    /// A string as messages quote it: `"text"`, or `the value` where values are not quoted.
    fn quoted(&self, text: &str) -> String {
        match self.quotes_values {
            true => short_str(text),
            false => "the value".to_string(),
        }
    }

    fn push(&mut self, path: &Path<'_>, kind: ViolationKind, message: String) {
        self.violations.push(Violation {
            field: match self.trial {
                true => String::new(),
                false => path.to_string(),
            },
            message,
            rule: None,
            kind,
            unchanged: false,
        });
    }
}

/// Where in the object a walk is: made as it goes, written out only for a violation (most
/// walks find none, and a path per field would be most of their cost).
#[derive(Clone, Copy)]
pub(crate) enum Path<'p> {
    Root,
    /// `spec.replicas`.
    Field(&'p Path<'p>, &'p str),
    /// `spec.ports[0]`.
    Index(&'p Path<'p>, usize),
    /// A map entry, as the API server writes it: `metadata.labels[app]`.
    Key(&'p Path<'p>, &'p str),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Field(Path::Root, name) => f.write_str(name),
            Path::Field(parent, name) => write!(f, "{parent}.{name}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
            Path::Key(parent, key) => write!(f, "{parent}[{key}]"),
        }
    }
}

fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// JSON equality where `3` and `3.0` are one number, as Kubernetes' decoding makes them.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The keywords of one schema node the walk reads, gathered in one pass over the node: a
/// node has a handful of the thirty keywords asked about, and a map lookup for each of them
/// was most of a check's cost.
#[derive(Default)]
struct Keywords<'a> {
    all_of: Option<&'a Vec<Value>>,
    any_of: Option<&'a Vec<Value>>,
    one_of: Option<&'a Vec<Value>>,
    not: Option<&'a Value>,
    type_name: Option<&'a str>,
    int_or_string: bool,
    enumeration: Option<&'a Vec<Value>>,
    max_length: Option<usize>,
    min_length: Option<usize>,
    pattern: Option<&'a str>,
    format: Option<&'a str>,
    maximum: Option<f64>,
    minimum: Option<f64>,
    exclusive_maximum: bool,
    exclusive_minimum: bool,
    multiple_of: Option<f64>,
    max_items: Option<usize>,
    min_items: Option<usize>,
    list_type: Option<&'a str>,
    unique_items: bool,
    list_map_keys: Option<&'a Vec<Value>>,
    items: Option<&'a Value>,
    max_properties: Option<usize>,
    min_properties: Option<usize>,
    properties: Option<&'a Map<String, Value>>,
    required: Option<&'a Vec<Value>>,
    additional_properties: Option<&'a Value>,
    preserves_unknown_fields: bool,
    embedded_resource: bool,
}

impl<'a> Keywords<'a> {
    fn of(node: &'a Map<String, Value>) -> Keywords<'a> {
        let unsigned = |value: &Value| value.as_u64().map(|n| n as usize);
        let mut keywords = Keywords::default();
        for (key, value) in node {
            let flag = value == &Value::Bool(true);
            match key.as_str() {
                "allOf" => keywords.all_of = value.as_array(),
                "anyOf" => keywords.any_of = value.as_array(),
                "oneOf" => keywords.one_of = value.as_array(),
                "not" => keywords.not = Some(value),
                "type" => keywords.type_name = value.as_str(),
                "x-kubernetes-int-or-string" => keywords.int_or_string = flag,
                "enum" => keywords.enumeration = value.as_array(),
                "maxLength" => keywords.max_length = unsigned(value),
                "minLength" => keywords.min_length = unsigned(value),
                "pattern" => keywords.pattern = value.as_str(),
                "format" => keywords.format = value.as_str(),
                "maximum" => keywords.maximum = value.as_f64(),
                "minimum" => keywords.minimum = value.as_f64(),
                "exclusiveMaximum" => keywords.exclusive_maximum = flag,
                "exclusiveMinimum" => keywords.exclusive_minimum = flag,
                "multipleOf" => keywords.multiple_of = value.as_f64(),
                "maxItems" => keywords.max_items = unsigned(value),
                "minItems" => keywords.min_items = unsigned(value),
                "x-kubernetes-list-type" => keywords.list_type = value.as_str(),
                "uniqueItems" => keywords.unique_items = flag,
                "x-kubernetes-list-map-keys" => keywords.list_map_keys = value.as_array(),
                "items" => keywords.items = Some(value),
                "maxProperties" => keywords.max_properties = unsigned(value),
                "minProperties" => keywords.min_properties = unsigned(value),
                "properties" => keywords.properties = value.as_object(),
                "required" => keywords.required = value.as_array(),
                "additionalProperties" => keywords.additional_properties = Some(value),
                "x-kubernetes-preserve-unknown-fields" => keywords.preserves_unknown_fields = flag,
                "x-kubernetes-embedded-resource" => keywords.embedded_resource = flag,
                _ => {}
            }
        }
        keywords
    }
}

fn article(type_name: &str) -> String {
    match type_name {
        "object" | "array" | "integer" => format!("an {type_name}"),
        other => format!("a {other}"),
    }
}

/// What a value is, for a type mismatch: `a string ("three")`.
fn described(value: &Value, quoted: bool) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    match value {
        Value::Array(_) | Value::Object(_) => kind.to_string(),
        _ if !quoted => kind.to_string(),
        _ => format!("{kind} ({})", short(value)),
    }
}

/// A value as JSON, cut short: messages quote what they are about, not whole objects.
fn short(value: &Value) -> String {
    match value {
        Value::String(text) => short_str(text),
        Value::Array(_) => "[…]".to_string(),
        Value::Object(_) => "{…}".to_string(),
        other => other.to_string(),
    }
}

fn short_str(text: &str) -> String {
    const KEPT: usize = 64;
    if text.chars().count() <= KEPT {
        format!("{text:?}")
    } else {
        let cut: String = text.chars().take(KEPT).collect();
        format!("{cut:?}…")
    }
}

/// `3` for 3.0: bounds are written as authors wrote them.
fn plain(number: f64) -> String {
    if number.fract() == 0.0 && number.abs() < 1e15 {
        format!("{}", number as i64)
    } else {
        number.to_string()
    }
}

/// Patterns compile once: the same few run on every object of a type.
fn compiled(pattern: &str) -> Option<Arc<Regex>> {
    static CACHE: LazyLock<parking_lot::Mutex<HashMap<String, Option<Arc<Regex>>>>> =
        LazyLock::new(Default::default);
    let mut cache = CACHE.lock();
    if let Some(found) = cache.get(pattern) {
        return found.clone();
    }
    // Kubernetes matches with Go's RE2; the regex crate's syntax is RE2's. A pattern it
    // cannot compile is not checked (the API server refused the CRD with it, or accepts it).
    let regex = Regex::new(pattern).ok().map(Arc::new);
    if cache.len() < 4096 {
        cache.insert(pattern.to_string(), regex.clone());
    }
    regex
}

/// The declared field a misspelled one most likely meant: at most two edits away, or the same
/// but for case.
fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|candidate| {
            (
                edits(&name.to_lowercase(), &candidate.to_lowercase()),
                *candidate,
            )
        })
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, by characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}
