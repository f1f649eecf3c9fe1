//! Fuzz targets (proptest) over what anyone who may create a controller hands the operator:
//! a controller object of any shape goes through `validate` (what the admission webhook and
//! the load path run) and YAML of any shape through the manifest parser (`render`, `test`, the
//! language server). Neither may panic. `PROPTEST_CASES` runs them longer (`hack/test.sh`).

use crate::resources::StaticResolver;
use crate::script::{EffectiveLimits, ScriptEngine};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Field names of the three kinds' specs, so generated objects reach past the first
/// "unknown field" into the checks behind it.
const FIELDS: &[&str] = &[
    "resources",
    "attachments",
    "hooks",
    "sync",
    "finalize",
    "customize",
    "map",
    "tombstone",
    "script",
    "webhook",
    "inline",
    "language",
    "configMapRef",
    "name",
    "key",
    "limits",
    "timeoutMillis",
    "maxOperations",
    "maxMemoryBytes",
    "maxStringSize",
    "tests",
    "request",
    "expect",
    "object",
    "labelSelector",
    "matchLabels",
    "matchExpressions",
    "operator",
    "values",
    "apiVersion",
    "resource",
    "resyncPeriodSeconds",
    "serviceAccountName",
    "serviceAccountNamespace",
    "reads",
    "libraries",
    "rollout",
    "strategy",
    "steps",
    "percent",
    "parentResource",
    "inputResources",
    "outputResources",
    "childResources",
    "updateStrategy",
    "method",
    "url",
    "timeout",
    "version",
    "compatibility",
    "selector",
    "generateSelector",
    "endpointConfigs",
    "etag",
    "enabled",
    "cacheTimeoutSeconds",
    "relatedResources",
];

/// Small budgets, so a generated test case that loops costs little.
const CEILING: EffectiveLimits = EffectiveLimits {
    max_operations: 100_000,
    timeout_millis: 100,
    max_memory_bytes: 16 * 1024 * 1024,
    max_string_size: 1024 * 1024,
    max_array_size: 10_000,
    max_map_size: 10_000,
};

/// The kinds a fuzzed controller may be.
const KINDS: &[&str] = &[
    "DecoratorController",
    "MapController",
    "CompositeController",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![Just(1e300), Just(-1.0), Just(0.5), Just(f64::MAX)].prop_map(|f| json!(f)),
        prop_oneof![
            Just("rhai".to_string()),
            Just("lua".to_string()),
            Just("v1".to_string()),
            Just("configmaps".to_string()),
            Just("In".to_string()),
            Just("#{}".to_string()),
            Just("return {}".to_string()),
            Just("Canary".to_string()),
            ".{0,12}",
        ]
        .prop_map(Value::String),
    ]
}

fn shaped() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(FIELDS), inner), 0..6).prop_map(|fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(key, value)| (key.to_string(), value))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// Real controllers of every kind, from `scripts/`, and one with inline scripts and tests (so
/// the compiler and the test runner are reached too).
fn examples() -> Vec<Value> {
    let texts = [
        include_str!("../../scripts/bluegreen/controller.rhai.yaml"),
        include_str!("../../scripts/catset/controller.lua.yaml"),
        include_str!("../../scripts/configmap-propagation/controller.rhai.yaml"),
        include_str!("../../scripts/snapshot-schedule/controller.lua.yaml"),
        include_str!("../../scripts/namespace-team/controller.rhai.yaml"),
    ];
    let mut examples: Vec<Value> = texts
        .iter()
        .flat_map(|text| crate::yaml::parse_documents(text).expect("an example parses"))
        .filter(|object| KINDS.contains(&crate::object::kind(object)))
        .collect();
    examples.push(json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "inline"},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}}],
            "hooks": {"sync": {"script": {"language": "rhai", "inline": "#{ labels: #{ a: \"b\" } }",
                                          "limits": {"timeoutMillis": 50}}}},
            "tests": [{"name": "labels", "request": {"object": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "a", "namespace": "n"}}}, "expect": {"labels": {"a": "b"}}}]
        }
    }));
    examples
}

/// Replaces (or, for `None`, removes) the node a path of indices leads to: at each object or
/// array the index picks a member, wrapping around; a path longer than the value stops at a leaf.
fn mutate(value: &mut Value, path: &[usize], replacement: Option<Value>) {
    let Some((&index, rest)) = path.split_first() else {
        if let Some(replacement) = replacement {
            *value = replacement;
        }
        return;
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            let key = map
                .keys()
                .nth(index % map.len())
                .cloned()
                .expect("in range");
            if rest.is_empty() && replacement.is_none() {
                map.remove(&key);
            } else {
                mutate(map.get_mut(&key).expect("just found"), rest, replacement);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let at = index % items.len();
            if rest.is_empty() && replacement.is_none() {
                items.remove(at);
            } else {
                mutate(&mut items[at], rest, replacement);
            }
        }
        _ => {
            if let Some(replacement) = replacement {
                *value = replacement;
            }
        }
    }
}

fn controller() -> impl Strategy<Value = Value> {
    let examples = examples();
    let mutation = (
        prop::collection::vec(any::<usize>(), 1..8),
        prop::option::weighted(0.8, shaped()),
    );
    (
        prop::sample::select(examples),
        prop::collection::vec(mutation, 1..5),
    )
        .prop_map(|(mut object, mutations)| {
            for (path, replacement) in mutations {
                mutate(&mut object, &path, replacement);
            }
            object
        })
}

proptest! {
    #![proptest_config(crate::fuzzing::config(64))]

    #[test]
    fn fuzz_validate_never_panics_on_a_controller_of_any_shape(object in controller()) {
        let engine = ScriptEngine::new().with_ceiling(CEILING);
        let _ = crate::validate::validate(
            &engine,
            &StaticResolver::with_builtins(),
            &(std::sync::Arc::new(crate::schema::Schemas::with_builtins()) as _),
            &Vec::<Value>::new(),
            &object,
        );
    }

    #[test]
    fn fuzz_manifests_of_any_text_parse_or_say_why(text in "(.|\n){0,200}") {
        let _ = crate::yaml::parse_documents(&text);
    }

    #[test]
    fn fuzz_manifests_printed_from_any_value_read_back(object in controller()) {
        let printed = serde_saphyr::to_string(&object).expect("a JSON value prints as YAML");
        let read = crate::yaml::parse_documents(&printed).expect("printed YAML reads back");
        prop_assert_eq!(read, vec![object]);
    }
}

/// Aliases that double at each level: a billion laughs once expanded. The parser must refuse
/// (or bound) it, not build it.
#[test]
fn fuzz_regression_yaml_alias_bombs_are_refused_without_expanding() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..10 {
        let previous = level - 1;
        text.push_str(&format!(
            "a{level}: &a{level} [*a{previous}, *a{previous}, *a{previous}, *a{previous}, \
             *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}, *a{previous}]\n"
        ));
    }
    let started = std::time::Instant::now();
    let parsed = crate::yaml::parse_documents(&text);
    assert!(parsed.is_err(), "10^10 strings were built");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
