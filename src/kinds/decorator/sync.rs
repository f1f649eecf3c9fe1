//! A target's sync as a one-object sync ([`crate::kinds::one_object`]): its attachments, the
//! sync or finalize request about it, and the plan its answer makes.

use super::DECORATOR_LABEL;
use super::api::{CUSTOMIZE, FINALIZE, SYNC};
use super::plan::{Decorator, Observed};
use crate::api::HookKind;
use crate::hooks::{HookRunner, InvalidResponse};
use crate::kinds::one_object::{Common, OneObject, Subject};
use crate::plan::children::ChildType;
use crate::plan::lifecycle::Phase;
use crate::plan::{Plan, SyncError};
use crate::reads::{ReadScope, ReadVerb};
use crate::resources::ResourceType;
use crate::script::Json;
use crate::store::ObjectStore;
use serde_json::Value;
use std::sync::Arc;

impl OneObject for Decorator {
    const SYNC: HookKind = SYNC;
    const FINALIZE: HookKind = FINALIZE;
    const CUSTOMIZE: HookKind = CUSTOMIZE;
    const ROLE: &'static str = "target";
    const FIND_BEFORE_CUSTOMIZE: bool = false;

    /// The target's attachments.
    type Found = Vec<Arc<Value>>;

    fn common(&self) -> &Common {
        &self.common
    }

    fn selects(&self, object: &Value) -> bool {
        Self::selects(self, object)
    }

    fn selects_by_labels_alone(&self, resource: &ResourceType) -> bool {
        Self::selects_by_labels_alone(self, resource)
    }

    fn object_type(&self, target: &Value) -> Option<&ResourceType> {
        self.target_type(target)
    }

    fn find(&self, store: &dyn ObjectStore, target: &Value) -> Result<Self::Found, SyncError> {
        Ok(observed_attachments(self, store, target))
    }

    fn plan_hook(
        &self,
        runner: &HookRunner,
        _: &dyn ObjectStore,
        phase: Phase,
        hook: HookKind,
        target: Subject,
        attachments: &Self::Found,
        related: Value,
    ) -> Result<Plan, SyncError> {
        let observed = Observed {
            target: target.tree,
            lent: target.lent(),
            attachments: attachments.iter().map(Arc::as_ref).collect(),
            related,
        };
        let version = runner.hooks.version(hook);
        let request = self.request(phase, &observed, version);
        let response = runner.call(hook, request.hook_request())?;
        Ok(self
            .plan(phase, &observed, &response)
            .map_err(|error| runner.hooks.invalid_response(hook, error))?)
    }

    /// A decorator plans from the target's metadata and status. One with a customize hook
    /// reads all of it: its customize answers are kept for the whole object's digest
    /// (`CustomizeCache`), as an answer may depend on the spec.
    fn plans_from_head(&self) -> bool {
        !self.common.has_customize
    }

    fn children(&self) -> &[ChildType] {
        &self.attachments
    }

    fn claim_labels(&self) -> Vec<(&'static str, &str)> {
        vec![(DECORATOR_LABEL, &self.common.name)]
    }

    fn observed(&self, store: &dyn ObjectStore, target: &Value) -> Option<Vec<Arc<Value>>> {
        Some(observed_attachments(self, store, target))
    }

    /// The target (`get` in its namespace) and its attachments (`list` of each type where the
    /// target's children live: its namespace, or every namespace for a cluster-scoped target).
    fn observed_scopes(&self, target_type: &ResourceType, target: &Value) -> Vec<ReadScope> {
        let mut scopes = vec![ReadScope::object(target_type, target)];
        scopes.extend(self.attachments.iter().map(|child| {
            ReadScope::new(
                ReadVerb::List,
                &child.resource,
                target_type.scope_of(target),
            )
        }));
        scopes
    }

    fn plan_of(
        &self,
        phase: Phase,
        request: &Value,
        response: &Value,
    ) -> Result<Plan, InvalidResponse> {
        let target = &request["object"];
        if self.target_type(target).is_none() {
            return Err(InvalidResponse::new(
                "(request)",
                "request.object is not of a type the controller targets, so the response \
                 cannot be checked as the operator would",
            ));
        }
        let observed = Observed {
            target,
            lent: Json::Tree(target),
            attachments: Vec::new(),
            related: Value::Null,
        };
        self.plan(phase, &observed, response)
    }
}

/// The attachments a target's request shows: its children of the attachment types that this
/// controller owns.
fn observed_attachments(
    decorator: &Decorator,
    store: &dyn ObjectStore,
    target: &Value,
) -> Vec<Arc<Value>> {
    decorator
        .attachments
        .iter()
        .flat_map(|child| store.controlled_by(&child.resource, target))
        .filter(|child| decorator.owns(target, child))
        .collect()
}
