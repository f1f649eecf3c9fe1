//! The helper library, written once over `serde_json::Value` and bound into both engines by thin
//! adapters (`rhai_engine::register_helper`, `lua_engine::bind_helper`). Each helper takes its
//! arguments as JSON and returns JSON, so both languages see the same names, argument rules,
//! results and error messages. The object readers are split into where to look ([`Read`]) and
//! what to make of what is there, so the adapters can walk their first argument in place: the
//! walk follows one rule ([`super::helper_env::step`]) in every engine.

use super::active::with_active;
use super::error::LimitKind;
use super::helper_env::{HelperEnv, walk_json};
use super::limits::memory_limit;
use super::log::{LogLevel, LogLine};
use super::memory;
use crate::reads::ReadError;
use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::Digest;
use std::collections::BTreeMap;

/// A helper failed; becomes a runtime error at the calling line of the script.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct HelperError(pub String);

type HelperResult = Result<Value, HelperError>;

/// One helper: its script-visible name, how many arguments it takes, and its implementation.
pub(crate) struct Helper {
    pub name: &'static str,
    pub min_args: usize,
    pub max_args: usize,
    pub run: Run,
}

/// How a helper gets its arguments.
pub(crate) enum Run {
    /// Every argument converted to JSON.
    Json(fn(&HelperEnv, &[Value]) -> HelperResult),
    /// An object reader: it looks at one place in its first argument, so the engines walk there
    /// in their own values ([`super::helper_env::step`]) and convert only what they find, not
    /// the whole object.
    Read(Read),
}

pub(crate) struct Read {
    /// The path to read, from the arguments after the object (as JSON).
    pub path: fn(&[Value]) -> Result<Vec<String>, HelperError>,
    /// The result, from what is at the path (`None` when a step is missing) and the arguments
    /// after the object.
    pub finish: fn(Option<Value>, &[Value]) -> Value,
}

impl Helper {
    /// Checks the argument count, then runs the helper, prefixing errors with its name.
    pub(super) fn call(&self, env: &HelperEnv, args: &[Value]) -> HelperResult {
        self.check_arity(args.len())?;
        match &self.run {
            Run::Json(run) => run(env, args).map_err(|e| self.error(e)),
            Run::Read(read) => {
                let path = (read.path)(&args[1..]).map_err(|e| self.error(e))?;
                Ok((read.finish)(
                    walk_json(&args[0], &path).cloned(),
                    &args[1..],
                ))
            }
        }
    }

    pub(super) fn check_arity(&self, count: usize) -> Result<(), HelperError> {
        if count < self.min_args || count > self.max_args {
            return Err(HelperError(format!("{}, got {count}", self.arity_text())));
        }
        Ok(())
    }

    /// `name: expected 1 to 2 argument(s)`, the start of every wrong-count message.
    pub(super) fn arity_text(&self) -> String {
        let expected = if self.min_args == self.max_args {
            self.min_args.to_string()
        } else {
            format!("{} to {}", self.min_args, self.max_args)
        };
        format!("{}: expected {expected} argument(s)", self.name)
    }

    /// The helper's error as scripts see it: prefixed with its name.
    pub(super) fn error(&self, error: HelperError) -> HelperError {
        HelperError(format!("{}: {}", self.name, error.0))
    }
}

/// Every helper, in the order `docs/scripting.md` documents them.
pub(crate) const HELPERS: &[Helper] = &[
    helper("json_encode", 1, 2, json_encode),
    helper("json_decode", 1, 1, json_decode),
    helper("yaml_encode", 1, 1, yaml_encode),
    helper("yaml_decode", 1, 1, yaml_decode),
    helper("base64_encode", 1, 1, base64_encode),
    helper("base64_decode", 1, 1, base64_decode),
    helper("sha256", 1, 1, sha256),
    helper("log", 2, 3, log),
    helper("now", 0, 0, now),
    helper("parse_time", 1, 1, parse_time),
    helper("to_rfc3339", 1, 1, to_rfc3339),
    helper("parse_duration", 1, 1, parse_duration),
    helper("selector_matches", 2, 2, selector_matches),
    helper("deep_merge", 2, 2, deep_merge),
    helper("get", 4, 4, get),
    helper("list", 2, 3, list),
    helper("event", 3, 3, event),
    reader("get_path", 2, 3, get_path_place, get_path_result),
    reader("name", 1, 1, name_place, string_or_empty),
    reader("namespace", 1, 1, namespace_place, string_or_empty),
    reader("labels", 1, 1, labels_place, map_or_empty),
    reader("annotations", 1, 1, annotations_place, map_or_empty),
    reader("label", 2, 2, label_place, value_or_null),
    reader("annotation", 2, 2, annotation_place, value_or_null),
];

