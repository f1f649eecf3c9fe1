//! What a call runs in besides its script and request: who calls (controller, hook, limits) and
//! the per-call services its helpers use (clock, log, reads, Events, purity, the secrets to
//! scrub). The runtime builds
//! one [`CallScope`] per work item and every hook call of the item shares it.

use super::{EventSink, LogSink, Purity};
use crate::api::{HookKind, Limits};
use crate::reads::{ReadAccess, Secrets};

/// The services the hook calls of one work item share (each is cheap to clone: shared
/// buffers). `render`, `explain` and the test harness fill in what they provide.
#[derive(Clone, Debug, Default)]
pub struct CallScope {
    /// A fixed `now()` (tests, replayed recordings); the wall clock when `None`.
    pub clock: Option<jiff::Timestamp>,
    /// Collects the scripts' log lines (test harness); they always go to tracing as well.
    pub logs: Option<LogSink>,
    /// What `get` and `list` read, and where they record what they read; `None`: they fail
    /// with a clear message.
    pub reads: Option<ReadAccess>,
    /// Collects the Events the scripts ask for (`event`); whoever built the scope decides
    /// whether to publish them.
    pub events: EventSink,
    /// Learns whether any call used the clock, randomness or a webhook.
    pub purity: Purity,
    /// The values of the Secrets the calls were handed (requests, reads), scrubbed from what
    /// they produce besides their responses: log lines and Events here, errors, recordings and
    /// `explain` where those are made.
    pub secrets: Secrets,
}

impl CallScope {
    /// A scope whose `get` and `list` read through `reads`.
    pub(crate) fn reading(reads: ReadAccess) -> CallScope {
        CallScope {
            reads: Some(reads),
            ..CallScope::default()
        }
    }
}

/// One call: whose it is, its limits and its scope.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub controller: String,
    pub hook: HookKind,
    /// The hook's limits; unset fields take the defaults (`DEFAULT_*`).
    pub limits: Limits,
    pub scope: CallScope,
}

impl CallContext {
    pub fn new(controller: impl Into<String>, hook: HookKind) -> CallContext {
        CallContext {
            controller: controller.into(),
            hook,
            limits: Limits::default(),
            scope: CallScope::default(),
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> CallContext {
        self.limits = limits;
        self
    }

    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: jiff::Timestamp) -> CallContext {
        self.scope.clock = Some(clock);
        self
    }

    #[cfg(test)]
    pub(crate) fn with_logs(mut self, logs: LogSink) -> CallContext {
        self.scope.logs = Some(logs);
        self
    }
}
