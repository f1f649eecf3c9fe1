//! Label and annotation selectors: matching a `metav1.LabelSelector`-shaped value against a map.
//!
//! Both the controllers (resource rules, parent selectors) and the scripts' `selector_matches`
//! helper use this one implementation; the scripts' `list` reads kubectl's selector syntax here.
//! Every selector is matched against every event of its type, so its size is capped
//! ([`MAX_REQUIREMENTS`], [`MAX_VALUES`], [`MAX_SELECTOR_BYTES`]) wherever one is read, and the
//! many selectors of a type are filed in an [`index::SelectorIndex`] so an event looks only at
//! those it may match.

pub(crate) mod index;

use crate::object;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

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
pub(crate) struct Selector {
    pub match_exact: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
}

/// Where a selector looks a key's value up: a map of strings, or an object's labels (or
/// annotations) read in place, so that matching the many objects of a cache allocates nothing.
pub(crate) trait Lookup {
    fn value(&self, key: &str) -> Option<&str>;
}

impl Lookup for BTreeMap<String, String> {
    fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// A JSON map of strings in place (`metadata.labels`); absent is empty, as is a non-string value.
impl Lookup for Option<&serde_json::Map<String, Value>> {
    fn value(&self, key: &str) -> Option<&str> {
        self.and_then(|map| map.get(key)?.as_str())
    }
}

fn matches_parts(
    exact: &BTreeMap<String, String>,
    expressions: &[Requirement],
    map: &impl Lookup,
) -> bool {
    exact
        .iter()
        .all(|(key, value)| map.value(key) == Some(value.as_str()))
        && expressions.iter().all(|requirement| {
            let actual = map.value(&requirement.key);
            let listed = |v: &str| requirement.values.iter().any(|value| value == v);
            match requirement.operator {
                Operator::In => actual.is_some_and(listed),
                Operator::NotIn => actual.is_none_or(|v| !listed(v)),
                Operator::Exists => actual.is_some(),
                Operator::DoesNotExist => actual.is_none(),
            }
        })
}

/// The most requirements one selector may have, `matchLabels` pairs and `matchExpressions`
/// together. Real selectors have a handful; this is far above them, and keeps the work one
/// event costs per selector small.
pub(crate) const MAX_REQUIREMENTS: usize = 64;

/// The most values one `In` or `NotIn` requirement may list.
pub(crate) const MAX_VALUES: usize = 256;

/// The most bytes of keys and values one selector may hold: a label key is at most 317 bytes
/// and a value 63, so this holds 64 long keys with a few values each, or one requirement with
/// 256 long values.
pub(crate) const MAX_SELECTOR_BYTES: usize = 32 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("selector is not an object with matchLabels/matchExpressions: {0}")]
    Shape(String),
    #[error("selector too large: {0}")]
    TooLarge(String),
    #[error("selector requirement on key {key:?}: operator {operator:?} {problem}")]
    Requirement {
        key: String,
        operator: Operator,
        problem: &'static str,
    },
}

/// Refuses a selector past [`MAX_REQUIREMENTS`], [`MAX_VALUES`] or [`MAX_SELECTOR_BYTES`],
/// naming the cap.
fn check_size(
    exact: &BTreeMap<String, String>,
    expressions: &[Requirement],
) -> Result<(), SelectorError> {
    let requirements = exact.len() + expressions.len();
    if requirements > MAX_REQUIREMENTS {
        return Err(SelectorError::TooLarge(format!(
            "{requirements} requirements (labels and expressions together), at most \
             {MAX_REQUIREMENTS}"
        )));
    }
    if let Some(requirement) = expressions.iter().find(|r| r.values.len() > MAX_VALUES) {
        return Err(SelectorError::TooLarge(format!(
            "the requirement on key {:?} lists {} values, at most {MAX_VALUES}",
            requirement.key,
            requirement.values.len()
        )));
    }
    let bytes: usize = exact.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + expressions
            .iter()
            .map(|r| r.key.len() + r.values.iter().map(String::len).sum::<usize>())
            .sum::<usize>();
    if bytes > MAX_SELECTOR_BYTES {
        return Err(SelectorError::TooLarge(format!(
            "{bytes} bytes of keys and values, at most {MAX_SELECTOR_BYTES}"
        )));
    }
    Ok(())
}

