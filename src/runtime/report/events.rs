//! Kubernetes Events the operator publishes, correlated as client-go's event recorder does
//! (`tools/record/events_cache.go`), so no controller can flood the API server with them:
//!
//! - Repeats of the same message on the same object are counted in one Event (its `series`),
//!   and a different message is a new Event, so a new error is not hidden behind the count of
//!   an old one.
//! - Up to that point: past [`AGGREGATE_AFTER`] distinct messages with the same type, reason
//!   and action about one object within [`AGGREGATE_WINDOW`], further new messages go to one
//!   Event "(combined from similar events)", whose note is the newest of them.
//! - Every publish (a new Event or a count) spends a token from a bucket per origin (the
//!   operator, or the scripts), controller and object ([`OBJECT_BURST`], refilled one per
//!   [`OBJECT_REFILL`]), and from one per origin and controller ([`CONTROLLER_BURST`],
//!   refilled [`CONTROLLER_REFILL`]). Without a token the Event is dropped and counted
//!   (`metascript_events_dropped`); a dropped repeat is still counted, so the next count
//!   published is right. The operator's own Warnings draw from buckets of their own: a script
//!   saying a lot cannot use up what reports its failures.
//!
//! An Event about a target names the controller as its `related` object, so two controllers'
//! Events on one object stay apart. What is remembered for all this is capped at
//! [`MAX_REMEMBERED`] entries per map, the least recently used forgotten first.

use crate::api::{EventType, KindName};
use crate::object;
use crate::runtime::lru::Lru;
use crate::runtime::report::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

/// How long a published Event is remembered for counting repeats.
const REMEMBER: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// Distinct messages of similar Events about one object within [`AGGREGATE_WINDOW`] from
/// which on they are combined into one Event (client-go's default).
pub(crate) const AGGREGATE_AFTER: usize = 10;

/// How long similar Events are remembered for combining, from the last of them.
pub(crate) const AGGREGATE_WINDOW: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// What a combined Event's note starts with, as client-go has it.
const COMBINED: &str = "(combined from similar events): ";

/// Events one origin may publish about one object of a controller at once (client-go's).
pub(crate) const OBJECT_BURST: f64 = 25.0;

/// Then one more each this long (client-go's): a thing that stays broken keeps saying so,
/// slowly.
pub(crate) const OBJECT_REFILL: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);

/// Events one origin may publish for one controller at once, whatever the objects: the object
/// buckets alone would let a controller over many objects publish many times as much.
pub(crate) const CONTROLLER_BURST: f64 = 100.0;

/// Then one more each this long: 3,600 an hour per controller at most, about what the API
/// server keeps of them (Events expire after an hour).
pub(crate) const CONTROLLER_REFILL: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

/// Entries each map of the correlation holds, as client-go's caches: the note (up to 1 KiB) is
/// the largest part of one, so all of them stay within a few MiB however many objects,
/// controllers or messages there are. A bucket forgotten this way starts full again, which the
/// controller's own bucket still bounds.
pub(crate) const MAX_REMEMBERED: usize = 4096;

/// The annotation naming the trace of the work item that published an Event (its latest
/// occurrence's, for a repeat), when that item was traced (`--otlp-endpoint`).
pub(crate) const TRACE_ID_ANNOTATION: &str = "metascript.dev/trace-id";

/// Who asked for an Event: each has buckets of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The operator's own reports (failures, rollouts).
    Operator,
    /// A script's `event(...)`.
    Script,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Operator => "operator",
            Origin::Script => "script",
        }
    }
}

/// What makes Events similar: everything but the note.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Similar {
    origin: Origin,
    type_: EventType,
    /// apiVersion, kind, namespace, name.
    regarding: (String, String, Option<String>, String),
    /// The controller's kind and name, when it is not what the Event is about.
    related: Option<(String, String)>,
    reason: String,
    action: String,
}

impl Similar {
    /// The controller an Event concerns: the related object, else what it is about.
    fn controller(&self) -> (&str, &str) {
        match &self.related {
            Some((kind, name)) => (kind, name),
            None => (&self.regarding.1, &self.regarding.3),
        }
    }
}

