//! Why a sync planned nothing: a hook failed, a type a hook named does not resolve or cannot
//! be watched, or a parent's selector cannot be read. Nothing is applied or deleted for a sync that failed.

use crate::hooks::{HookError, WebhookFailure};
use crate::reasons;
use crate::resources::ResolveError;
use crate::script::{LimitKind, ScriptErrorKind};
use crate::selector::SelectorError;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Hook(#[from] HookError),
    #[error("{controller}: related resource: {source}")]
    Resolve {
        controller: String,
        #[source]
        source: ResolveError,
    },
    /// A type a hook named cannot be watched (usually RBAC), so its objects cannot be read.
    #[error("{controller}: related resource: {message}")]
    Watch { controller: String, message: String },
    #[error(transparent)]
    Selector(#[from] InvalidSelector),
    /// A map parent selects more inputs than one parent may fan out into: nothing of it is
    /// mapped or removed until the selection shrinks.
    #[error(
        "parent {parent}: spec.selector selects {selected} inputs, more than the {max} pairs one \
         parent may have; nothing was mapped or removed: narrow the selector, or split the parent"
    )]
    TooManyPairs {
        parent: String,
        selected: usize,
        max: usize,
    },
    /// A child the hook returned has the name of an object the parent may not take over.
    #[error("{controller}: {refusal}")]
    Takeover {
        controller: String,
        refusal: Box<super::adoption::TakeoverRefused>,
    },
    /// An object the hook returned breaks its type's schema: nothing of the plan is written.
    #[error("nothing of this sync was written: {0}")]
    InvalidOutput(#[from] super::outputs::InvalidOutputs),
    /// The work would hand a hook what the controller's ServiceAccount may not read.
    #[error("{controller}: {refusal}")]
    Refused {
        controller: String,
        refusal: crate::reads::Refusal,
    },
}

impl SyncError {
    /// A short PascalCase reason, as used for Kubernetes Events.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            SyncError::Hook(HookError::Response(_)) => reasons::INVALID_RESPONSE,
            SyncError::Hook(HookError::Webhook(error))
                if matches!(error.failure, WebhookFailure::NotAllowed(_)) =>
            {
                reasons::WEBHOOK_NOT_ALLOWED
            }
            SyncError::Hook(HookError::Script(_) | HookError::Webhook(_)) => reasons::HOOK_FAILED,
            SyncError::Hook(HookError::Refused { refusal, .. })
            | SyncError::Refused { refusal, .. } => refusal.reason(),
            SyncError::Hook(HookError::Source(_) | HookError::Missing { .. }) => {
                reasons::SCRIPT_UNAVAILABLE
            }
            SyncError::Resolve { .. } => reasons::RESOLVE_FAILED,
            SyncError::Watch { .. } => reasons::WATCH_FAILED,
            SyncError::Selector(_) => reasons::INVALID_SELECTOR,
            SyncError::TooManyPairs { .. } => reasons::TOO_MANY_PAIRS,
            SyncError::Takeover { .. } => reasons::ADOPTION_REFUSED,
            SyncError::InvalidOutput(_) => reasons::SCHEMA_VIOLATION,
        }
    }

    /// The message and the start of what a failed webhook answered, for the faces an author
    /// runs on their own machine ([`HookError::with_body`]).
    pub(crate) fn with_body(&self) -> String {
        match self {
            SyncError::Hook(error) => error.with_body(),
            error => error.to_string(),
        }
    }

    /// The read refused, when that is why the work failed.
    pub(crate) fn refusal(&self) -> Option<&crate::reads::Refusal> {
        match self {
            SyncError::Hook(HookError::Refused { refusal, .. })
            | SyncError::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }

    /// Whether a hook ran out of time: a script's time budget, or a webhook's timeout.
    pub(crate) fn timed_out(&self) -> bool {
        match self {
            SyncError::Hook(HookError::Script(error)) => matches!(
                error.kind,
                ScriptErrorKind::Limit {
                    limit: LimitKind::Timeout
                }
            ),
            SyncError::Hook(HookError::Webhook(error)) => {
                matches!(error.failure, WebhookFailure::Timeout { .. })
            }
            _ => false,
        }
    }
}

/// A parent whose `spec.selector` cannot be read. What it selects or owns is left alone: an
/// unreadable selector must not look like "selects nothing", which would let go of everything.
#[derive(Debug, thiserror::Error)]
#[error("parent {parent}: spec.selector is invalid: {source}")]
pub struct InvalidSelector {
    pub parent: String,
    #[source]
    pub source: SelectorError,
}