impl Selector {
    /// Checks the requirements are well formed (In/NotIn need values, Exists/DoesNotExist none),
    /// so a malformed selector is an error rather than silently matching nothing or everything.
    pub(crate) fn validate(&self) -> Result<(), SelectorError> {
        check_size(&self.match_exact, &self.expressions)?;
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
    pub(crate) fn matches(&self, map: &impl Lookup) -> bool {
        matches_parts(&self.match_exact, &self.expressions, map)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.match_exact.is_empty() && self.expressions.is_empty()
    }
}

/// `metav1.LabelSelector`. Read only within the size caps, so a controller spec or a hook's
/// answer with a larger one is refused where it is read (admission, load, the hook's call).
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels an object must have, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on labels; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// Metacontroller's annotation selector: a label selector over annotations, read within the
/// same caps.
#[derive(Clone, Debug, Default, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations an object must have, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_annotations: BTreeMap<String, String>,
    /// Requirements on annotations; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// A label selector as read, before the size caps are checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelParts {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<Requirement>,
}

/// An annotation selector as read, before the size caps are checked.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnnotationParts {
    #[serde(default)]
    match_annotations: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<Requirement>,
}

impl<'de> Deserialize<'de> for LabelSelector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = LabelParts::deserialize(deserializer)?;
        check_size(&parts.match_labels, &parts.match_expressions)
            .map_err(serde::de::Error::custom)?;
        Ok(LabelSelector {
            match_labels: parts.match_labels,
            match_expressions: parts.match_expressions,
        })
    }
}

