//! Many selectors over one type, filed so that an object finds the few it may match without
//! looking at the others: each selector is filed under something every object it matches has
//! (a name, a label with a value, a label), and an object looks up only what it has. The work
//! one event costs is then its own labels plus the selectors it may match, however many other
//! selectors there are; only selectors with nothing to go by (none but negative requirements)
//! are looked at for every object.

use super::{LabelSelector, Operator, Requirement, Selector};
use crate::object;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

/// Where a selector is filed: something every object it matches has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Anchor<'a> {
    /// One of these names (a related rule's `names`, a field selector's `metadata.name=`).
    Names(&'a [String]),
    /// The label `key` with one of these values (an exact pair, an `In`).
    Values(&'a str, &'a [String]),
    /// The label `key`, whatever its value (`Exists`).
    Key(&'a str),
    /// Nothing to go by: looked at for every object.
    Everything,
}

impl<'a> Anchor<'a> {
    /// The most selective anchor of a selector whose objects must also bear one of `names`
    /// (none: any name).
    pub(crate) fn of(
        names: &'a [String],
        exact: &'a BTreeMap<String, String>,
        expressions: &'a [Requirement],
    ) -> Anchor<'a> {
        if !names.is_empty() {
            return Anchor::Names(names);
        }
        if let Some((key, value)) = exact.iter().next() {
            return Anchor::Values(key, std::slice::from_ref(value));
        }
        let fewest_values = expressions
            .iter()
            .filter(|r| r.operator == Operator::In && !r.values.is_empty())
            .min_by_key(|r| r.values.len());
        if let Some(requirement) = fewest_values {
            return Anchor::Values(&requirement.key, &requirement.values);
        }
        match expressions.iter().find(|r| r.operator == Operator::Exists) {
            Some(requirement) => Anchor::Key(&requirement.key),
            None => Anchor::Everything,
        }
    }
}

impl Selector {
    pub(crate) fn anchor<'a>(&'a self, names: &'a [String]) -> Anchor<'a> {
        Anchor::of(names, &self.match_exact, &self.expressions)
    }
}

impl LabelSelector {
    pub(crate) fn anchor<'a>(&'a self, names: &'a [String]) -> Anchor<'a> {
        Anchor::of(names, &self.match_labels, &self.match_expressions)
    }
}

/// Items (whatever names a selector: a work item's read, a target's rule) filed by their
/// selectors' anchors.
#[derive(Debug)]
pub(crate) struct SelectorIndex<T> {
    everything: HashSet<T>,
    names: HashMap<String, HashSet<T>>,
    labels: HashMap<String, Label<T>>,
}

#[derive(Debug)]
struct Label<T> {
    /// Filed under the label whatever its value.
    any_value: HashSet<T>,
    values: HashMap<String, HashSet<T>>,
}

impl<T> Default for SelectorIndex<T> {
    fn default() -> Self {
        SelectorIndex {
            everything: HashSet::new(),
            names: HashMap::new(),
            labels: HashMap::new(),
        }
    }
}

