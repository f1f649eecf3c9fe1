//! The JSON Schema of `metascript crds --json-schema` (docs/editors.md), applied as an editor
//! applies it: every shipped controller manifest passes (they are accepted by the API server in
//! other tests, so a failure here is the schema being stricter than the API), and the mistakes
//! it exists to catch are caught.
//!
//! The validator below covers the keywords the generated schema uses (a test fails on any other)
//! with draft-07's meaning, so no JSON Schema library is built for one test.
//! (`pattern` is ECMA-262 in JSON Schema; the CRDs' patterns mean the same in `regex`.)

use crate::support::cli::{metascript, root, stdout_of};
use serde_json::{Value, json};

/// The draft-07 keywords the generated schema may use, all of which `validate` implements or
/// which carry no constraint.
const KNOWN: &[&str] = &[
    "$schema",
    "title",
    "description",
    "type",
    "properties",
    "additionalProperties",
    "required",
    "items",
    "enum",
    "const",
    "allOf",
    "if",
    "then",
    "$ref",
    "definitions",
    "pattern",
    "format",
    "default",
    "minimum",
    "maximum",
    "maxItems",
    "minItems",
    "minLength",
    "maxLength",
];

/// The errors of `instance` against `schema` (within `root` for `$ref`), as `path: problem`.
fn validate(root: &Value, schema: &Value, instance: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let pointer = reference.strip_prefix('#').expect("a local $ref");
        let target = root
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{reference}"));
        validate(root, target, instance, path, errors);
    }
    if let Some(kind) = schema.get("type") {
        let kinds: Vec<&str> = match kind {
            Value::String(k) => vec![k.as_str()],
            Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let matches = |k: &str| match k {
            "object" => instance.is_object(),
            "array" => instance.is_array(),
            "string" => instance.is_string(),
            "boolean" => instance.is_boolean(),
            "null" => instance.is_null(),
            "number" => instance.is_number(),
            "integer" => {
                instance.is_i64()
                    || instance.is_u64()
                    || instance.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            other => panic!("type {other}"),
        };
        if !kinds.iter().any(|k| matches(k)) {
            errors.push(format!("{path}: not {kinds:?}: {instance}"));
            return;
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(instance)
    {
        errors.push(format!("{path}: {instance} is not one of {values:?}"));
    }
    if let Some(constant) = schema.get("const")
        && constant != instance
    {
        errors.push(format!("{path}: {instance} is not {constant}"));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
        && let Some(text) = instance.as_str()
        && !regex::Regex::new(pattern)
            .unwrap_or_else(|e| panic!("pattern {pattern}: {e}"))
            .is_match(text)
    {
        errors.push(format!("{path}: {text:?} does not match {pattern}"));
    }
    if let Some(object) = instance.as_object() {
        for required in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let required = required.as_str().unwrap();
            if !object.contains_key(required) {
                errors.push(format!("{path}: {required} is required"));
            }
        }
        let properties = schema.get("properties").and_then(Value::as_object);
        for (key, value) in object {
            let here = format!("{path}.{key}");
            match (
                properties.and_then(|p| p.get(key)),
                schema.get("additionalProperties"),
            ) {
                (Some(property), _) => validate(root, property, value, &here, errors),
                (None, Some(Value::Bool(false))) => {
                    errors.push(format!("{here}: not a field of this object"))
                }
                (None, Some(additional)) => validate(root, additional, value, &here, errors),
                (None, None) => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), instance.as_array()) {
        for (i, item) in array.iter().enumerate() {
            validate(root, items, item, &format!("{path}[{i}]"), errors);
        }
    }
    for rule in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match rule.get("if") {
            Some(condition) => {
                let mut failed = Vec::new();
                validate(root, condition, instance, path, &mut failed);
                if failed.is_empty()
                    && let Some(then) = rule.get("then")
                {
                    validate(root, then, instance, path, errors);
                }
            }
            None => validate(root, rule, instance, path, errors),
        }
    }
}

fn errors_of(schema: &Value, instance: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate(schema, schema, instance, "", &mut errors);
    errors
}

/// The schema as the command prints it (the committed copy is checked against the same function
/// by a unit test).
fn schema() -> Value {
    let output = metascript(["crds", "--json-schema"]);
    serde_json::from_str(&stdout_of(&output, "metascript crds --json-schema")).expect("JSON")
}

#[test]
fn the_schema_uses_only_keywords_this_validator_knows() {
    fn walk(node: &Value, path: &str, unknown: &mut Vec<String>, in_properties: bool) {
        if let Some(map) = node.as_object() {
            for (key, value) in map {
                // Under `properties` and `definitions`, keys are names, not keywords.
                if !in_properties && !KNOWN.contains(&key.as_str()) {
                    unknown.push(format!("{path}/{key}"));
                }
                // Values, not schemas.
                if !in_properties && ["default", "enum", "const"].contains(&key.as_str()) {
                    continue;
                }
                let names = !in_properties && (key == "properties" || key == "definitions");
                walk(value, &format!("{path}/{key}"), unknown, names);
            }
        } else if let Some(items) = node.as_array() {
            for item in items {
                walk(item, path, unknown, false);
            }
        }
    }
    let mut unknown = Vec::new();
    walk(&schema(), "", &mut unknown, false);
    assert!(unknown.is_empty(), "teach validate(): {unknown:?}");
}

/// Every controller the repository ships passes, whatever its kind.
#[test]
fn every_shipped_controller_passes() {
    let schema = schema();
    let mut checked = 0;
    for example in std::fs::read_dir(root().join("scripts")).unwrap() {
        let dir = example.unwrap().path();
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".yaml") || name.ends_with(".test.yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let documents: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
            for document in documents.iter().filter(|d| !d.is_null()) {
                let errors = errors_of(&schema, document);
                assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
                if document["apiVersion"] == "metascript.dev/v1alpha1" {
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 10, "found {checked} controllers in scripts/");
}

/// What an editor should point at: misspelt and misplaced fields, wrong types and values,
/// missing required fields, unknown kinds of the group. Other kinds pass untouched.
#[test]
fn mistakes_are_caught_and_other_kinds_left_alone() {
    let schema = schema();
    let controller = json!({
        "apiVersion": "metascript.dev/v1alpha1",
        "kind": "DecoratorController",
        "metadata": {"name": "x", "labels": {"team": "a"}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps"}],
            "attachments": [{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{}"}}},
        },
    });
    assert_eq!(errors_of(&schema, &controller), Vec::<String>::new());

    let broken = |pointer: &str, value: Value| {
        let mut copy = controller.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        copy.pointer_mut(parent).unwrap()[key] = value;
        errors_of(&schema, &copy)
    };
    for (pointer, value, expected) in [
        ("/spec/resourcez", json!([]), ".spec.resourcez: not a field"),
        (
            "/spec/hooks/sync/script/lang",
            json!("rhai"),
            ".lang: not a field",
        ),
        (
            "/spec/hooks/sync/script/language",
            json!("python"),
            "is not one of",
        ),
        (
            "/spec/attachments/0/updateStrategy/method",
            json!("Sometimes"),
            "is not one of",
        ),
        (
            "/spec/resources",
            json!("configmaps"),
            ".spec.resources: not",
        ),
        (
            "/metadata/labels/team",
            json!(1),
            ".metadata.labels.team: not",
        ),
    ] {
        let errors = broken(pointer, value);
        assert!(
            errors.iter().any(|e| e.contains(expected)),
            "{pointer}: expected {expected:?} in {errors:?}"
        );
    }
    let mut nameless = controller.clone();
    nameless["metadata"].as_object_mut().unwrap().remove("name");
    assert!(
        errors_of(&schema, &nameless)
            .iter()
            .any(|e| e.contains("name is required"))
    );
    let mut unknown_kind = controller.clone();
    unknown_kind["kind"] = json!("DecoratorControler");
    assert!(
        errors_of(&schema, &unknown_kind)
            .iter()
            .any(|e| e.contains(".kind")),
        "a misspelt kind of the group"
    );

    // Not ours: a ConfigMap beside the controller, and Metacontroller's own kind of that name.
    for other in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hooks"}, "data": {"sync.rhai": "#{}"}}),
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController", "metadata": {"name": "x"}, "spec": {"hooks": {"sync": {"webhook": {"url": "http://x"}}}}}),
    ] {
        assert_eq!(errors_of(&schema, &other), Vec::<String>::new(), "{other}");
    }
}
