//! Types of the `metascript.dev/v1alpha1` API.

mod crds;
mod decorator;
mod hook;
mod map;
mod rules;
mod status;

pub use crds::{all_crds, crds_yaml};
pub use decorator::{DecoratorController, DecoratorControllerSpec, DecoratorHooks};
pub use hook::{ConfigMapKeyRef, Hook, HookKind, Language, Limits, ScriptSpec, Webhook};
pub use map::{MapController, MapControllerSpec, MapHooks};
pub use rules::{ChildRule, ResourceRef, ResourceRule, UpdateMethod, UpdateStrategy};
pub use status::{Condition, ControllerStatus, ScriptStatus};

/// The API group of both kinds; also the prefix of the labels, annotations and finalizers the
/// operator writes.
pub const GROUP: &str = "metascript.dev";
