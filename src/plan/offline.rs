//! What the commands that run hooks without the operator (`render`, `explain`, `metascript test`,
//! `validate` and admission) ask of a kind's planner, so they reach every kind through one
//! face: the same sync code as the operator, over a store of objects instead of its caches.

use super::{Plan, SyncError, outputs};
use crate::api::HookKind;
use crate::hooks::{HookRunner, InvalidResponse};
use crate::object::{self, ObjectKey};
use crate::resources::{ResourceResolver, ResourceType, TypeInfo};
use crate::schema::SchemaSource;
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

/// What an offline sync runs with: the hooks, the objects they see, and how the types hooks
/// name resolve.
pub struct Offline<'a> {
    pub runner: &'a HookRunner<'a>,
    pub store: &'a dyn ObjectStore,
    pub resolver: &'a dyn ResourceResolver,
    /// The schemas what a plan writes is checked against (`render`, `diff`, a shadow
    /// revision); [`crate::schema::NoSchemas`] checks nothing.
    pub schemas: &'a dyn SchemaSource,
}

impl Offline<'_> {
    /// A planner's sync of `object`, every plan checked against the schemas of what it
    /// writes ([`outputs`]): a plan with a violation is the step's error, as in the operator.
    /// Also returns the rules that could not be checked, to be said.
    pub fn sync(
        &self,
        planner: &dyn Planner,
        object: &Value,
    ) -> (Vec<Step>, Vec<outputs::OutputViolation>) {
        let mut steps = planner.sync_offline(self, object);
        let mut unchecked = Vec::new();
        let observed = |desired: &Value| observed_in(self.store, desired);
        for step in &mut steps {
            let Ok(plan) = &step.result else {
                continue;
            };
            match outputs::check(plan, object, &observed, self.schemas) {
                Ok(notes) => unchecked.extend(notes),
                Err(invalid) => step.result = Err(invalid.into()),
            }
        }
        (steps, unchecked)
    }
}

/// The object `desired` would replace, as `store` holds it (whatever type it is of: a store
/// of manifests or test objects matches by apiVersion and kind).
pub(crate) fn observed_in(store: &dyn ObjectStore, desired: &Value) -> Option<Arc<Value>> {
    let resource = ResourceType::from(TypeInfo {
        api_version: object::api_version(desired).to_string(),
        kind: object::kind(desired).to_string(),
        plural: String::new(),
        namespaced: object::namespace(desired).is_some(),
        has_status: false,
    });
    store.get(&resource, object::namespace(desired), object::name(desired))
}

/// One piece of a sync pass, as `render` prints it.
#[derive(Debug)]
pub struct Step {
    /// The object the work is about: a target, a parent.
    pub object: ObjectKey,
    /// What else identifies the piece (an input, a map key), by name, as printed.
    pub detail: Vec<(&'static str, String)>,
    /// The hook that planned it, if one did.
    pub hook: Option<HookKind>,
    pub result: Result<Plan, SyncError>,
}

impl Step {
    /// The object and what else identifies the work, as messages name it
    /// (`ConfigMap.v1 ns/a, input ConfigMap.v1 ns/b`).
    pub(crate) fn subject(&self) -> String {
        let detail: String = self
            .detail
            .iter()
            .map(|(name, value)| format!(", {name} {value}"))
            .collect();
        format!("{}{detail}", self.object)
    }
}

/// How a controller acts on an object, for `explain`: what the object is to it (e.g. `target,
/// phase Sync`), and what a sync would write now (`None`: nothing to show).
pub struct Role {
    pub summary: String,
    pub outcome: Result<Option<Vec<Plan>>, SyncError>,
}

/// A kind's planner, as the offline commands use it.
pub trait Planner: Send + Sync + 'static {
    /// The types its hooks may read (`spec.reads`).
    fn reads(&self) -> Arc<[ResourceType]>;

    /// Whether the controller acts on an object of this type now (without running a hook).
    fn acts_on(&self, resource: &ResourceType, object: &Value) -> bool;

    /// A sync pass over one object, in the order the operator's work would run: nothing when
    /// the controller has no work for it.
    fn sync_offline(&self, offline: &Offline, object: &Value) -> Vec<Step>;

    /// What the object is to the controller and what a sync would write now.
    fn explain(&self, offline: &Offline, object: &Value) -> Vec<Role>;

    /// Checks a hook's response to a request the way the operator would before applying it,
    /// and plans it as if nothing were observed: the plan, when the hook plans writes (a
    /// customize hook does not).
    fn plan_response(
        &self,
        hook: HookKind,
        request: &Value,
        response: &Value,
    ) -> Result<Option<Plan>, InvalidResponse>;
}
