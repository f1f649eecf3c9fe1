//! The shared vocabulary of the `metascript.dev/v1alpha1` API: how a hook names its code, the
//! rules every kind's resources follow, the status every controller reports, test cases, and
//! what a kind of controller is ([`KindInfo`], [`HookKind`], [`ControllerSpec`]). Each kind's
//! own custom resource is in its folder under `crate::kinds`.

mod compatibility;
mod event;
mod hook;
mod kind;
mod rollout;
mod rules;
mod status;
mod test_case;

pub use compatibility::{Compatibility, EventReasons};
pub use event::{EventType, InvalidEvent, MAX_MESSAGE, ScriptEvent};
pub use hook::{
    Authorization, BasicAuth, CaBundle, ClientTls, ConfigMapKeyRef, CredentialSource, Credentials,
    EndpointConfig, Etag, Hook, HookVersion, KeyRef, Language, Library, Limits, ResponseMode,
    ScriptSpec, SecretKeyRef, SecretRef, ServiceReference, Webhook,
};
pub use kind::{
    CommonSpec, ControllerObject, ControllerSpec, Field, HookContract, HookKind, KindInfo,
    KindName, fields, on_delete_by_default, set_hooks,
};
pub use rollout::{
    ABORT_ANNOTATION, CanaryCounts, CanaryStep, DEFAULT_STEP_INTERVAL_SECONDS, HaltedRevision,
    PROMOTE_ANNOTATION, Rollout, RolloutStatus, RolloutStrategy, ShadowReport,
};
pub use rules::{ChildRule, ResourceRef, UpdateMethod, UpdateStrategy};
pub use status::{Condition, ControllerStatus, ScriptStatus};
pub use test_case::InlineTest;

/// The API group of every kind; also the prefix of the labels, annotations and finalizers the
/// operator writes.
pub const GROUP: &str = "metascript.dev";

/// On a controller, target or parent: a new value makes the operator sync it (a controller:
/// everything it acts on) at once, whatever a resync would skip and whatever backoff it is in.
/// Any value works; a timestamp (`kubectl annotate … metascript.dev/sync-requested-at="$(date
/// -Is)" --overwrite`) says when it was asked.
pub const SYNC_REQUESTED_ANNOTATION: &str = "metascript.dev/sync-requested-at";

/// The apiVersion of every kind.
pub const API_VERSION: &str = "metascript.dev/v1alpha1";

/// The namespace of a controller's `serviceAccountName` when `serviceAccountNamespace` is unset.
pub const DEFAULT_SERVICE_ACCOUNT_NAMESPACE: &str = "metascript-system";

/// The ServiceAccount a controller's writes impersonate.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccountRef {
    /// From a spec's `serviceAccountName` and `serviceAccountNamespace`.
    pub fn from_spec(name: Option<&str>, namespace: Option<&str>) -> Option<ServiceAccountRef> {
        Some(ServiceAccountRef {
            name: name.filter(|n| !n.is_empty())?.to_string(),
            namespace: namespace
                .filter(|n| !n.is_empty())
                .unwrap_or(DEFAULT_SERVICE_ACCOUNT_NAMESPACE)
                .to_string(),
        })
    }

    /// The user name the API server gives the account, which impersonation names.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}
