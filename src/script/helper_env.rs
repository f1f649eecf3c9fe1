//! What a helper may know about the call it runs in, and the one rule every engine walks a
//! reader's path by. Below both the helper library and the active call, which both use it.

use super::log::{LogLine, LogTarget};
use crate::api::{HookKind, Language};
use serde_json::Value;
use std::borrow::Cow;

/// What a helper may know about the call it runs in.
#[derive(Clone, Debug)]
pub(crate) struct HelperEnv {
    pub controller: String,
    pub hook: HookKind,
    pub language: Language,
    /// Fixed for the whole call (and by the test harness), so every `now()` in a call agrees.
    /// Read through [`HelperEnv::now`], which notes the call as impure.
    pub now: jiff::Timestamp,
    /// The call's services: its log, reads, Events, purity and the secrets to scrub.
    pub scope: super::CallScope,
}

impl HelperEnv {
    /// The call's clock. A call that reads it may answer differently next time with the same
    /// request, so it is noted as impure.
    pub(crate) fn now(&self, source: &'static str) -> jiff::Timestamp {
        self.taint(source);
        self.now
    }

    /// Notes that the call used something besides its request and its tracked reads.
    pub(crate) fn taint(&self, source: &'static str) {
        self.scope.purity.taint(source);
    }

    /// Logs a line, scrubbed of the secrets the call was handed, whoever may read them.
    pub(crate) fn log(&self, mut line: LogLine) {
        let secrets = &self.scope.secrets;
        if let Cow::Owned(message) = secrets.scrub(&line.message) {
            line.message = message;
        }
        line.fields
            .values_mut()
            .for_each(|v| secrets.scrub_value(v));
        LogTarget {
            controller: &self.controller,
            hook: self.hook,
            language: self.language,
            sink: self.scope.logs.as_ref(),
        }
        .emit(line);
    }
}

/// One step of a reader's path, the same in every engine: a map's field named `segment`, or
/// else a list's item at `segment` read as an index (`"0"` is the first item).
pub(crate) fn step<T>(
    segment: &str,
    field: impl FnOnce(&str) -> Option<T>,
    item: impl FnOnce(usize) -> Option<T>,
) -> Option<T> {
    field(segment).or_else(|| segment.parse().ok().and_then(item))
}

/// Follows a reader's path through JSON.
pub(crate) fn walk_json<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |value, segment| {
        step(
            segment,
            |key| value.as_object().and_then(|map| map.get(key)),
            |index| value.as_array().and_then(|items| items.get(index)),
        )
    })
}