impl<'de> Deserialize<'de> for AnnotationSelector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let parts = AnnotationParts::deserialize(deserializer)?;
        check_size(&parts.match_annotations, &parts.match_expressions)
            .map_err(serde::de::Error::custom)?;
        Ok(AnnotationSelector {
            match_annotations: parts.match_annotations,
            match_expressions: parts.match_expressions,
        })
    }
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
    pub(crate) fn from_json(value: &serde_json::Value) -> Result<LabelSelector, SelectorError> {
        if value.is_null() {
            return Ok(LabelSelector::default());
        }
        // Read as parts (not capped yet): a selector too large says so, not that its shape is
        // wrong.
        let parts = LabelParts::deserialize(value)
            .map_err(|error| SelectorError::Shape(error.to_string()))?;
        let selector = LabelSelector {
            match_labels: parts.match_labels,
            match_expressions: parts.match_expressions,
        };
        Selector::from(&selector).validate()?;
        Ok(selector)
    }

    pub(crate) fn matches(&self, labels: &impl Lookup) -> bool {
        matches_parts(&self.match_labels, &self.match_expressions, labels)
    }

    /// Whether an object's labels match, read in place.
    pub(crate) fn matches_labels_of(&self, object: &Value) -> bool {
        self.matches(&object::metadata_map(object, "labels"))
    }

    /// The selector as a watch's `labelSelector` (kubectl syntax), when the API server selects
    /// exactly what [`LabelSelector::matches`] does: not for an empty selector (it selects
    /// everything), one that does not hold together, or one with a key or value that is no
    /// label's (the server refuses it, where matching here would just select nothing).
    pub(crate) fn server_side(&self) -> Option<String> {
        let selector = Selector::from(self);
        if selector.is_empty() || selector.validate().is_err() {
            return None;
        }
        let keys_and_values_are_labels = self
            .match_labels
            .iter()
            .all(|(key, value)| is_label_key(key) && is_label_value(value))
            && self.match_expressions.iter().all(|requirement| {
                is_label_key(&requirement.key)
                    && requirement.values.iter().all(|value| is_label_value(value))
            });
        keys_and_values_are_labels.then(|| selector.to_string())
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let prefix_holds = prefix.is_none_or(|prefix| {
        prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part.len() <= 63
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    });
    prefix_holds && !name.is_empty() && is_label_value(name)
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` and `.`, alphanumeric at both ends.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let alphanumeric = |b: &u8| b.is_ascii_alphanumeric();
    value.is_empty()
        || (value.len() <= 63
            && bytes.first().is_some_and(alphanumeric)
            && bytes.last().is_some_and(alphanumeric)
            && bytes
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
}

impl AnnotationSelector {
    pub(crate) fn matches(&self, annotations: &impl Lookup) -> bool {
        matches_parts(
            &self.match_annotations,
            &self.match_expressions,
            annotations,
        )
    }

    /// Whether an object's annotations match, read in place.
    pub(crate) fn matches_annotations_of(&self, object: &Value) -> bool {
        self.matches(&object::metadata_map(object, "annotations"))
    }
}

/// Matches a JSON label selector against labels; the entry point of the scripts' helper.
pub(crate) fn matches_label_selector(
    selector: &serde_json::Value,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    Ok(LabelSelector::from_json(selector)?.matches(labels))
}

/// A selector written in kubectl's syntax that cannot be read; says which term and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SyntaxError(pub String);

/// A label selector in kubectl syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`,
/// `a`, `!a`, joined by commas.
pub(crate) fn parse_label_selector(text: &str) -> Result<Selector, SyntaxError> {
    let invalid = |term: &str| SyntaxError(format!("labelSelector: invalid term {term:?}"));
    let mut selector = Selector::default();
    for term in split_terms(text) {
        let term = term.trim();
        if term.is_empty() {
            continue;
        }
        let requirement = |key: &str, operator: Operator, values: Vec<String>| Requirement {
            key: key.trim().to_string(),
            operator,
            values,
        };
        if let Some(key) = term.strip_prefix('!') {
            selector
                .expressions
                .push(requirement(key, Operator::DoesNotExist, Vec::new()));
        } else if let Some((key, value)) = term.split_once("!=") {
            selector.expressions.push(requirement(
                key,
                Operator::NotIn,
                vec![value.trim().to_string()],
            ));
        } else if let Some((key, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
            selector
                .match_exact
                .insert(key.trim().to_string(), value.trim().to_string());
        } else if let Some((key, rest)) = term
            .split_once(" in ")
            .or_else(|| term.split_once(" notin "))
        {
            let operator = if term.contains(" notin ") {
                Operator::NotIn
            } else {
                Operator::In
            };
            let values = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| invalid(term))?
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            selector
                .expressions
                .push(requirement(key, operator, values));
        } else if term
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            selector
                .expressions
                .push(requirement(term, Operator::Exists, Vec::new()));
        } else {
            return Err(invalid(term));
        }
    }
    selector
        .validate()
        .map_err(|e| SyntaxError(format!("labelSelector: {e}")))?;
    Ok(selector)
}

/// Splits at commas outside parentheses (`a in (x,y),b` is two terms).
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

/// A field selector on `metadata.name` and `metadata.namespace` (`=`, `==`, `!=`, joined by
/// commas).
pub(crate) fn parse_field_selector(text: &str) -> Result<Vec<FieldRequirement>, SyntaxError> {
    text.split(',')
        .map(str::trim)
        .filter(|term| !term.is_empty())
        .map(|term| {
            let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, v, true)
            } else {
                return Err(SyntaxError(format!("fieldSelector: invalid term {term:?}")));
            };
            let field = match field.trim() {
                "metadata.name" => Field::Name,
                "metadata.namespace" => Field::Namespace,
                other => {
                    return Err(SyntaxError(format!(
                        "fieldSelector: only metadata.name and metadata.namespace are supported, not {other:?}"
                    )));
                }
            };
            Ok(FieldRequirement {
                field,
                value: value.trim().to_string(),
                equal,
            })
        })
        .collect()
}

