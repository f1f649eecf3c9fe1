//! Label and annotation selectors: matching a `metav1.LabelSelector`-shaped value against a map.
//!
//! Both the controllers (resource rules, parent selectors) and the scripts' `selector_matches`
//! helper use this one implementation.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A set-based requirement, as in `metav1.LabelSelectorRequirement`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// The label (or annotation) key the requirement is about.
    pub key: String,
    /// `In`, `NotIn` (with `values`), `Exists` or `DoesNotExist` (without).
    pub operator: Operator,
    /// The values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

#[derive(
    Clone, Copy, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq,
)]
pub enum Operator {
    #[default]
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A selector over string maps: the shared shape of label and annotation selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub match_exact: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("selector is not an object with matchLabels/matchExpressions: {0}")]
    Shape(String),
    #[error("selector requirement on key {key:?}: operator {operator:?} {problem}")]
    Requirement {
        key: String,
        operator: Operator,
        problem: &'static str,
    },
}

impl Selector {
    /// Checks the requirements are well formed (In/NotIn need values, Exists/DoesNotExist none),
    /// so a malformed selector is an error rather than silently matching nothing or everything.
    pub fn validate(&self) -> Result<(), SelectorError> {
        for requirement in &self.expressions {
            let problem = match requirement.operator {
                Operator::In | Operator::NotIn if requirement.values.is_empty() => {
                    "needs at least one value"
                }
                Operator::Exists | Operator::DoesNotExist if !requirement.values.is_empty() => {
                    "takes no values"
                }
                _ => continue,
            };
            return Err(SelectorError::Requirement {
                key: requirement.key.clone(),
                operator: requirement.operator,
                problem,
            });
        }
        Ok(())
    }

    /// True when every exact pair and every requirement holds. An empty selector matches all.
    pub fn matches(&self, map: &BTreeMap<String, String>) -> bool {
        self.match_exact
            .iter()
            .all(|(key, value)| map.get(key) == Some(value))
            && self.expressions.iter().all(|requirement| {
                let actual = map.get(&requirement.key);
                match requirement.operator {
                    Operator::In => actual.is_some_and(|v| requirement.values.contains(v)),
                    Operator::NotIn => actual.is_none_or(|v| !requirement.values.contains(v)),
                    Operator::Exists => actual.is_some(),
                    Operator::DoesNotExist => actual.is_none(),
                }
            })
    }

    pub fn is_empty(&self) -> bool {
        self.match_exact.is_empty() && self.expressions.is_empty()
    }
}

/// `metav1.LabelSelector`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels an object must have, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on labels; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// Metacontroller's annotation selector: a label selector over annotations.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations an object must have, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_annotations: BTreeMap<String, String>,
    /// Requirements on annotations; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

impl From<&LabelSelector> for Selector {
    fn from(selector: &LabelSelector) -> Self {
        Selector {
            match_exact: selector.match_labels.clone(),
            expressions: selector.match_expressions.clone(),
        }
    }
}

impl From<&AnnotationSelector> for Selector {
    fn from(selector: &AnnotationSelector) -> Self {
        Selector {
            match_exact: selector.match_annotations.clone(),
            expressions: selector.match_expressions.clone(),
        }
    }
}

impl LabelSelector {
    /// Reads a label selector from JSON (as found in a parent's `spec.selector` or a script).
    /// `null` is the empty selector.
    pub fn from_json(value: &serde_json::Value) -> Result<LabelSelector, SelectorError> {
        if value.is_null() {
            return Ok(LabelSelector::default());
        }
        let selector: LabelSelector = serde_json::from_value(value.clone())
            .map_err(|error| SelectorError::Shape(error.to_string()))?;
        Selector::from(&selector).validate()?;
        Ok(selector)
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        Selector::from(self).matches(labels)
    }
}

impl AnnotationSelector {
    pub fn matches(&self, annotations: &BTreeMap<String, String>) -> bool {
        Selector::from(self).matches(annotations)
    }
}

/// Matches a JSON label selector against labels; the entry point of the scripts' helper.
pub fn matches_label_selector(
    selector: &serde_json::Value,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    Ok(LabelSelector::from_json(selector)?.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(matches_label_selector(&json!({}), &labels(&[])).unwrap());
        assert!(matches_label_selector(&json!(null), &labels(&[("a", "b")])).unwrap());
    }

    #[test]
    fn match_labels_requires_every_pair() {
        let selector = json!({"matchLabels": {"app": "web", "tier": "front"}});
        assert!(
            matches_label_selector(&selector, &labels(&[("app", "web"), ("tier", "front")]))
                .unwrap()
        );
        assert!(!matches_label_selector(&selector, &labels(&[("app", "web")])).unwrap());
        assert!(
            !matches_label_selector(&selector, &labels(&[("app", "web"), ("tier", "back")]))
                .unwrap()
        );
    }

    #[test]
    fn each_operator_behaves_like_kubernetes() {
        let cases = [
            (
                json!({"key": "env", "operator": "In", "values": ["a", "b"]}),
                &[("env", "a")][..],
                true,
            ),
            (
                json!({"key": "env", "operator": "In", "values": ["a"]}),
                &[("env", "c")][..],
                false,
            ),
            (
                json!({"key": "env", "operator": "In", "values": ["a"]}),
                &[][..],
                false,
            ),
            (
                json!({"key": "env", "operator": "NotIn", "values": ["a"]}),
                &[("env", "c")][..],
                true,
            ),
            (
                json!({"key": "env", "operator": "NotIn", "values": ["a"]}),
                &[][..],
                true,
            ),
            (
                json!({"key": "env", "operator": "NotIn", "values": ["a"]}),
                &[("env", "a")][..],
                false,
            ),
            (
                json!({"key": "env", "operator": "Exists"}),
                &[("env", "")][..],
                true,
            ),
            (json!({"key": "env", "operator": "Exists"}), &[][..], false),
            (
                json!({"key": "env", "operator": "DoesNotExist"}),
                &[][..],
                true,
            ),
            (
                json!({"key": "env", "operator": "DoesNotExist"}),
                &[("env", "x")][..],
                false,
            ),
        ];
        for (requirement, pairs, expected) in cases {
            let selector = json!({"matchExpressions": [requirement.clone()]});
            assert_eq!(
                matches_label_selector(&selector, &labels(pairs)).unwrap(),
                expected,
                "{requirement} against {pairs:?}"
            );
        }
    }

    #[test]
    fn malformed_selectors_are_errors() {
        let no_values = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        assert_eq!(
            matches_label_selector(&no_values, &labels(&[]))
                .unwrap_err()
                .to_string(),
            r#"selector requirement on key "a": operator In needs at least one value"#
        );
        let bad_operator = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert!(matches!(
            matches_label_selector(&bad_operator, &labels(&[])),
            Err(SelectorError::Shape(_))
        ));
        assert!(matches!(
            matches_label_selector(&json!("app=web"), &labels(&[])),
            Err(SelectorError::Shape(_))
        ));
    }

    #[test]
    fn annotation_selector_uses_match_annotations() {
        let selector: AnnotationSelector = serde_json::from_value(json!({
            "matchAnnotations": {"team": "a"},
            "matchExpressions": [{"key": "service-per-pod-ports", "operator": "Exists"}]
        }))
        .unwrap();
        assert!(selector.matches(&labels(&[("team", "a"), ("service-per-pod-ports", "80")])));
        assert!(!selector.matches(&labels(&[("team", "a")])));
    }
}