/// What makes two Events the same (apart from their time and count).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    similar: Similar,
    /// The note as published; empty for the Event combining similar ones.
    note: String,
    combined: bool,
}

/// Whose tokens an Event spends: an origin's for a controller, on one object or on all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Spender {
    origin: Origin,
    controller: (String, String),
    regarding: Option<(String, String, Option<String>, String)>,
}

/// An Event published earlier: where it is and how often it happened.
struct Published {
    namespace: String,
    name: String,
    count: i32,
    last: jiff::Timestamp,
}

/// The distinct messages of similar Events seen lately (their hashes: a note is up to 1 kB).
struct Notes {
    seen: HashSet<u64>,
    last: jiff::Timestamp,
}

/// A token bucket.
struct Bucket {
    tokens: f64,
    at: jiff::Timestamp,
}

impl Bucket {
    fn refill(&mut self, now: jiff::Timestamp, burst: f64, every: jiff::SignedDuration) {
        let elapsed = now.duration_since(self.at).as_secs_f64().max(0.0);
        self.tokens = (self.tokens + elapsed / every.as_secs_f64()).min(burst);
        self.at = now;
    }
}

/// What to do with an Event asked for.
#[derive(Debug, PartialEq)]
enum Decision {
    /// Create it, with this note, and remember it under `key` once created.
    Create { key: Key, note: String },
    /// Count a repeat on the Event published earlier (with a new note when it combines).
    Repeat {
        key: Key,
        namespace: String,
        name: String,
        count: i32,
        note: Option<String>,
    },
    /// Out of tokens.
    Drop,
}

/// The correlation: pure, its clock handed in.
struct Correlator {
    published: Lru<Key, Published>,
    notes: Lru<Similar, Notes>,
    buckets: Lru<Spender, Bucket>,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator {
            published: Lru::new(MAX_REMEMBERED),
            notes: Lru::new(MAX_REMEMBERED),
            buckets: Lru::new(MAX_REMEMBERED),
        }
    }
}

impl Correlator {
    /// Combines, counts, then limits, as client-go does: a repeat is counted even when it is
    /// dropped, so the next count published includes it.
    fn decide(&mut self, similar: Similar, note: String, now: jiff::Timestamp) -> Decision {
        let combined = self.combines(&similar, &note, now);
        let (key, note) = match combined {
            true => (
                Key {
                    similar,
                    note: String::new(),
                    combined,
                },
                truncate_note(&format!("{COMBINED}{note}")),
            ),
            false => (
                Key {
                    similar,
                    note: note.clone(),
                    combined,
                },
                note,
            ),
        };
        let earlier = match self.published.get_mut(&key) {
            Some(published) if published.last + REMEMBER > now => {
                published.count = published.count.saturating_add(1);
                published.last = now;
                Some((
                    published.namespace.clone(),
                    published.name.clone(),
                    published.count,
                ))
            }
            _ => None,
        };
        if !self.spend(&key.similar, now) {
            return Decision::Drop;
        }
        match earlier {
            Some((namespace, name, count)) => Decision::Repeat {
                key,
                namespace,
                name,
                count,
                note: combined.then_some(note),
            },
            None => Decision::Create { key, note },
        }
    }

    /// Whether a message joins the combined Event of its similar ones.
    fn combines(&mut self, similar: &Similar, note: &str, now: jiff::Timestamp) -> bool {
        let notes = self.notes.get_or_insert_with(similar, || Notes {
            seen: HashSet::new(),
            last: now,
        });
        if notes.last + AGGREGATE_WINDOW < now {
            notes.seen.clear();
        }
        notes.last = now;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        note.hash(&mut hasher);
        let hash = hasher.finish();
        // A message with an Event of its own keeps counting there.
        if notes.seen.contains(&hash) {
            return false;
        }
        if notes.seen.len() + 1 < AGGREGATE_AFTER {
            notes.seen.insert(hash);
            return false;
        }
        // Not remembered (client-go drops one at random instead): a combined message's repeats
        // count on the combined Event too, rather than starting one of their own.
        true
    }

