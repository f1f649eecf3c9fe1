//! What each helper takes and returns, for editors (`metascript definitions`): one entry per
//! helper of [`HELPERS`](super::helpers::HELPERS), matched by name. A test checks that every
//! bound helper has exactly one entry here, so a helper cannot be added without its docs.

/// A value type, spelled the way each language's definitions spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Type {
    Any,
    String,
    Integer,
    Number,
    Boolean,
    Map,
    /// A map of strings (labels, annotations).
    StringMap,
    /// A label selector (`matchLabels`, `matchExpressions`).
    Selector,
    /// A reader's path: a dotted string or a list of steps.
    Path,
    /// A list of objects.
    Objects,
    Nothing,
}

impl Type {
    /// LuaLS annotation syntax.
    pub(super) fn lua(self) -> &'static str {
        match self {
            Type::Any => "any",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
            Type::Map => "table<string, any>",
            Type::StringMap => "table<string, string>",
            Type::Selector => "metascript.LabelSelector|nil",
            Type::Path => "string|(string|integer)[]",
            Type::Objects => "table<string, any>[]",
            Type::Nothing => "nil",
        }
    }

    /// Rhai definitions syntax (`?` is any value).
    pub(super) fn rhai(self) -> &'static str {
        match self {
            Type::Any | Type::Path | Type::Number => "?",
            Type::String => "String",
            Type::Integer => "int",
            Type::Boolean => "bool",
            Type::Map | Type::StringMap | Type::Selector => "Map",
            Type::Objects => "Array",
            Type::Nothing => "()",
        }
    }
}

pub(crate) struct Param {
    pub name: &'static str,
    pub ty: Type,
}

/// The documentation of one helper. Parameters past the helper's `min_args` are optional.
pub(crate) struct HelperDoc {
    pub name: &'static str,
    pub params: &'static [Param],
    pub returns: Type,
    /// What the result may also be: the reader's fallback (`nil` in Lua) or nothing.
    pub nullable: bool,
    pub summary: &'static str,
}

const fn p(name: &'static str, ty: Type) -> Param {
    Param { name, ty }
}

const fn doc(
    name: &'static str,
    params: &'static [Param],
    returns: Type,
    nullable: bool,
    summary: &'static str,
) -> HelperDoc {
    HelperDoc {
        name,
        params,
        returns,
        nullable,
        summary,
    }
}

use Type::*;

#[rustfmt::skip]
pub(crate) const HELPER_DOCS: &[HelperDoc] = &[
    doc("json_encode", &[p("value", Any), p("pretty", Boolean)], String, false,
        "JSON text of a value; compact unless `pretty` is true."),
    doc("json_decode", &[p("text", String)], Any, true,
        "The value of JSON text; an error on invalid JSON."),
    doc("yaml_encode", &[p("value", Any)], String, false, "YAML text of a value."),
    doc("yaml_decode", &[p("text", String)], Any, true,
        "The value of one YAML document; an error on invalid YAML."),
    doc("base64_encode", &[p("text", String)], String, false,
        "Standard base64, with padding."),
    doc("base64_decode", &[p("text", String)], String, false,
        "The decoded text; an error on invalid base64 or bytes that are not UTF-8 text."),
    doc("sha256", &[p("text", String)], String, false,
        "Lowercase hex SHA-256 of the UTF-8 bytes."),
    doc("log", &[p("level", String), p("message", Any), p("fields", Map)], Nothing, false,
        "Logs `message` at `level` (error, warn, info, debug, trace) with optional structured fields."),
    doc("now", &[], String, false,
        "The call's time as RFC 3339 UTC with whole seconds, fixed for the whole call."),
    doc("parse_time", &[p("text", String)], Integer, false,
        "An RFC 3339 time as Unix seconds; an error if invalid."),
    doc("to_rfc3339", &[p("seconds", Number)], String, false,
        "Unix seconds (fractions dropped) as RFC 3339 UTC."),
    doc("parse_duration", &[p("text", Any)], Number, false,
        "Seconds of a Go-style duration (`90s`, `1h30m`, `7d`); a bare number is seconds."),
    doc("selector_matches", &[p("selector", Selector), p("labels", StringMap)], Boolean, false,
        "Whether a label selector matches a label map, with Kubernetes semantics."),
    doc("deep_merge", &[p("a", Any), p("b", Any)], Any, false,
        "JSON merge patch (RFC 7386) of `b` onto `a`: maps merge, a null in `b` deletes the key."),
    doc("get_path", &[p("obj", Any), p("path", Path), p("default", Any)], Any, true,
        "The value at `path`, or `default` (null) if a step is missing or null: the optional read."),
    doc("name", &[p("obj", Any)], String, false, "`metadata.name`, or \"\"."),
    doc("namespace", &[p("obj", Any)], String, false, "`metadata.namespace`, or \"\"."),
    doc("labels", &[p("obj", Any)], StringMap, false, "`metadata.labels`, or an empty map."),
    doc("annotations", &[p("obj", Any)], StringMap, false,
        "`metadata.annotations`, or an empty map."),
    doc("label", &[p("obj", Any), p("key", String)], String, true,
        "The label's value, or null."),
    doc("annotation", &[p("obj", Any), p("key", String)], String, true,
        "The annotation's value, or null."),
    doc("get", &[p("apiVersion", String), p("kind", String), p("namespace", String), p("name", String)], Map, true,
        "An object of a type declared in `spec.reads`, from the operator's cache, or null; a change to it re-runs the hook."),
    doc("list", &[p("apiVersion", String), p("kind", String), p("opts", Map)], Objects, false,
        "Objects of a type declared in `spec.reads` (opts: namespace, labelSelector, fieldSelector), sorted by namespace and name; a change to what matches re-runs the hook."),
    doc("event", &[p("type", String), p("reason", String), p("message", Any)], Nothing, false,
        "Records a Kubernetes Event (`Normal` or `Warning`, a CamelCase reason) on the target (decorator) or parent (map)."),
];

/// The docs of the helper called `name`.
pub(crate) fn helper_doc(name: &str) -> Option<&'static HelperDoc> {
    HELPER_DOCS.iter().find(|doc| doc.name == name)
}