const fn helper(
    name: &'static str,
    min_args: usize,
    max_args: usize,
    run: fn(&HelperEnv, &[Value]) -> HelperResult,
) -> Helper {
    Helper {
        name,
        min_args,
        max_args,
        run: Run::Json(run),
    }
}

const fn reader(
    name: &'static str,
    min_args: usize,
    max_args: usize,
    path: fn(&[Value]) -> Result<Vec<String>, HelperError>,
    finish: fn(Option<Value>, &[Value]) -> Value,
) -> Helper {
    Helper {
        name,
        min_args,
        max_args,
        run: Run::Read(Read { path, finish }),
    }
}

use crate::object::json_type as type_name;

fn string_arg<'a>(args: &'a [Value], index: usize, what: &str) -> Result<&'a str, HelperError> {
    match args.get(index) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(HelperError(format!(
            "{what} must be a string, got {}",
            type_name(other)
        ))),
        None => Err(HelperError(format!("{what} is missing"))),
    }
}

fn json_encode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let pretty = match args.get(1) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(HelperError(format!(
                "the pretty flag must be a boolean, got {}",
                type_name(other)
            )));
        }
    };
    let text = if pretty {
        serde_json::to_string_pretty(&args[0])
    } else {
        serde_json::to_string(&args[0])
    };
    text.map(Value::String)
        .map_err(|e| HelperError(e.to_string()))
}

fn json_decode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the text")?;
    serde_json::from_str(text).map_err(|e| HelperError(format!("invalid JSON: {e}")))
}

fn yaml_encode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    serde_saphyr::to_string(&args[0])
        .map(Value::String)
        .map_err(|e| HelperError(e.to_string()))
}

fn yaml_decode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the text")?;
    serde_saphyr::from_str::<Value>(text).map_err(|e| HelperError(format!("invalid YAML: {e}")))
}

fn base64_encode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the text")?;
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(text),
    ))
}

fn base64_decode(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the text")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| HelperError(format!("invalid base64: {e}")))?;
    // Scripts only hold text; binary payloads (keys, images) have no faithful JSON string form.
    String::from_utf8(bytes)
        .map(Value::String)
        .map_err(|_| HelperError("the decoded bytes are not UTF-8 text".into()))
}

fn sha256(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the text")?;
    Ok(Value::String(hex::encode(sha2::Sha256::digest(
        text.as_bytes(),
    ))))
}

fn log(env: &HelperEnv, args: &[Value]) -> HelperResult {
    let level_text = string_arg(args, 0, "the level")?;
    let level = LogLevel::parse(level_text).ok_or_else(|| {
        HelperError(format!(
            "unknown level {level_text:?} (use error, warn, info, debug or trace)"
        ))
    })?;
    let message = match &args[1] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let fields = match args.get(2) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            return Err(HelperError(format!(
                "the fields must be a map, got {}",
                type_name(other)
            )));
        }
    };
    env.log(LogLine {
        level,
        message,
        fields,
    });
    Ok(Value::Null)
}

fn now(env: &HelperEnv, _: &[Value]) -> HelperResult {
    Ok(Value::String(format_timestamp(
        env.now("now()").as_second(),
    )?))
}

fn format_timestamp(seconds: i64) -> Result<String, HelperError> {
    let ts = jiff::Timestamp::from_second(seconds)
        .map_err(|e| HelperError(format!("time out of range: {e}")))?;
    // Kubernetes timestamps have whole seconds; `Z` rather than `+00:00`, like the API server.
    Ok(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

fn parse_time(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = string_arg(args, 0, "the time")?;
    let ts: jiff::Timestamp = text
        .parse()
        .map_err(|e| HelperError(format!("invalid RFC 3339 time {text:?}: {e}")))?;
    Ok(Value::from(ts.as_second()))
}

fn to_rfc3339(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let seconds = match &args[0] {
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i,
            (None, Some(f)) if f.is_finite() => f.floor() as i64,
            _ => return Err(HelperError(format!("time out of range: {n}"))),
        },
        other => {
            return Err(HelperError(format!(
                "the seconds must be a number, got {}",
                type_name(other)
            )));
        }
    };
    Ok(Value::String(format_timestamp(seconds)?))
}

/// Go-style durations (`90s`, `1h30m`, `1.5h`, `500ms`) plus `d` for days, since TTLs of
/// snapshots and backups are usually written in days; a bare number means seconds.
fn parse_duration(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let text = match &args[0] {
        Value::Number(n) => return Ok(Value::Number(n.clone())),
        Value::String(s) => s.trim(),
        other => {
            return Err(HelperError(format!(
                "the duration must be a string, got {}",
                type_name(other)
            )));
        }
    };
    let invalid = || {
        HelperError(format!(
            "invalid duration {text:?} (expected e.g. 90s, 1h30m, 7d)"
        ))
    };
    if let Ok(seconds) = text.parse::<i64>() {
        return Ok(Value::from(seconds));
    }
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            _ => return Err(invalid()),
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    if negative {
        total = -total;
    }
    Ok(number_value(total))
}

/// Whole numbers as integers, so `parse_duration("6h")` is `21600`, not `21600.0`.
fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

fn selector_matches(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let labels = string_map(&args[1], "the labels")?;
    crate::selector::matches_label_selector(&args[0], &labels)
        .map(Value::Bool)
        .map_err(|e| HelperError(e.to_string()))
}

fn string_map(value: &Value, what: &str) -> Result<BTreeMap<String, String>, HelperError> {
    match value {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(map) => map
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(HelperError(format!(
                    "{what}: value of {k:?} must be a string, got {}",
                    type_name(other)
                ))),
            })
            .collect(),
        other => Err(HelperError(format!(
            "{what} must be a map, got {}",
            type_name(other)
        ))),
    }
}