    /// Takes a token from the object's bucket and the controller's, if both have one.
    fn spend(&mut self, similar: &Similar, now: jiff::Timestamp) -> bool {
        let (kind, name) = similar.controller();
        let controller = Spender {
            origin: similar.origin,
            controller: (kind.to_string(), name.to_string()),
            regarding: None,
        };
        let object = Spender {
            regarding: Some(similar.regarding.clone()),
            ..controller.clone()
        };
        let mut available = true;
        for (spender, burst, every) in [
            (&controller, CONTROLLER_BURST, CONTROLLER_REFILL),
            (&object, OBJECT_BURST, OBJECT_REFILL),
        ] {
            let bucket = self.buckets.get_or_insert_with(spender, || Bucket {
                tokens: burst,
                at: now,
            });
            bucket.refill(now, burst, every);
            available &= bucket.tokens >= 1.0;
        }
        if available {
            for spender in [&controller, &object] {
                if let Some(bucket) = self.buckets.get_mut(spender) {
                    bucket.tokens -= 1.0;
                }
            }
        }
        available
    }

    /// Remembers an Event just created, for counting its repeats.
    fn created(&mut self, key: Key, namespace: String, name: String, now: jiff::Timestamp) {
        let published = Published {
            namespace,
            name,
            count: 1,
            last: now,
        };
        self.published.insert(key, published);
    }
}

/// An Event asked for. The operator itself reports only what needs attention, failures, as
/// `Warning`; scripts say `Normal` or `Warning`.
pub struct Asked<'a> {
    pub origin: Origin,
    pub type_: EventType,
    /// What it is about.
    pub regarding: &'a Value,
    /// The controller, when it is not what the Event is about.
    pub related: Option<&'a ObjectReference>,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

pub struct Events {
    client: kube::Client,
    controller: String,
    instance: String,
    correlator: Mutex<Correlator>,
    metrics: Metrics,
    /// The kinds of controller the operator runs, to tell a controller's kind in `metrics` by
    /// its short name, as every other metric does.
    kinds: Vec<KindName>,
}

impl Events {
    /// `instance` names this replica (the pod) in `reportingInstance`; dropped Events are
    /// counted in `metrics`.
    pub fn new(
        client: kube::Client,
        instance: Option<String>,
        metrics: Metrics,
        kinds: Vec<KindName>,
    ) -> Events {
        let controller = "metascript.dev/operator".to_string();
        Events {
            client,
            instance: instance.unwrap_or_else(|| controller.clone()),
            controller,
            correlator: Mutex::default(),
            metrics,
            kinds,
        }
    }

