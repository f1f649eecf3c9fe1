//! DecoratorController: for every object matching its resource rules, a `sync` hook returns
//! attachments, labels, annotations and status; `finalize` runs on deletion, `customize` selects
//! related objects. Its API type and hooks (`api`), its pure planner (`plan`), and what it adds
//! to the one-object sync it shares with CompositeController ([`crate::kinds::one_object`]):
//! one target's hooks and plan (`sync`), its routing in the operator (`runtime`).

mod api;
mod plan;
#[cfg(test)]
mod plan_tests;
mod runtime;
mod sync;

pub use crate::plan::lifecycle::Phase;
pub use crate::plan::related::RelatedRule;
pub use crate::runtime::sync::finalizers::CLEANUP_FINALIZER;
pub use api::{
    CUSTOMIZE, DecoratorController, DecoratorControllerSpec, DecoratorHooks, FINALIZE, KIND,
    ResourceRule, SYNC,
};
pub use plan::{Decorator, Observed};
pub(crate) use runtime::DecoratorKind;

/// Label naming the DecoratorController that attached an object.
pub const DECORATOR_LABEL: &str = "metascript.dev/decorator";
