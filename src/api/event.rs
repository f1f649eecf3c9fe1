//! A Kubernetes Event a script asks for with `event(type, reason, message)`, as test cases state
//! them (`expectEvents`) and the operator publishes them.

use serde::{Deserialize, Serialize};

/// The API server's limit on `reason`.
const MAX_REASON: usize = 128;

/// Messages are cut to this many characters, well inside the API server's 1 kB `note`.
pub(crate) const MAX_MESSAGE: usize = 1024;

/// The two types of Event Kubernetes knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, schemars::JsonSchema)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
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
pub(crate) enum InvalidEvent {
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
    pub(crate) fn new(
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<ScriptEvent, InvalidEvent> {
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
}
