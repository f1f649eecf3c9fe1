//! Every reason the operator gives, in Events and in a controller's conditions: one list, so
//! alerts and docs (`docs/operations.md`) can rely on the names. Script Events carry reasons of
//! their scripts' own.

// Loading a controller.
/// The controller object cannot be read as its kind.
pub(crate) const INVALID_SPEC: &str = "InvalidSpec";
/// A type it names is not served (a CRD not installed yet, a typo).
pub(crate) const RESOLVE_FAILED: &str = "ResolveFailed";
/// A type it names cannot be watched.
pub(crate) const WATCH_FAILED: &str = "WatchFailed";
/// A hook or library does not load (syntax, a missing ConfigMap, a bad webhook field).
pub(crate) const SCRIPT_ERROR: &str = "ScriptError";
/// The operator requires `serviceAccountName` and the controller has none.
pub(crate) const SERVICE_ACCOUNT_REQUIRED: &str = "ServiceAccountRequired";
/// The controller names an account no controller may run as (the operator's own).
pub(crate) const SERVICE_ACCOUNT_REFUSED: &str = "ServiceAccountRefused";
/// No client can be made that impersonates the controller's ServiceAccount.
pub(crate) const IMPERSONATION_FAILED: &str = "ImpersonationFailed";
/// `spec.reads` names a type the controller's ServiceAccount may not list.
pub(crate) const READ_FORBIDDEN: &str = "ReadForbidden";
/// Asking the API server what the ServiceAccount may read failed.
pub(crate) const READ_CHECK_FAILED: &str = "ReadCheckFailed";
/// The Secrets or ConfigMaps webhook credentials name could not be read: the API server did not
/// answer (a missing or forbidden one is a `ScriptError` naming it).
pub(crate) const CREDENTIALS_READ_FAILED: &str = "CredentialsReadFailed";
/// A new revision's `spec.tests` failed: it does not serve (the previous one keeps serving).
pub(crate) const TESTS_FAILED: &str = "TestsFailed";
/// The Event about a controller that did not load.
pub(crate) const LOAD_FAILED: &str = "LoadFailed";

// Syncing an object.
/// A hook's response cannot be used; nothing of it is applied.
pub(crate) const INVALID_RESPONSE: &str = "InvalidResponse";
/// An object the hook returned breaks its type's schema or CEL rules; nothing of the sync is
/// written.
pub(crate) const SCHEMA_VIOLATION: &str = "SchemaViolation";
/// A hook failed (a script error or budget, a webhook that did not answer).
pub(crate) const HOOK_FAILED: &str = "HookFailed";
/// A webhook hook's destination is not one `--webhook-allow` allows: nothing was sent.
pub(crate) const WEBHOOK_NOT_ALLOWED: &str = "WebhookNotAllowed";
/// A hook's source cannot be read now (a ConfigMap gone, an empty file).
pub(crate) const SCRIPT_UNAVAILABLE: &str = "ScriptUnavailable";
/// A parent's `spec.selector` cannot be read; its children are left alone.
pub(crate) const INVALID_SELECTOR: &str = "InvalidSelector";
/// A watched object cannot be decoded (it nests too deep): passed over, its type is not.
pub(crate) const UNDECODABLE: &str = "Undecodable";
/// A MapController parent selects more inputs than one parent may have pairs.
pub(crate) const TOO_MANY_PAIRS: &str = "TooManyPairs";
/// A child a hook returned has the name of an object the parent may not take over.
pub(crate) const ADOPTION_REFUSED: &str = "AdoptionRefused";
/// A work item panicked (a bug in the operator): retried with backoff, the worker goes on.
pub(crate) const PANICKED: &str = "Panicked";
/// The script work of a sync could not run at all.
pub(crate) const SYNC_FAILED: &str = "SyncFailed";
/// A write was refused by RBAC (the controller's ServiceAccount may not make it).
pub(crate) const FORBIDDEN: &str = "Forbidden";
/// A write failed otherwise.
pub(crate) const APPLY_FAILED: &str = "ApplyFailed";
/// A create was refused because its namespace is being deleted: retried with backoff, without
/// a Warning Event (nobody needs to act, and none could be published in that namespace).
pub(crate) const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
/// A write was not sent: this replica stopped being the one that may write the object while its
/// sync ran (sharded, the object moved to another replica, or this replica's lease lapsed; or
/// it lost the leader election). Whoever may write it now syncs it.
pub(crate) const HANDED_OVER: &str = "HandedOver";

