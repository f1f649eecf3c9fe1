//! Fuzz targets over selectors: every one an author writes (a rule's `labelSelector`, a
//! parent's `spec.selector`, a script's `list` and `selector_matches`) is parsed and matched
//! by the operator. Any text or JSON parses or says why, never panics, and what parses
//! matches any labels without panicking.

use super::*;
use proptest::prelude::*;
use serde_json::{Map, json};

/// Text made of the pieces kubectl selectors are made of, and anything else.
fn selector_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        Just("=".to_string()),
        Just("==".to_string()),
        Just("!=".to_string()),
        Just("!".to_string()),
        Just(",".to_string()),
        Just(" in ".to_string()),
        Just(" notin ".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("example.com/".to_string()),
        Just("metadata.name".to_string()),
        Just("metadata.namespace".to_string()),
        ".{0,4}",
    ];
    prop::collection::vec(piece, 0..16).prop_map(|pieces| pieces.concat())
}

fn label_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        "[a-z]{0,3}".prop_map(Value::String),
        Just(json!(["a"])),
        Just(json!({})),
    ]
}

/// A `LabelSelector` object of any shape: its fields of the right type or not.
fn selector_json() -> impl Strategy<Value = Value> {
    let expression = (
        prop_oneof![
            Just(json!("a")),
            Just(json!("")),
            Just(json!(1)),
            "[a-z/.]{0,5}".prop_map(Value::String)
        ],
        prop_oneof![
            Just(json!("In")),
            Just(json!("NotIn")),
            Just(json!("Exists")),
            Just(json!("DoesNotExist")),
            Just(json!("Gt")),
            Just(json!(null)),
        ],
        prop_oneof![
            prop::collection::vec(label_value(), 0..4).prop_map(Value::Array),
            label_value(),
        ],
    )
        .prop_map(
            |(key, operator, values)| json!({"key": key, "operator": operator, "values": values}),
        );
    (
        prop::collection::btree_map("[a-z/.]{0,4}", label_value(), 0..4),
        prop_oneof![
            prop::collection::vec(expression, 0..4).prop_map(Value::Array),
            label_value(),
        ],
    )
        .prop_map(|(labels, expressions)| {
            json!({
                "matchLabels": Value::Object(labels.into_iter().collect::<Map<_, _>>()),
                "matchExpressions": expressions
            })
        })
}

proptest! {
    #![proptest_config(crate::fuzzing::config(256))]

    #[test]
    fn fuzz_label_selector_text_parses_or_says_why(text in selector_text()) {
        if let Ok(selector) = parse_label_selector(&text) {
            let labels: std::collections::BTreeMap<String, String> =
                [("a".to_string(), "b".to_string())].into();
            let _ = selector.matches(&labels);
        }
    }

    #[test]
    fn fuzz_field_selector_text_parses_or_says_why(text in selector_text()) {
        if let Ok(requirements) = parse_field_selector(&text) {
            let object = json!({"metadata": {"name": "a", "namespace": "b"}});
            for requirement in requirements {
                let _ = requirement.holds(&object);
            }
        }
    }

    #[test]
    fn fuzz_label_selector_objects_parse_or_say_why(value in selector_json()) {
        if let Ok(selector) = LabelSelector::from_json(&value) {
            let object = json!({"metadata": {"labels": {"a": "b", "c": ""}}});
            let _ = selector.matches_labels_of(&object);
        }
    }
}
