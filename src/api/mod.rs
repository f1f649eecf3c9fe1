//! Types of the `metascript.dev/v1alpha1` API.

mod crds;
mod decorator;
mod hook;
mod map;
mod rules;
mod status;
mod test_case;

pub use crds::{all_crds, crds_yaml, json_schema, json_schema_string};
pub use decorator::{DecoratorController, DecoratorControllerSpec, DecoratorHooks};
pub use hook::{
    CaBundle, ConfigMapKeyRef, Hook, HookKind, Language, Library, Limits, ResponseMode, ScriptSpec,
    ServiceReference, Webhook,
};
pub use map::{MapController, MapControllerSpec, MapHooks};
pub use rules::{ChildRule, ResourceRef, ResourceRule, UpdateMethod, UpdateStrategy};
pub use status::{Condition, ControllerStatus, ScriptStatus};
pub use test_case::InlineTest;

/// The API group of both kinds; also the prefix of the labels, annotations and finalizers the
/// operator writes.
pub const GROUP: &str = "metascript.dev";

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