/// JSON merge patch (RFC 7386): maps merge recursively, anything else in `b` replaces `a`,
/// and a null in `b` deletes the key.
fn deep_merge(_: &HelperEnv, args: &[Value]) -> HelperResult {
    let mut merged = args[0].clone();
    merge_into(&mut merged, &args[1]);
    Ok(merged)
}

pub(crate) fn merge_into(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        unreachable!("made an object above")
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge_into(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The access a read needs, or the error saying there is none here.
fn reads(env: &HelperEnv) -> Result<&crate::reads::ReadAccess, HelperError> {
    env.scope.reads.as_ref().ok_or_else(|| {
        HelperError(
            "reads are not available in this call (give a test case a `cluster:` list to \
             read from)"
                .into(),
        )
    })
}

fn get(env: &HelperEnv, args: &[Value]) -> HelperResult {
    let (room, limit) = room();
    let found = reads(env)?
        .get(args, room)
        .map_err(|e| read_error(e, limit))?;
    env.scope.secrets.note(&found);
    Ok(found)
}

fn list(env: &HelperEnv, args: &[Value]) -> HelperResult {
    let (room, limit) = room();
    let found = reads(env)?
        .list(args, room)
        .map_err(|e| read_error(e, limit))?;
    env.scope.secrets.note(&found);
    Ok(found)
}

/// What the call may still allocate for a read's result, and the limit it goes over if more.
fn room() -> (usize, LimitKind) {
    memory::room().map_or((usize::MAX, LimitKind::Memory), |(room, exceeded)| {
        (room, memory_limit(exceeded))
    })
}

fn read_error(error: ReadError, limit: LimitKind) -> HelperError {
    if let ReadError::TooLarge { .. } = error {
        // Stopped as a script that allocated it would be: the call fails with the memory limit,
        // even if the script catches this error.
        let stopped = with_active(|_, budget| budget.describe(budget.trip(limit)));
        if let Some(stopped) = stopped {
            return HelperError(format!("{error}: {stopped}"));
        }
    }
    HelperError(error.to_string())
}

fn event(env: &HelperEnv, args: &[Value]) -> HelperResult {
    let type_ = string_arg(args, 0, "the type")?;
    // Scrubbed like a log line: whoever may read the object's Events may not read the
    // Secret. A reason that was a secret is no CamelCase word any more, and is refused.
    let secrets = &env.scope.secrets;
    let reason = secrets.scrub(string_arg(args, 1, "the reason")?);
    // Like `log`, any value makes a message, so `event(..., obj.status)` just works.
    let message = match &args[2] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let message = secrets.scrub(&message);
    let event = crate::api::ScriptEvent::new(type_, &reason, &message)
        .map_err(|e| HelperError(e.to_string()))?;
    env.scope.events.push(event, &env.controller);
    Ok(Value::Null)
}

/// `get_path(obj, "spec.template.metadata")` or with a list of segments for keys holding dots
/// (`["metadata", "labels", "app.kubernetes.io/name"]`); numeric segments index lists.
fn get_path_place(args: &[Value]) -> Result<Vec<String>, HelperError> {
    match &args[0] {
        Value::String(path) if path.is_empty() => Ok(Vec::new()),
        Value::String(path) => Ok(path.split('.').map(str::to_string).collect()),
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                other => Err(HelperError(format!(
                    "path segments must be strings or numbers, got {}",
                    type_name(other)
                ))),
            })
            .collect(),
        other => Err(HelperError(format!(
            "the path must be a string or a list, got {}",
            type_name(other)
        ))),
    }
}

