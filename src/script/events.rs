//! Collecting the Kubernetes Events a script asks for with `event(type, reason, message)`
//! ([`ScriptEvent`]). A call only collects them; what the caller does with them differs: the operator publishes them on the object the
//! work item is about, `metascript test` compares them with `expectEvents`.

use crate::api::ScriptEvent;
use std::sync::{Arc, Mutex};

/// The most Events one work item's hooks may ask for in one sync: a script looping over its
/// children must not flood the API server (or `kubectl describe`). Further ones are dropped.
pub(crate) const MAX_EVENTS_PER_SYNC: usize = 10;

/// Collects the Events of the calls it is passed to; cheap to clone (shared buffer).
#[derive(Clone, Debug, Default)]
pub struct EventSink(Arc<Mutex<Collected>>);

#[derive(Debug, Default)]
struct Collected {
    events: Vec<ScriptEvent>,
    dropped: usize,
}

impl EventSink {
    #[cfg(test)]
    pub(crate) fn new() -> EventSink {
        EventSink::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Collected> {
        // A poisoned buffer only means another call panicked mid-push; the events are valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an Event, or drops it when the sync already has [`MAX_EVENTS_PER_SYNC`]; the
    /// first drop is logged (once, so the log is not flooded in its turn).
    pub(crate) fn push(&self, event: ScriptEvent, controller: &str) {
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
    pub(crate) fn events(&self) -> Vec<ScriptEvent> {
        self.lock().events.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
