//! The shared vocabulary of the `metascript.dev/v1alpha1` API: how a hook names its code, the
//! rules every kind's resources follow, the status every controller reports, test cases, and
//! what a kind of controller is ([`KindInfo`], [`HookKind`], [`ControllerSpec`]). Each kind's
//! own custom resource is in its folder under `crate::kinds`.

mod budget;
mod compatibility;
mod event;
pub(crate) mod hook;
mod kind;
mod rollout;
mod rules;
mod status;
mod test_case;

pub use budget::Budget;
pub(crate) use compatibility::{Compatibility, EventReasons};
pub(crate) use event::{EventType, ScriptEvent};
pub use hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, ConfigMapKeyRef, CredentialSource, Credentials,
    EndpointConfig, Etag, Hook, HookVersion, KeyRef, Language, Library, Limits, ResponseMode,
    ScriptSpec, Webhook,
};
#[cfg(test)]
pub(crate) use kind::TEST_KIND;
pub(crate) use kind::{
    CommonSpec, ControllerObject, ControllerSpec, Field, HookContract, HookKind, KindInfo,
    KindName, Selection, Selects, controller_spec, fields, on_delete_by_default, set_hooks,
};
pub use rollout::{
    ABORT_ANNOTATION, BRAKE_ANNOTATIONS, CanaryCounts, CanaryStep, HaltedRevision,
    PROMOTE_ANNOTATION, Rollout, RolloutStatus, RolloutStrategy, ShadowReport, UNDO_ANNOTATION,
};
pub use rules::{AdoptPolicy, ChildRule, ResourceRef, UpdateMethod, UpdateStrategy};
pub(crate) use status::{Condition, ControllerStatus, ScriptStatus, UsageFigures, UsageStatus};
pub(crate) use test_case::InlineTest;

/// The API group of every kind; also the prefix of the labels, annotations and finalizers the
/// operator writes.
pub(crate) const GROUP: &str = "metascript.dev";

/// On a controller, target or parent: a new value makes the operator sync it (a controller:
/// everything it acts on) at once, whatever a resync would skip and whatever backoff it is in.
/// Any value works; a timestamp (`kubectl annotate … metascript.dev/sync-requested-at="$(date
/// -Is)" --overwrite`) says when it was asked.
pub const SYNC_REQUESTED_ANNOTATION: &str = "metascript.dev/sync-requested-at";

/// The finalizer the operator keeps on a controller object with a finalize hook, so that
/// deleting the controller first releases every object it holds a finalizer on (see
/// `crate::runtime::sync::finalizers`). It stays when the hook is removed: objects may still
/// hold the controller's finalizer.
pub const CLEANUP_FINALIZER: &str = "metascript.dev/release-targets";

/// The apiVersion of every kind.
pub(crate) const API_VERSION: &str = "metascript.dev/v1alpha1";

/// The namespace a controller's `serviceAccountName` used to default to. It is no longer a
/// default (an account must name its namespace); releasing the finalizers of a controller saved
/// before that still goes as the account it ran as.
pub(crate) const LEGACY_SERVICE_ACCOUNT_NAMESPACE: &str = "metascript-system";

/// The ServiceAccount a controller's writes impersonate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
}

/// Why a spec's `serviceAccountName` and `serviceAccountNamespace` name no account.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAccount {
    #[error(
        "spec.serviceAccountNamespace is required with spec.serviceAccountName ({name:?}): \
         an account is named with its namespace, as the one who may use it is granted there \
         (there is no default namespace)"
    )]
    NoNamespace { name: String },
    #[error(
        "spec.serviceAccountName {name:?} is a name, not NAMESPACE/NAME: set \
         serviceAccountName: {account:?} and serviceAccountNamespace: {namespace:?}"
    )]
    Qualified {
        name: String,
        namespace: String,
        account: String,
    },
    #[error("spec.serviceAccountNamespace {namespace:?} is set without spec.serviceAccountName")]
    NoName { namespace: String },
}

impl ServiceAccountRef {
    /// From a spec's `serviceAccountName` and `serviceAccountNamespace`: none when neither is
    /// set (the controller writes as the operator, where that is allowed).
    pub(crate) fn from_spec(
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Option<ServiceAccountRef>, InvalidAccount> {
        let name = name.filter(|n| !n.is_empty());
        let namespace = namespace.filter(|n| !n.is_empty());
        match (name, namespace) {
            (None, None) => Ok(None),
            (None, Some(namespace)) => Err(InvalidAccount::NoName {
                namespace: namespace.into(),
            }),
            (Some(name), _) if name.contains('/') => {
                let (namespace, account) = name.split_once('/').unwrap_or_default();
                Err(InvalidAccount::Qualified {
                    name: name.into(),
                    namespace: namespace.into(),
                    account: account.into(),
                })
            }
            (Some(name), None) => Err(InvalidAccount::NoNamespace { name: name.into() }),
            (Some(name), Some(namespace)) => Ok(Some(ServiceAccountRef {
                name: name.into(),
                namespace: namespace.into(),
            })),
        }
    }

    /// The account a controller saved before the namespace was required ran as: its
    /// finalizers are released as that account.
    pub(crate) fn as_it_ran(
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Option<ServiceAccountRef> {
        Some(ServiceAccountRef {
            name: name.filter(|n| !n.is_empty())?.to_string(),
            namespace: namespace
                .filter(|n| !n.is_empty())
                .unwrap_or(LEGACY_SERVICE_ACCOUNT_NAMESPACE)
                .to_string(),
        })
    }

    /// The user name the API server gives the account, which impersonation names.
    pub(crate) fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}
