//! Why something went wrong, as people read it (an Event's or a condition's reason and its
//! message), and what the runtime does about it besides telling them.

use crate::reads::{ReadScope, Secrets};
use std::borrow::Cow;

/// Why a controller did not load, a work item failed or a condition is False: a PascalCase
/// reason (one of [`crate::reasons`], or what a status recorded), a message for people, and
/// the cause the runtime acts on, so nothing has to read the reason back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: Cow<'static, str>,
    pub message: String,
    pub cause: Cause,
}

/// What the runtime does about a problem besides reporting it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cause {
    /// Nothing more: it is retried with backoff.
    #[default]
    Reported,
    /// A hook ran out of time: its controller's flow of work is throttled.
    TimedOut,
    /// A create went to a namespace being deleted: retried with backoff like any failure, but
    /// said in the object's condition and the controller's metrics only (the log at debug),
    /// as nobody needs to act.
    NamespaceTerminating,
    /// The controller's account may not make a read (or it could not be checked): an RBAC
    /// change may heal it. The read, when one is known (a load checks several and keeps none,
    /// so any RBAC change retries it).
    RefusedRead(Option<Box<ReadScope>>),
}

impl Problem {
    pub fn new(reason: impl Into<Cow<'static, str>>, message: impl ToString) -> Problem {
        Problem {
            reason: reason.into(),
            message: message.to_string(),
            cause: Cause::Reported,
        }
    }

    /// The problem, caused by a read refused to the controller's account (`read`, when known).
    pub fn refusing(mut self, read: Option<&ReadScope>) -> Problem {
        self.cause = Cause::RefusedRead(read.cloned().map(Box::new));
        self
    }

    /// Whether the controller's account was refused a read.
    pub fn is_refused_read(&self) -> bool {
        matches!(self.cause, Cause::RefusedRead(_))
    }

    /// The read refused, when that is why and it is known.
    pub fn refused_read(&self) -> Option<&ReadScope> {
        match &self.cause {
            Cause::RefusedRead(read) => read.as_deref(),
            _ => None,
        }
    }

    /// Whether the write it failed on went to a namespace being deleted.
    pub fn is_namespace_terminating(&self) -> bool {
        self.cause == Cause::NamespaceTerminating
    }

    /// Whether a hook ran out of time.
    pub fn timed_out(&self) -> bool {
        self.cause == Cause::TimedOut
    }

    /// The problem with the values of the Secrets its work item's hooks were handed scrubbed
    /// from its message, which goes to a Warning Event, the log and the controller's status.
    /// Every kind applies it to whatever ends a work item that ran hooks: their errors, and
    /// the API server's answers to the writes they asked for.
    pub fn scrubbed(mut self, secrets: &Secrets) -> Problem {
        if let Cow::Owned(scrubbed) = secrets.scrub(&self.message) {
            self.message = scrubbed;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_read_is_known_by_its_cause_not_its_reason() {
        let plain = Problem::new(crate::reasons::READ_FORBIDDEN, "may not list pods");
        assert!(!plain.is_refused_read(), "the reason alone says nothing");
        let load = plain.clone().refusing(None);
        assert!(load.is_refused_read());
        assert_eq!(load.refused_read(), None);
        assert_eq!(load.reason, crate::reasons::READ_FORBIDDEN);
        assert!(!Problem::new(crate::reasons::HOOK_FAILED, "x").timed_out());
    }
}
