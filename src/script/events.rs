//! Kubernetes Events a script asks for with `event(type, reason, message)`. A call only collects
//! them; what the caller does with them differs: the operator publishes them on the object the
//! work item is about, `metascript test` compares them with `expectEvents`.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// The most Events one work item's hooks may ask for in one sync: a script looping over its
/// children must not flood the API server (or `kubectl describe`). Further ones are dropped.
pub const MAX_EVENTS_PER_SYNC: usize = 10;

/// The API server's limit on `reason`.
const MAX_REASON: usize = 128;

/// Messages are cut to this many characters, well inside the API server's 1 kB `note`.
pub const MAX_MESSAGE: usize = 1024;

/// The two types of Event Kubernetes knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One Event a script asked for, validated.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptEvent {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: EventType,
    /// A CamelCase word, e.g. `NoTeam`.
    pub reason: String,
    /// What happened (at most 1024 characters).
    pub message: String,
}

/// Why `event` refused its arguments; the helper prefixes its name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidEvent {
    #[error("the type must be \"Normal\" or \"Warning\", got {0:?}")]
    Type(String),
    #[error(
        "the reason must be 1 to {MAX_REASON} letters or digits starting with an uppercase \
         letter (CamelCase, e.g. \"BackendMissing\"), got {0:?}"
    )]
    Reason(String),
}

impl ScriptEvent {
    /// Validates `type` and `reason`, and cuts a long `message` (on a character boundary, so
    /// the Event stays valid UTF-8) rather than failing the call over it.
    pub fn new(type_: &str, reason: &str, message: &str) -> Result<ScriptEvent, InvalidEvent> {
        let type_ = match type_ {
            "Normal" => EventType::Normal,
            "Warning" => EventType::Warning,
            other => return Err(InvalidEvent::Type(other.to_string())),
        };
        // The API server accepts more, but a CamelCase word is what `kubectl describe` users
        // expect in the Reason column, and what alerts can match on.
        let camel = reason.len() <= MAX_REASON
            && reason.starts_with(|c: char| c.is_ascii_uppercase())
            && reason.chars().all(|c| c.is_ascii_alphanumeric());
        if !camel {
            return Err(InvalidEvent::Reason(reason.to_string()));
        }
        let message = match message.char_indices().nth(MAX_MESSAGE) {
            Some((cut, _)) => message[..cut].to_string(),
            None => message.to_string(),
        };
        Ok(ScriptEvent {
            type_,
            reason: reason.to_string(),
            message,
        })
    }
}

/// Collects the Events of the calls it is passed to; cheap to clone (shared buffer).
#[derive(Clone, Debug, Default)]
pub struct EventSink(Arc<Mutex<Collected>>);

#[derive(Debug, Default)]
struct Collected {
    events: Vec<ScriptEvent>,
    dropped: usize,
}

impl EventSink {
    pub fn new() -> EventSink {
        EventSink::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collected> {
        // A poisoned buffer only means another call panicked mid-push; the events are valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an Event, or drops it when the sync already has [`MAX_EVENTS_PER_SYNC`]; the
    /// first drop is logged (once, so the log is not flooded in its turn).
    pub fn push(&self, event: ScriptEvent, controller: &str) {
        let mut collected = self.lock();
        if collected.events.len() < MAX_EVENTS_PER_SYNC {
            collected.events.push(event);
            return;
        }
        if collected.dropped == 0 {
            tracing::warn!(
                controller,
                reason = %event.reason,
                limit = MAX_EVENTS_PER_SYNC,
                "a script asked for more Events than one sync may publish; dropping the rest"
            );
        }
        collected.dropped += 1;
    }

    /// A copy of every Event collected so far.
    pub fn events(&self) -> Vec<ScriptEvent> {
        self.lock().events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_reason_are_checked() {
        assert_eq!(
            ScriptEvent::new("Info", "Ready", "m"),
            Err(InvalidEvent::Type("Info".into()))
        );
        for reason in ["", "lowercase", "Has Space", "With-Dash", &"A".repeat(129)] {
            assert_eq!(
                ScriptEvent::new("Normal", reason, "m"),
                Err(InvalidEvent::Reason(reason.into())),
                "{reason:?}"
            );
        }
        let ok = ScriptEvent::new("Warning", "BackendMissing2", "no backend").unwrap();
        assert_eq!(
            (ok.type_, ok.message.as_str()),
            (EventType::Warning, "no backend")
        );
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let event = ScriptEvent::new("Normal", "Long", &"é".repeat(2000)).unwrap();
        assert_eq!(event.message.chars().count(), MAX_MESSAGE);
    }

    #[test]
    fn a_sync_keeps_at_most_the_limit() {
        let sink = EventSink::new();
        for i in 0..MAX_EVENTS_PER_SYNC + 3 {
            sink.push(
                ScriptEvent::new("Normal", "Step", &i.to_string()).unwrap(),
                "c",
            );
        }
        let kept = sink.events();
        assert_eq!(kept.len(), MAX_EVENTS_PER_SYNC);
        assert_eq!(kept.last().unwrap().message, "9");
    }
}