/// The value, or the default (null when not given) when it is missing or null.
fn get_path_result(found: Option<Value>, args: &[Value]) -> Value {
    match found {
        Some(value) if !value.is_null() => value,
        _ => args.get(1).cloned().unwrap_or(Value::Null),
    }
}

fn metadata(field: &str) -> Vec<String> {
    vec!["metadata".to_string(), field.to_string()]
}

fn name_place(_: &[Value]) -> Result<Vec<String>, HelperError> {
    Ok(metadata("name"))
}

fn namespace_place(_: &[Value]) -> Result<Vec<String>, HelperError> {
    Ok(metadata("namespace"))
}

fn labels_place(_: &[Value]) -> Result<Vec<String>, HelperError> {
    Ok(metadata("labels"))
}

fn annotations_place(_: &[Value]) -> Result<Vec<String>, HelperError> {
    Ok(metadata("annotations"))
}

fn label_place(args: &[Value]) -> Result<Vec<String>, HelperError> {
    let mut path = metadata("labels");
    path.push(string_arg(args, 0, "the key")?.to_string());
    Ok(path)
}

fn annotation_place(args: &[Value]) -> Result<Vec<String>, HelperError> {
    let mut path = metadata("annotations");
    path.push(string_arg(args, 0, "the key")?.to_string());
    Ok(path)
}

/// Empty string rather than null, so `name(obj) .. "-0"` works on any object.
fn string_or_empty(found: Option<Value>, _: &[Value]) -> Value {
    match found {
        Some(Value::String(s)) => Value::String(s),
        _ => Value::String(String::new()),
    }
}