// Rolling out a revision (`spec.rollout`): Events on the controller, its `Rollout` condition.
/// A new revision became the candidate beside the serving one.
pub(crate) const ROLLOUT_STARTED: &str = "RolloutStarted";
/// A canary's next step started: the candidate serves a larger share.
pub(crate) const CANARY_STEP: &str = "CanaryStep";
/// The candidate serves every object now (its last step ended, or it was promoted).
pub(crate) const PROMOTED: &str = "Promoted";
/// The candidate failed on more work items than `maxErrors` allows: the serving revision serves
/// them again.
pub(crate) const ROLLED_BACK: &str = "RolledBack";
/// The candidate was aborted (`metascript.dev/abort`).
pub(crate) const ABORTED: &str = "Aborted";
/// The newest revision was undone (`metascript.dev/undo`): the one before it serves again.
pub(crate) const UNDONE: &str = "Undone";
/// `metascript.dev/undo` could not be carried out: no snapshot of the revision before.
pub(crate) const UNDO_FAILED: &str = "UndoFailed";
/// Condition: the serving revision's snapshot cannot be saved (its namespace, RBAC).
pub(crate) const SNAPSHOT_NOT_SAVED: &str = "SnapshotNotSaved";
/// Condition: a shadow candidate is evaluated without writing.
pub(crate) const SHADOWING: &str = "Shadowing";
/// Condition: a canary candidate serves a share of the work items.
pub(crate) const CANARY_IN_PROGRESS: &str = "CanaryInProgress";

// Metacontroller's names, for controllers that keep them (`spec.compatibility`).
/// Any sync that failed, under `eventReasons: Metacontroller`.
pub(crate) const METACONTROLLER_SYNC_ERROR: &str = "SyncError";

#[cfg(test)]
/// Every reason above, for docs and tests.
pub(crate) const ALL: &[&str] = &[
    INVALID_SPEC,
    RESOLVE_FAILED,
    WATCH_FAILED,
    SCRIPT_ERROR,
    SERVICE_ACCOUNT_REQUIRED,
    SERVICE_ACCOUNT_REFUSED,
    TESTS_FAILED,
    IMPERSONATION_FAILED,
    READ_FORBIDDEN,
    READ_CHECK_FAILED,
    CREDENTIALS_READ_FAILED,
    LOAD_FAILED,
    INVALID_RESPONSE,
    SCHEMA_VIOLATION,
    HOOK_FAILED,
    WEBHOOK_NOT_ALLOWED,
    SCRIPT_UNAVAILABLE,
    INVALID_SELECTOR,
    TOO_MANY_PAIRS,
    ADOPTION_REFUSED,
    UNDECODABLE,
    SYNC_FAILED,
    PANICKED,
    FORBIDDEN,
    APPLY_FAILED,
    NAMESPACE_TERMINATING,
    HANDED_OVER,
    ROLLOUT_STARTED,
    CANARY_STEP,
    PROMOTED,
    ROLLED_BACK,
    ABORTED,
    UNDONE,
    UNDO_FAILED,
    SNAPSHOT_NOT_SAVED,
    SHADOWING,
    CANARY_IN_PROGRESS,
    METACONTROLLER_SYNC_ERROR,
];

#[cfg(test)]
mod tests {
    /// Users alert on these: each is in the operations guide.
    #[test]
    fn every_reason_is_documented() {
        let guide = include_str!("../docs/operations.md");
        for reason in super::ALL {
            assert!(
                guide.contains(&format!("`{reason}`")),
                "docs/operations.md does not mention the reason `{reason}`"
            );
        }
    }
}
