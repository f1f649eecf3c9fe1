//! What DecoratorController and CompositeController share: each syncs one object at a time (a
//! target, a parent) by the same path, written here once: the customize hook, then sync or
//! finalize, then the plan's writes, then a fingerprint of what the sync saw. A kind says what
//! differs through [`OneObject`] (pure planning) and [`ObjectRuntime`] (the operator): what a
//! sync finds before its hooks run, how a hook's answer becomes a plan, which children its
//! requests show and how its events are routed.

mod common;
mod offline;
mod runtime;
mod sync;

pub(crate) use common::{Common, ObjectRequest, Subject};
pub(crate) use runtime::{ObjectKind, ObjectRuntime, RelatedState};
pub(crate) use sync::{Synced, sync};

use crate::api::HookKind;
use crate::hooks::{HookRunner, InvalidResponse};
use crate::plan::children::ChildType;
use crate::plan::lifecycle::Phase;
use crate::plan::{Plan, SyncError};
use crate::reads::ReadScope;
use crate::resources::ResourceType;
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

/// A planner whose hooks are about one object and its children.
pub(crate) trait OneObject: Clone + Send + Sync + 'static {
    const SYNC: HookKind;
    const FINALIZE: HookKind;
    const CUSTOMIZE: HookKind;
    /// What the kind calls the object, as `explain` says it: `target`, `parent`.
    const ROLE: &'static str;
    /// Whether `find` reads the store before the customize hook runs: a parent's selector must
    /// fail the sync before any hook is called, while a target's attachments are read after it,
    /// as late as can be, so the sync hook sees the freshest of them.
    const FIND_BEFORE_CUSTOMIZE: bool;

    /// What a sync reads from the store besides the object and its related objects.
    type Found;

    /// What it holds whatever its objects are called.
    fn common(&self) -> &Common;

    /// Whether an object matches the controller's rules, selectors included. Reads no more
    /// of it than its `apiVersion`, `kind` and `metadata`: a sweep hands it only those
    /// ([`crate::store::Kept::head`]).
    fn selects(&self, object: &Value) -> bool;

    /// Whether the rules select of `resource` exactly what their label selectors match,
    /// nothing else narrowing them (no annotation selector): then every object the
    /// controller's label-selected watches of the type hold is one it acts on, and a sweep
    /// need not read it.
    fn selects_by_labels_alone(&self, resource: &ResourceType) -> bool;

    /// The controller's name.
    fn name(&self) -> &str {
        &self.common().name
    }

    /// The types hooks may read (`spec.reads`).
    fn reads(&self) -> &Arc<[ResourceType]> {
        &self.common().reads
    }

    fn has_customize(&self) -> bool {
        self.common().has_customize
    }

    fn phase(&self, object: &Value) -> Phase {
        self.common().phase(object, self.selects(object))
    }

    /// Whether the controller has work for this version of an object: selected, or holding
    /// its finalizer.
    fn wants(&self, object: &Value) -> bool {
        self.common().wants(object, self.selects(object))
    }

    /// The object's type, when it is of a type the controller syncs.
    fn object_type(&self, object: &Value) -> Option<&ResourceType>;

    fn find(&self, store: &dyn ObjectStore, object: &Value) -> Result<Self::Found, SyncError>;

    /// Calls `hook` (sync or finalize) about the object and turns its answer into a plan;
    /// `related` holds the related objects, grouped as requests show them.
    #[allow(clippy::too_many_arguments)]
    fn plan_hook(
        &self,
        runner: &HookRunner,
        store: &dyn ObjectStore,
        phase: Phase,
        hook: HookKind,
        object: Subject,
        found: &Self::Found,
        related: Value,
    ) -> Result<Plan, SyncError>;

    /// Whether the controller plans from an object's `apiVersion`, `kind`, `metadata` and
    /// `status` alone, its hooks being the only readers of the rest: then a sync reads only
    /// those as a tree and lends its hooks the object's text ([`Subject`]).
    fn plans_from_head(&self) -> bool {
        false
    }

    /// The child types a plan may write.
    fn children(&self) -> &[ChildType];

    /// Labels every child carries, by which an orphan made by this controller is adopted.
    fn claim_labels(&self) -> Vec<(&'static str, &str)>;

    /// What the object's hook requests show of its children, as the cache holds them now;
    /// `None` when that cannot be read.
    fn observed(&self, store: &dyn ObjectStore, object: &Value) -> Option<Vec<Arc<Value>>>;

    /// What its hook requests show besides related objects, as reads its controller's account
    /// must be allowed. Related objects are checked by [`crate::plan::related`].
    fn observed_scopes(&self, resource: &ResourceType, object: &Value) -> Vec<ReadScope>;

    /// Checks a sync or finalize response to `request` as [`OneObject::plan_hook`] would, and
    /// plans it as if the object had no children.
    fn plan_of(
        &self,
        phase: Phase,
        request: &Value,
        response: &Value,
    ) -> Result<Plan, InvalidResponse>;
}