/// An empty map rather than null, so `labels(obj)` can always be indexed.
fn map_or_empty(found: Option<Value>, _: &[Value]) -> Value {
    match found {
        Some(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

fn value_or_null(found: Option<Value>, _: &[Value]) -> Value {
    found.unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Language;
    use serde_json::json;

    fn env() -> HelperEnv {
        HelperEnv {
            controller: "c".into(),
            hook: crate::kinds::decorator::SYNC,
            language: Language::Rhai,
            now: "2024-05-01T12:00:00.750Z".parse().unwrap(),
            scope: crate::script::CallScope {
                logs: Some(super::super::LogSink::new()),
                ..Default::default()
            },
        }
    }

    fn call(name: &str, args: &[Value]) -> HelperResult {
        HELPERS
            .iter()
            .find(|h| h.name == name)
            .unwrap_or_else(|| panic!("no helper {name}"))
            .call(&env(), args)
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = HELPERS.iter().map(|h| h.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), HELPERS.len());
    }

    #[test]
    fn arity_is_checked_with_the_helper_name() {
        let err = call("sha256", &[]).unwrap_err();
        assert_eq!(err.0, "sha256: expected 1 argument(s), got 0");
    }

    #[test]
    fn now_truncates_to_seconds() {
        assert_eq!(call("now", &[]).unwrap(), json!("2024-05-01T12:00:00Z"));
    }

    #[test]
    fn only_the_clock_makes_a_call_impure() {
        let purity = crate::script::Purity::new();
        let mut env = env();
        env.scope.purity = purity.clone();
        let run = |name: &str, args: &[Value]| {
            let helper = HELPERS.iter().find(|h| h.name == name).unwrap();
            helper.call(&env, args).unwrap();
        };
        run("sha256", &[json!("x")]);
        run("parse_time", &[json!("2024-05-01T12:00:00Z")]);
        run("get_path", &[json!({"a": 1}), json!("a")]);
        assert!(purity.is_pure());
        run("now", &[]);
        assert_eq!(purity.impurity(), Some("now()"));
    }

    #[test]
    fn times_round_trip() {
        let seconds = call("parse_time", &[json!("2024-05-01T12:00:00Z")]).unwrap();
        assert_eq!(seconds, json!(1714564800));
        assert_eq!(
            call("to_rfc3339", &[seconds]).unwrap(),
            json!("2024-05-01T12:00:00Z")
        );
        assert!(call("parse_time", &[json!("yesterday")]).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(
            call("parse_duration", &[json!("6h")]).unwrap(),
            json!(21600)
        );
        assert_eq!(
            call("parse_duration", &[json!("1h30m")]).unwrap(),
            json!(5400)
        );
        assert_eq!(
            call("parse_duration", &[json!("7d")]).unwrap(),
            json!(604800)
        );
        assert_eq!(
            call("parse_duration", &[json!("500ms")]).unwrap(),
            json!(0.5)
        );
        assert_eq!(
            call("parse_duration", &[json!("-90s")]).unwrap(),
            json!(-90)
        );
        assert_eq!(call("parse_duration", &[json!("300")]).unwrap(), json!(300));
        assert!(call("parse_duration", &[json!("6 hours")]).is_err());
        assert!(call("parse_duration", &[json!("h")]).is_err());
    }

    #[test]
    fn merge_patch_semantics() {
        let merged = call(
            "deep_merge",
            &[
                json!({"a": {"x": 1, "y": 2}, "keep": true, "list": [1, 2]}),
                json!({"a": {"y": 3, "z": 4}, "list": [3], "keep": null}),
            ],
        )
        .unwrap();
        assert_eq!(merged, json!({"a": {"x": 1, "y": 3, "z": 4}, "list": [3]}));
    }

    #[test]
    fn readers_are_nil_safe() {
        let obj = json!({"metadata": {"name": "web", "labels": {"app": "web"}}});
        assert_eq!(
            call("name", std::slice::from_ref(&obj)).unwrap(),
            json!("web")
        );
        assert_eq!(
            call("namespace", std::slice::from_ref(&obj)).unwrap(),
            json!("")
        );
        assert_eq!(
            call("labels", std::slice::from_ref(&obj)).unwrap(),
            json!({"app": "web"})
        );
        assert_eq!(
            call("annotations", std::slice::from_ref(&obj)).unwrap(),
            json!({})
        );
        assert_eq!(
            call("label", &[obj.clone(), json!("app")]).unwrap(),
            json!("web")
        );
        assert_eq!(call("label", &[obj, json!("nope")]).unwrap(), Value::Null);
        assert_eq!(call("labels", &[Value::Null]).unwrap(), json!({}));
        assert_eq!(call("name", &[json!(3)]).unwrap(), json!(""));
    }

    #[test]
    fn get_path_walks_maps_and_lists() {
        let obj =
            json!({"spec": {"ports": [{"port": 80}]}, "metadata": {"labels": {"a.b/c": "x"}}});
        assert_eq!(
            call("get_path", &[obj.clone(), json!("spec.ports.0.port")]).unwrap(),
            json!(80)
        );
        assert_eq!(
            call(
                "get_path",
                &[obj.clone(), json!(["metadata", "labels", "a.b/c"])]
            )
            .unwrap(),
            json!("x")
        );
        assert_eq!(
            call("get_path", &[obj, json!("spec.missing"), json!(5)]).unwrap(),
            json!(5)
        );
    }

    #[test]
    fn codecs_round_trip() {
        let value = json!({"a": [1, 2.5, null, "ü"], "b": {}});
        let text = call("json_encode", std::slice::from_ref(&value)).unwrap();
        assert_eq!(call("json_decode", &[text]).unwrap(), value);
        let yaml = call("yaml_encode", std::slice::from_ref(&value)).unwrap();
        assert_eq!(call("yaml_decode", &[yaml]).unwrap(), value);
        let b64 = call("base64_encode", &[json!("hello")]).unwrap();
        assert_eq!(b64, json!("aGVsbG8="));
        assert_eq!(call("base64_decode", &[b64]).unwrap(), json!("hello"));
        assert!(call("base64_decode", &[json!("!!")]).is_err());
        assert_eq!(
            call("sha256", &[json!("abc")]).unwrap(),
            json!("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
    }

    #[test]
    fn selector_matching_uses_kubernetes_semantics() {
        let selector = json!({"matchLabels": {"app": "web"}, "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["db"]}]});
        assert_eq!(
            call(
                "selector_matches",
                &[selector.clone(), json!({"app": "web"})]
            )
            .unwrap(),
            json!(true)
        );
        assert_eq!(
            call(
                "selector_matches",
                &[selector.clone(), json!({"app": "web", "tier": "db"})]
            )
            .unwrap(),
            json!(false)
        );
        assert!(call("selector_matches", &[selector, json!({"app": 1})]).is_err());
    }

    #[test]
    fn log_collects_level_message_and_fields() {
        let env = env();
        let log = HELPERS.iter().find(|h| h.name == "log").unwrap();
        log.call(&env, &[json!("warn"), json!("hi"), json!({"n": 1})])
            .unwrap();
        let lines = env.scope.logs.as_ref().unwrap().lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].level, LogLevel::Warn);
        assert_eq!(lines[0].message, "hi");
        assert_eq!(lines[0].fields["n"], json!(1));
        assert!(log.call(&env, &[json!("loud"), json!("hi")]).is_err());
    }
}