impl<T> Default for Label<T> {
    fn default() -> Self {
        Label {
            any_value: HashSet::new(),
            values: HashMap::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> SelectorIndex<T> {
    pub(crate) fn insert(&mut self, anchor: Anchor<'_>, item: T) {
        match anchor {
            Anchor::Names(names) => {
                for name in names {
                    self.names
                        .entry(name.clone())
                        .or_default()
                        .insert(item.clone());
                }
            }
            Anchor::Values(key, values) => {
                let label = self.labels.entry(key.to_string()).or_default();
                for value in values {
                    label
                        .values
                        .entry(value.clone())
                        .or_default()
                        .insert(item.clone());
                }
            }
            Anchor::Key(key) => {
                let label = self.labels.entry(key.to_string()).or_default();
                label.any_value.insert(item);
            }
            Anchor::Everything => {
                self.everything.insert(item);
            }
        }
    }

    /// Removes an item filed under `anchor` (the anchor it was inserted with).
    pub(crate) fn remove(&mut self, anchor: Anchor<'_>, item: &T) {
        match anchor {
            Anchor::Names(names) => {
                for name in names {
                    remove_from(&mut self.names, name, item);
                }
            }
            Anchor::Values(key, values) => {
                if let Some(label) = self.labels.get_mut(key) {
                    for value in values {
                        remove_from(&mut label.values, value, item);
                    }
                    if label.is_empty() {
                        self.labels.remove(key);
                    }
                }
            }
            Anchor::Key(key) => {
                if let Some(label) = self.labels.get_mut(key) {
                    label.any_value.remove(item);
                    if label.is_empty() {
                        self.labels.remove(key);
                    }
                }
            }
            Anchor::Everything => {
                self.everything.remove(item);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.everything.is_empty() && self.names.is_empty() && self.labels.is_empty()
    }

    /// The items whose selectors may match `object`: every one that does, and some that do not
    /// (the caller checks each). None twice: an item is filed under one name, value or label
    /// of a key, and an object has one name and one value per label.
    pub(crate) fn candidates<'a>(&'a self, object: &'a Value) -> impl Iterator<Item = &'a T> + 'a {
        let named = self.names.get(object::name(object)).into_iter().flatten();
        let labelled = object::metadata_map(object, "labels")
            .into_iter()
            .flatten()
            .filter_map(|(key, value)| Some((self.labels.get(key)?, value)))
            .flat_map(|(label, value)| {
                let valued = value
                    .as_str()
                    .and_then(|value| label.values.get(value))
                    .into_iter()
                    .flatten();
                label.any_value.iter().chain(valued)
            });
        self.everything.iter().chain(named).chain(labelled)
    }
}

impl<T> Label<T> {
    fn is_empty(&self) -> bool {
        self.any_value.is_empty() && self.values.is_empty()
    }
}

fn remove_from<T: Hash + Eq>(map: &mut HashMap<String, HashSet<T>>, slot: &str, item: &T) {
    if let Some(items) = map.get_mut(slot) {
        items.remove(item);
        if items.is_empty() {
            map.remove(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn requirement(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn a_selector_is_filed_under_its_most_selective_anchor() {
        let names = ["a".to_string()];
        let exact: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let expressions = [
            requirement("tier", Operator::NotIn, &["x"]),
            requirement("zone", Operator::Exists, &[]),
            requirement("env", Operator::In, &["a", "b", "c"]),
            requirement("team", Operator::In, &["t"]),
        ];
        assert_eq!(
            Anchor::of(&names, &exact, &expressions),
            Anchor::Names(&names)
        );
        assert!(matches!(
            Anchor::of(&[], &exact, &expressions),
            Anchor::Values("app", [web]) if web == "web"
        ));
        assert!(matches!(
            Anchor::of(&[], &BTreeMap::new(), &expressions),
            Anchor::Values("team", [t]) if t == "t"
        ));
        assert_eq!(
            Anchor::of(&[], &BTreeMap::new(), &expressions[..2]),
            Anchor::Key("zone")
        );
        assert_eq!(
            Anchor::of(&[], &BTreeMap::new(), &expressions[..1]),
            Anchor::Everything
        );
    }

    #[test]
    fn an_object_finds_only_what_is_filed_under_what_it_has() {
        let mut index = SelectorIndex::default();
        let names = ["cm".to_string()];
        let values = ["web".to_string(), "api".to_string()];
        index.insert(Anchor::Names(&names), 1);
        index.insert(Anchor::Values("app", &values), 2);
        index.insert(Anchor::Key("zone"), 3);
        index.insert(Anchor::Everything, 4);
        let found = |object: Value| {
            let mut found: Vec<i32> = index.candidates(&object).copied().collect();
            found.sort();
            found
        };
        assert_eq!(
            found(json!({"metadata": {"name": "cm", "labels": {"app": "api", "zone": "z"}}})),
            [1, 2, 3, 4]
        );
        assert_eq!(
            found(json!({"metadata": {"name": "other", "labels": {"app": "db"}}})),
            [4]
        );
        for (anchor, item) in [
            (Anchor::Names(&names), 1),
            (Anchor::Values("app", &values), 2),
            (Anchor::Key("zone"), 3),
            (Anchor::Everything, 4),
        ] {
            index.remove(anchor, &item);
        }
        assert!(index.is_empty(), "{index:?}");
    }

    fn arbitrary_requirement() -> impl Strategy<Value = Requirement> {
        let key = prop::sample::select(vec!["a", "b", "c"]);
        let value = prop::sample::select(vec!["1", "2", "3"]);
        let operator = prop::sample::select(vec![
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
        ]);
        (key, operator, prop::collection::vec(value, 1..3)).prop_map(|(key, operator, values)| {
            let values = match operator {
                Operator::In | Operator::NotIn => values,
                _ => Vec::new(),
            };
            requirement(key, operator, &values)
        })
    }

    fn arbitrary_selector() -> impl Strategy<Value = (Vec<String>, Selector)> {
        let pair = (
            prop::sample::select(vec!["a", "b"]),
            prop::sample::select(vec!["1", "2"]),
        );
        (
            prop::collection::vec(prop::sample::select(vec!["x", "y"]), 0..2),
            prop::collection::btree_map(pair.0, pair.1, 0..2),
            prop::collection::vec(arbitrary_requirement(), 0..3),
        )
            .prop_map(|(names, exact, expressions)| {
                let names = names.into_iter().map(str::to_string).collect();
                let selector = Selector {
                    match_exact: exact
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    expressions,
                };
                (names, selector)
            })
    }

    fn arbitrary_object() -> impl Strategy<Value = Value> {
        let label = (
            prop::sample::select(vec!["a", "b", "c", "d"]),
            prop_oneof![
                prop::sample::select(vec!["1", "2", "3"]).prop_map(Value::from),
                Just(json!(7)),
            ],
        );
        (
            prop::sample::select(vec!["x", "y", "z"]),
            prop::collection::btree_map(label.0, label.1, 0..4),
        )
            .prop_map(|(name, labels)| {
                let labels: serde_json::Map<String, Value> = labels
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                json!({"metadata": {"name": name, "labels": labels}})
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The index never hides a selector that matches: an object finds, once each, every
        /// item whose names and selector take it; and removing everything leaves it empty.
        #[test]
        fn every_matching_selector_is_a_candidate_once(
            selectors in prop::collection::vec(arbitrary_selector(), 0..8),
            object in arbitrary_object(),
        ) {
            let mut index = SelectorIndex::default();
            for (item, (names, selector)) in selectors.iter().enumerate() {
                index.insert(selector.anchor(names), item);
            }
            let found: Vec<usize> = index.candidates(&object).copied().collect();
            let unique: HashSet<usize> = found.iter().copied().collect();
            prop_assert_eq!(unique.len(), found.len(), "a candidate twice: {:?}", found);
            for (item, (names, selector)) in selectors.iter().enumerate() {
                let named = names.is_empty() || names.iter().any(|n| n == object::name(&object));
                let matches = named && selector.matches(&object::metadata_map(&object, "labels"));
                prop_assert!(!matches || unique.contains(&item), "{item} matches but was not found");
            }
            for (item, (names, selector)) in selectors.iter().enumerate() {
                index.remove(selector.anchor(names), &item);
            }
            prop_assert!(index.is_empty());
        }
    }
}