impl fmt::Display for Selector {
    /// kubectl's syntax, as `parse_label_selector` reads it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let selector = self;
        let mut terms: Vec<String> = selector
            .match_exact
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        for r in &selector.expressions {
            terms.push(match r.operator {
                Operator::In => format!("{} in ({})", r.key, r.values.join(",")),
                Operator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
                Operator::Exists => r.key.clone(),
                Operator::DoesNotExist => format!("!{}", r.key),
            });
        }
        f.write_str(&terms.join(","))
    }
}

/// One term of a field selector. Only the fields every type has are supported, since the
/// caches are not indexed by anything else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldRequirement {
    pub field: Field,
    pub value: String,
    /// `=`/`==` when true, `!=` when false.
    pub equal: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Name,
    Namespace,
}

impl Field {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Field::Name => "metadata.name",
            Field::Namespace => "metadata.namespace",
        }
    }
}

impl FieldRequirement {
    pub(crate) fn holds(&self, candidate: &Value) -> bool {
        let actual = match self.field {
            Field::Name => object::name(candidate),
            Field::Namespace => object::namespace(candidate).unwrap_or_default(),
        };
        (actual == self.value) == self.equal
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_syntax() {
        let selector = parse_label_selector("a=b, c!=d,e in (x, y),f notin (z),g,!h").unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(selector.matches(&labels(&[("a", "b"), ("e", "y"), ("g", "1")])));
        assert!(!selector.matches(&labels(&[("a", "b"), ("e", "y"), ("g", "1"), ("h", "")])));
        assert!(!selector.matches(&labels(&[("a", "b"), ("e", "y"), ("g", "1"), ("c", "d")])));
        assert!(!selector.matches(&labels(&[("a", "b"), ("e", "q"), ("g", "1")])));
        let printed = parse_label_selector(&selector.to_string()).unwrap();
        assert_eq!(printed, selector, "{selector} reads back as itself");
        assert!(parse_label_selector("a in x").is_err());
        assert!(parse_label_selector("").unwrap().is_empty());
    }

    #[test]
    fn a_selector_goes_to_the_api_server_only_when_it_selects_there_what_it_does_here() {
        let selector = |value: Value| LabelSelector::from_json(&value).unwrap().server_side();
        assert_eq!(
            selector(json!({
                "matchLabels": {"app": "special", "example.com/tier": "a.b_c-d"},
                "matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["x", "y"]},
                    {"key": "gone", "operator": "DoesNotExist"},
                    {"key": "team", "operator": "Exists"},
                    {"key": "stage", "operator": "NotIn", "values": ["dev"]},
                ],
            }))
            .as_deref(),
            Some("app=special,example.com/tier=a.b_c-d,zone in (x,y),!gone,team,stage notin (dev)")
        );
        assert_eq!(
            selector(json!({"matchLabels": {"empty": ""}})).as_deref(),
            Some("empty=")
        );
        // Everything: the whole type.
        assert_eq!(selector(json!({})), None);
        // Values and keys no label has: matched here (never), refused there.
        for not_a_label in [
            json!({"matchLabels": {"app": "has space"}}),
            json!({"matchLabels": {"app": "a,b"}}),
            json!({"matchLabels": {"app": "-leading"}}),
            json!({"matchLabels": {"app": "x".repeat(64)}}),
            json!({"matchLabels": {"Upper.Case/app": "x"}}),
            json!({"matchLabels": {"/app": "x"}}),
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a)"]}]}),
        ] {
            assert_eq!(selector(not_a_label.clone()), None, "{not_a_label}");
        }
        // What goes reads back as the same selector.
        let sent = selector(json!({"matchLabels": {"a": "b"}, "matchExpressions": [
            {"key": "c", "operator": "NotIn", "values": ["d", "e"]}]}))
        .unwrap();
        let read = parse_label_selector(&sent).unwrap();
        assert!(read.matches(&BTreeMap::from([("a".to_string(), "b".to_string())])));
        assert!(!read.matches(&BTreeMap::from([
            ("a".to_string(), "b".to_string()),
            ("c".to_string(), "e".to_string())
        ])));
    }

    /// Reading an object's labels in place decides exactly as the copied map does, a label
    /// whose value is not a string counting as absent in both.
    #[test]
    fn labels_read_in_place_match_like_a_copy() {
        let selector = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "edge"]},
                {"key": "odd", "operator": "DoesNotExist"},
            ],
        }))
        .unwrap();
        let objects = [
            json!({"metadata": {"labels": {"app": "web", "tier": "edge"}}}),
            json!({"metadata": {"labels": {"app": "web", "tier": "back"}}}),
            json!({"metadata": {"labels": {"app": "web", "tier": "front", "odd": 1}}}),
            json!({"metadata": {"labels": {"app": "web", "tier": "front", "odd": "1"}}}),
            json!({"metadata": {"labels": {"app": 7, "tier": "front"}}}),
            json!({"metadata": {}}),
        ];
        let decided: Vec<bool> = objects
            .iter()
            .map(|o| selector.matches_labels_of(o))
            .collect();
        let copied: Vec<bool> = objects
            .iter()
            .map(|o| selector.matches(&object::labels(o)))
            .collect();
        assert_eq!(decided, [true, false, true, false, false, false]);
        assert_eq!(decided, copied);
        let annotations = AnnotationSelector {
            match_annotations: [("a".to_string(), "1".to_string())].into(),
            match_expressions: Vec::new(),
        };
        let annotated = json!({"metadata": {"annotations": {"a": "1"}, "labels": {"a": "2"}}});
        assert!(annotations.matches_annotations_of(&annotated));
        assert!(!annotations.matches(&object::metadata_map(&annotated, "labels")));
    }

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
    fn selectors_past_a_cap_are_refused_naming_it() {
        let requirement = |key: String, values: usize| json!({"key": key, "operator": "In", "values": (0..values).map(|v| format!("v{v}")).collect::<Vec<_>>()});
        let expressions = |count: usize, values: usize| {
            (0..count)
                .map(|i| requirement(format!("k{i}"), values))
                .collect::<Vec<_>>()
        };
        let read = |selector: Value| LabelSelector::from_json(&selector).map(|_| ());
        assert_eq!(
            read(
                json!({"matchLabels": {"a": "b"}, "matchExpressions": expressions(MAX_REQUIREMENTS - 1, 1)})
            ),
            Ok(())
        );
        let too_many = json!({"matchLabels": {"a": "b"}, "matchExpressions": expressions(MAX_REQUIREMENTS, 1)});
        assert_eq!(
            read(too_many.clone()).unwrap_err().to_string(),
            "selector too large: 65 requirements (labels and expressions together), at most 64"
        );
        assert_eq!(
            read(json!({"matchExpressions": expressions(1, MAX_VALUES)})),
            Ok(())
        );
        assert_eq!(
            read(json!({"matchExpressions": expressions(1, MAX_VALUES + 1)}))
                .unwrap_err()
                .to_string(),
            r#"selector too large: the requirement on key "k0" lists 257 values, at most 256"#
        );
        let long = "v".repeat(MAX_SELECTOR_BYTES);
        let message = read(json!({"matchLabels": {"a": long}}))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("selector too large: ") && message.ends_with(", at most 32768"),
            "{message}"
        );
        // Read from a spec (serde), and in kubectl's syntax, alike.
        let error = serde_json::from_value::<LabelSelector>(too_many).unwrap_err();
        assert!(error.to_string().contains("at most 64"), "{error}");
        let annotations = json!({"matchAnnotations": {"a": "b"}, "matchExpressions": expressions(MAX_REQUIREMENTS, 1)});
        assert!(serde_json::from_value::<AnnotationSelector>(annotations).is_err());
        let text: Vec<String> = (0..=MAX_REQUIREMENTS).map(|i| format!("k{i}=v")).collect();
        let error = parse_label_selector(&text.join(",")).unwrap_err();
        assert!(error.0.contains("at most 64"), "{error}");
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