    /// Publishes an Event (a repeat updates the earlier one's count), unless its origin is out
    /// of tokens for the controller or the object.
    pub async fn publish(&self, asked: Asked<'_>) -> Result<(), kube::Error> {
        let Asked {
            origin,
            type_,
            regarding,
            related,
            reason,
            action,
            note,
        } = asked;
        let regarding_ref = reference(regarding);
        let similar = Similar {
            origin,
            type_,
            regarding: (
                object::api_version(regarding).to_string(),
                object::kind(regarding).to_string(),
                regarding_ref.namespace.clone(),
                object::name(regarding).to_string(),
            ),
            related: related.map(|r| {
                (
                    r.kind.clone().unwrap_or_default(),
                    r.name.clone().unwrap_or_default(),
                )
            }),
            reason: reason.to_string(),
            action: action.to_string(),
        };
        let now = jiff::Timestamp::now();
        let trace_id = crate::telemetry::current_trace_id();
        let decision = self
            .correlator
            .lock()
            .decide(similar.clone(), truncate_note(note), now);
        let (key, note) = match decision {
            Decision::Drop => {
                let (kind, name) = similar.controller();
                tracing::debug!(controller = name, reason, "too many Events; dropped");
                // An Event about no controller (an object a watch passed over) counts under
                // one series for all of them, not one per object.
                let (kind, name) = match self.kinds.iter().find(|k| k.object_kind() == kind) {
                    Some(known) => (known.as_str(), name),
                    None => ("-", "-"),
                };
                self.metrics
                    .count_dropped_event(kind, name, origin.as_str());
                return Ok(());
            }
            Decision::Repeat {
                key,
                namespace,
                name,
                count,
                note,
            } => {
                let mut patch = serde_json::json!({"series": EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                }});
                if let Some(note) = &note {
                    patch["note"] = Value::from(note.as_str());
                }
                // The latest occurrence's trace, or none when it was not traced (an earlier
                // one's id would lead to another sync).
                if crate::telemetry::on() {
                    patch["metadata"] =
                        serde_json::json!({"annotations": {TRACE_ID_ANNOTATION: trace_id}});
                }
                let patched = Api::<Event>::namespaced(self.client.clone(), &namespace)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
                match patched {
                    Ok(_) => return Ok(()),
                    // Deleted meanwhile (Events expire): published anew, on the token spent.
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let note = note.unwrap_or_else(|| key.note.clone());
                        (key, note)
                    }
                    Err(error) => return Err(error),
                }
            }
            Decision::Create { key, note } => (key, note),
        };
        // Events about cluster-scoped objects go to `default`, as kubectl expects them there.
        let namespace = regarding_ref
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = format!("{}.{:x}", object::name(regarding), now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                annotations: trace_id
                    .map(|trace_id| [(TRACE_ID_ANNOTATION.to_string(), trace_id)].into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.as_str().into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(note),
            regarding: Some(regarding_ref),
            related: related.cloned(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &event)
            .await?;
        self.correlator.lock().created(key, namespace, name, now);
        Ok(())
    }
}

/// A reference to an object, as Events carry it.
pub(crate) fn reference(about: &Value) -> ObjectReference {
    ObjectReference {
        api_version: Some(object::api_version(about).to_string()),
        kind: Some(object::kind(about).to_string()),
        name: Some(object::name(about).to_string()),
        namespace: object::namespace(about).map(str::to_string),
        uid: object::uid(about).map(str::to_string),
        ..ObjectReference::default()
    }
}

/// The API server's limit on an Event's `note`, in bytes (`NoteLengthLimit`).
const NOTE_LIMIT: usize = 1024;

/// A note within [`NOTE_LIMIT`]: a longer one loses its middle, not its end, because an API
/// error says what to do last (a Forbidden on a Role ends with the `escalate` or `bind` verb
/// the account lacks), after a list of rules that can be any length.
pub(crate) fn truncate_note(note: &str) -> String {
    if note.len() <= NOTE_LIMIT {
        return note.to_string();
    }
    // Room for the marker as long as it can be: what is cut is less than the whole note.
    let keep = NOTE_LIMIT - marker(note.len()).len();
    let mut head = keep / 2;
    while !note.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = note.len() - (keep - head);
    while !note.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}{}{}", &note[..head], marker(tail - head), &note[tail..])
}

