//! Kubernetes Events the operator publishes. Repeats of the same message on the same object
//! are counted in one Event (its `series`), but a different message is a new Event, so a new
//! error is never hidden behind the count of an old one; and an Event about a target names the
//! controller as its `related` object, so two controllers' errors on one object stay apart.
//! The same counting is what rate-limits the Events scripts ask for (`event`): a script that
//! says the same thing on every sync bumps one Event's count instead of creating new ones.

use crate::api::EventType;
use crate::object;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::HashMap;

/// How long a published Event is remembered for counting repeats.
const REMEMBER: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// What makes two Events the same (apart from their time and count).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    type_: EventType,
    regarding: (String, String, Option<String>, String),
    related: Option<(String, String)>,
    reason: String,
    action: String,
    note: String,
}

/// An Event published earlier: where it is and how often it happened.
struct Published {
    namespace: String,
    name: String,
    count: i32,
    last: jiff::Timestamp,
}

pub struct Events {
    client: kube::Client,
    controller: String,
    instance: String,
    published: Mutex<HashMap<Key, Published>>,
}

impl Events {
    /// `instance` names this replica (the pod) in `reportingInstance`.
    pub fn new(client: kube::Client, instance: Option<String>) -> Events {
        let controller = "metascript.dev/operator".to_string();
        Events {
            client,
            instance: instance.unwrap_or_else(|| controller.clone()),
            controller,
            published: Mutex::default(),
        }
    }

    /// Publishes an Event about `regarding` (a repeat updates the earlier one's count). The
    /// operator itself reports only what needs attention, failures, as `Warning`; scripts say
    /// `Normal` or `Warning`.
    pub async fn publish(
        &self,
        type_: EventType,
        regarding: &Value,
        related: Option<&ObjectReference>,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let regarding_ref = reference(regarding);
        // Events about cluster-scoped objects go to `default`, as kubectl expects them there.
        let namespace = regarding_ref
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let key = Key {
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
            note: note.to_string(),
        };
        let now = jiff::Timestamp::now();
        let repeat = {
            let mut published = self.published.lock();
            published.retain(|_, p| p.last + REMEMBER > now);
            published.get_mut(&key).map(|p| {
                p.count += 1;
                p.last = now;
                (p.namespace.clone(), p.name.clone(), p.count)
            })
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Some((namespace, name, count)) = repeat {
            let series = serde_json::json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            let patched = Api::<Event>::namespaced(self.client.clone(), &namespace)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await;
            match patched {
                Ok(_) => return Ok(()),
                // Deleted meanwhile (Events expire): publish it anew.
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    self.published.lock().remove(&key);
                }
                Err(error) => return Err(error),
            }
        }
        let name = format!("{}.{:x}", object::name(regarding), now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.as_str().into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(truncate_note(note)),
            regarding: Some(regarding_ref),
            related: related.cloned(),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        api.create(&PostParams::default(), &event).await?;
        self.published.lock().insert(
            key,
            Published {
                namespace,
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }
}

/// A reference to an object, as Events carry it.
pub fn reference(about: &Value) -> ObjectReference {
    ObjectReference {
        api_version: Some(object::api_version(about).to_string()),
        kind: Some(object::kind(about).to_string()),
        name: Some(object::name(about).to_string()),
        namespace: object::namespace(about).map(str::to_string),
        uid: object::uid(about).map(str::to_string),
        ..ObjectReference::default()
    }
}

/// Event notes are limited to 1 kB by the API.
fn truncate_note(note: &str) -> String {
    const LIMIT: usize = 1000;
    if note.len() <= LIMIT {
        return note.to_string();
    }
    let mut cut = LIMIT;
    while !note.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &note[..cut])
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = super::truncate_note(&note);
        assert!(cut.len() <= 1000 + '…'.len_utf8());
        assert!(cut.ends_with('…'));
        assert_eq!(super::truncate_note("short"), "short");
    }
}
