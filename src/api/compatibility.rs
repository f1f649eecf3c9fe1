//! What a controller moved from another tool keeps of that tool's behaviour, so the alerts and
//! scripts written against it go on working while its hooks are rewritten.

use crate::reasons;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.compatibility`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Compatibility {
    /// The reasons of the Warning Events published when a sync fails: `Metascript` (default)
    /// names why (`HookFailed`, `InvalidResponse`, `ApplyFailed`, …); `Metacontroller` says
    /// `SyncError` for every one, as Metacontroller does, with metascript's reason at the start
    /// of the message. Conditions and metrics keep metascript's reasons either way.
    #[serde(default)]
    pub event_reasons: EventReasons,
}

/// Whose names sync failure Events use.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum EventReasons {
    #[default]
    Metascript,
    Metacontroller,
}

impl EventReasons {
    /// The reason and message of the Event about a sync that failed for `reason`.
    pub(crate) fn sync_failure<'a>(self, reason: &'a str, message: &str) -> (&'a str, String) {
        match self {
            EventReasons::Metascript => (reason, message.to_string()),
            EventReasons::Metacontroller => (
                reasons::METACONTROLLER_SYNC_ERROR,
                format!("{reason}: {message}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metacontroller_reasons_keep_metascripts_reason_in_the_message() {
        let (reason, message) =
            EventReasons::Metacontroller.sync_failure(reasons::HOOK_FAILED, "webhook said 401");
        assert_eq!(reason, "SyncError");
        assert_eq!(message, "HookFailed: webhook said 401");
        let (reason, message) =
            EventReasons::Metascript.sync_failure(reasons::HOOK_FAILED, "webhook said 401");
        assert_eq!(
            (reason, message.as_str()),
            ("HookFailed", "webhook said 401")
        );
    }

    #[test]
    fn the_default_is_metascripts_reasons() {
        let compatibility: Compatibility = serde_json::from_str("{}").unwrap();
        assert_eq!(compatibility.event_reasons, EventReasons::Metascript);
    }
}