/// What stands for the middle a note lost.
fn marker(cut: usize) -> String {
    format!(" […{cut} bytes cut…] ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + seconds).expect("a time")
    }

    /// A script's Event about `object` of the controller `c`.
    fn asked(object: &str, reason: &str) -> Similar {
        Similar {
            origin: Origin::Script,
            type_: EventType::Warning,
            regarding: (
                "v1".into(),
                "ConfigMap".into(),
                Some("ns".into()),
                object.into(),
            ),
            related: Some(("DecoratorController".into(), "c".into())),
            reason: reason.into(),
            action: "Sync".into(),
        }
    }

    /// Decides, and remembers what it said to create as created (named after its object and
    /// note).
    fn publish(correlator: &mut Correlator, similar: Similar, note: &str, now: i64) -> Decision {
        let decision = correlator.decide(similar, note.to_string(), at(now));
        if let Decision::Create { key, .. } = &decision {
            let note = if key.combined { "combined" } else { &key.note };
            let name = format!("{}-{note}", key.similar.regarding.3);
            correlator.created(key.clone(), "ns".into(), name, at(now));
        }
        decision
    }

    fn created_note(decision: &Decision) -> Option<&str> {
        match decision {
            Decision::Create { note, .. } => Some(note),
            _ => None,
        }
    }

    fn repeat(decision: &Decision) -> Option<(&str, i32, Option<&str>)> {
        match decision {
            Decision::Repeat {
                name, count, note, ..
            } => Some((name, *count, note.as_deref())),
            _ => None,
        }
    }

    #[test]
    fn repeats_count_and_a_new_message_is_a_new_event() {
        let mut correlator = Correlator::default();
        let first = publish(&mut correlator, asked("a", "Bad"), "one", 0);
        assert_eq!(created_note(&first), Some("one"));
        let again = publish(&mut correlator, asked("a", "Bad"), "one", 1);
        assert_eq!(repeat(&again), Some(("a-one", 2, None)));
        let other = publish(&mut correlator, asked("a", "Bad"), "two", 2);
        assert_eq!(
            created_note(&other),
            Some("two"),
            "not hidden behind one's count"
        );
        // Past the hour an Event is remembered, a repeat is a new Event.
        let later = publish(&mut correlator, asked("a", "Bad"), "one", 3 + 3600);
        assert_eq!(created_note(&later), Some("one"));
    }

    #[test]
    fn many_distinct_messages_are_combined_into_one_event() {
        let mut correlator = Correlator::default();
        for i in 0..AGGREGATE_AFTER - 1 {
            let decision = publish(&mut correlator, asked("a", "Bad"), &format!("m{i}"), 0);
            assert_eq!(created_note(&decision), Some(format!("m{i}").as_str()));
        }
        let tenth = publish(&mut correlator, asked("a", "Bad"), "m9", 1);
        assert_eq!(
            created_note(&tenth),
            Some("(combined from similar events): m9")
        );
        // Each further new message counts on the combined Event, showing itself in its note.
        let eleventh = publish(&mut correlator, asked("a", "Bad"), "m10", 2);
        assert_eq!(
            repeat(&eleventh),
            Some(("a-combined", 2, Some("(combined from similar events): m10")))
        );
        // A repeat of a combined message counts there too; one with an Event of its own, there.
        let again = publish(&mut correlator, asked("a", "Bad"), "m9", 2);
        assert_eq!(
            repeat(&again),
            Some(("a-combined", 3, Some("(combined from similar events): m9")))
        );
        let own = publish(&mut correlator, asked("a", "Bad"), "m0", 2);
        assert_eq!(repeat(&own), Some(("a-m0", 2, None)));
        // Another reason, or another object, is not similar.
        let other = publish(&mut correlator, asked("a", "Worse"), "m11", 3);
        assert_eq!(created_note(&other), Some("m11"));
        let elsewhere = publish(&mut correlator, asked("b", "Bad"), "m12", 3);
        assert_eq!(created_note(&elsewhere), Some("m12"));
        // Quiet for the window: messages stand on their own again.
        let fresh = publish(&mut correlator, asked("a", "Bad"), "m13", 4 + 601);
        assert_eq!(created_note(&fresh), Some("m13"));
    }

    #[test]
    fn an_object_gets_a_burst_then_one_event_each_refill() {
        let mut correlator = Correlator::default();
        let burst = OBJECT_BURST as i64;
        for i in 0..burst {
            let decision = publish(&mut correlator, asked("a", "Bad"), "same", i);
            assert_ne!(decision, Decision::Drop, "within the burst: {i}");
        }
        let over = publish(&mut correlator, asked("a", "Bad"), "same", burst);
        assert_eq!(over, Decision::Drop);
        // Another object of the controller has tokens of its own.
        let other = publish(&mut correlator, asked("b", "Bad"), "same", burst);
        assert_ne!(other, Decision::Drop);
        // A refill later, one more; the repeats dropped meanwhile are in its count.
        let refill = OBJECT_REFILL.as_secs();
        let next = publish(&mut correlator, asked("a", "Bad"), "same", refill + 1);
        assert_eq!(repeat(&next), Some(("a-same", (burst + 2) as i32, None)));
        let over = publish(&mut correlator, asked("a", "Bad"), "same", refill + 2);
        assert_eq!(over, Decision::Drop);
    }

    #[test]
    fn a_controller_gets_a_burst_across_its_objects_and_the_operators_reports_their_own() {
        let mut correlator = Correlator::default();
        let burst = CONTROLLER_BURST as usize;
        let allowed = (0..burst + 10)
            .filter(|i| {
                publish(&mut correlator, asked(&format!("o{i}"), "Bad"), "x", 0) != Decision::Drop
            })
            .count();
        assert_eq!(allowed, burst);
        // The operator's own Warning about one of those objects still goes out.
        let failure = Similar {
            origin: Origin::Operator,
            ..asked("o1", "HookFailed")
        };
        assert_ne!(
            publish(&mut correlator, failure, "failed", 0),
            Decision::Drop
        );
        // A second later, the controller's bucket has one more.
        let refill = CONTROLLER_REFILL.as_secs();
        let next = publish(&mut correlator, asked("fresh", "Bad"), "x", refill);
        assert_ne!(next, Decision::Drop);
        assert_eq!(
            publish(&mut correlator, asked("fresh2", "Bad"), "x", refill),
            Decision::Drop
        );
    }

    /// However many objects, controllers and messages, what is remembered stays capped.
    #[test]
    fn what_is_remembered_is_capped() {
        let mut correlator = Correlator::default();
        for i in 0..3 * MAX_REMEMBERED {
            let similar = Similar {
                related: Some(("DecoratorController".into(), format!("c{i}"))),
                ..asked(&format!("o{i}"), "Bad")
            };
            publish(&mut correlator, similar, &format!("note {i}"), 0);
        }
        assert_eq!(correlator.published.len(), MAX_REMEMBERED);
        assert_eq!(correlator.notes.len(), MAX_REMEMBERED);
        assert_eq!(correlator.buckets.len(), MAX_REMEMBERED);
    }

    #[test]
    fn long_notes_keep_their_head_and_their_tail() {
        assert_eq!(truncate_note("short"), "short");
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(truncate_note(&exact), exact);
        // A Forbidden as the API server words it: the verb to grant comes last.
        let rules = "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\"]}\n".repeat(40);
        let note = format!(
            "create roles team-a/bot: roles.rbac.authorization.k8s.io \"bot\" is forbidden: \
             user is attempting to grant RBAC permissions not currently held:\n{rules}; \
             grant the escalate verb on roles"
        );
        let cut = truncate_note(&note);
        assert!(cut.len() <= NOTE_LIMIT, "{}", cut.len());
        assert!(
            cut.starts_with("create roles team-a/bot: roles.rbac"),
            "{cut}"
        );
        assert!(cut.ends_with("grant the escalate verb on roles"), "{cut}");
        let (head, rest) = cut.split_once(" […").expect("a marker");
        let (count, tail) = rest.split_once(" bytes cut…] ").expect("a marker");
        let count: usize = count.parse().expect("a count");
        assert_eq!(head.len() + count + tail.len(), note.len());
    }

    proptest::proptest! {
        #![proptest_config(crate::fuzzing::config(256))]

        /// Whatever the note, what is published fits, is valid UTF-8 (a `String`), and keeps
        /// the note's first and last characters.
        #[test]
        fn fuzz_a_cut_note_fits_and_keeps_both_ends(note in "\\PC{0,1500}") {
            let cut = truncate_note(&note);
            proptest::prop_assert!(cut.len() <= NOTE_LIMIT);
            proptest::prop_assert_eq!(cut.chars().next(), note.chars().next());
            proptest::prop_assert_eq!(cut.chars().last(), note.chars().last());
            if note.len() <= NOTE_LIMIT {
                proptest::prop_assert_eq!(&cut, &note);
            } else {
                proptest::prop_assert!(cut.len() > NOTE_LIMIT - 12, "{} bytes", cut.len());
            }
        }
    }
}
