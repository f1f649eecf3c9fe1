//! CompositeController: a parent resource owns children through controller references and its
//! selector; the `sync` hook returns the parent's status and its desired children, which roll
//! out by each child type's update strategy; `finalize` runs on deletion, `customize` selects
//! related objects. Its API type and hooks (`api`), its pure planner (`plan`) and rolling updates
//! (`rolling`), and what it adds to the one-object sync it shares with DecoratorController
//! ([`crate::kinds::one_object`]): one parent's claims, hooks and plan (`sync`), its routing and
//! write expectations in the operator (`runtime`).

mod api;
mod plan;
#[cfg(test)]
mod plan_tests;
mod rolling;
mod runtime;
mod sync;

pub use api::{
    CUSTOMIZE, CompositeChildRule, CompositeController, CompositeControllerSpec, CompositeHooks,
    CompositeUpdateMethod, FINALIZE, KIND, ParentResourceRule, SYNC,
};
pub use plan::{CONTROLLER_UID_LABEL, Composite, Observed};
pub use rolling::{REVISION_LABEL, UPDATED};
pub(crate) use runtime::CompositeKind;
