//! What every one-object planner holds and decides the same way, whatever it calls its object:
//! its name and hooks, its finalizer and the object's phase, and the shape of a hook request.

use crate::api::{ControllerObject, ResourceRef};
use crate::object;
use crate::plan::children;
use crate::plan::lifecycle::{self, Phase, finalizer_for};
use crate::plan::related;
use crate::plan::response::InvalidResponse;
use crate::plan::{FinalizerChange, Plan};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::script::{HookRequest, Json};
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};

#[derive(Clone, Debug)]
pub(crate) struct Common {
    pub name: String,
    /// The controller object exactly as hooks receive it in `controller`.
    pub controller_json: Value,
    pub has_finalize: bool,
    pub has_customize: bool,
    /// The types hooks may read (`spec.reads`).
    pub reads: Arc<[ResourceType]>,
    /// The finalizer this controller puts on its objects when it has a finalize hook (computed
    /// once: it is checked on every event of them).
    finalizer: String,
}

impl Common {
    pub(crate) fn new<C: ControllerObject>(
        controller: &C,
        (has_finalize, has_customize): (bool, bool),
        reads: &[ResourceRef],
        resolver: &dyn ResourceResolver,
    ) -> Result<Common, ResolveError> {
        let name = controller.name();
        Ok(Common {
            controller_json: children::controller_json(controller, C::KIND),
            has_finalize,
            has_customize,
            reads: crate::resources::resolve_reads(reads, resolver)?,
            finalizer: finalizer_for(C::KIND, &name),
            name,
        })
    }

    /// The finalizer this controller puts on its objects when it has a finalize hook.
    pub(crate) fn finalizer(&self) -> &str {
        &self.finalizer
    }

    /// The object's phase, `selected` by the controller's rules or not.
    pub(crate) fn phase(&self, object: &Value, selected: bool) -> Phase {
        let holding = object::has_finalizer(object, self.finalizer());
        Phase::of(object, selected, holding, self.has_finalize)
    }

    /// Whether the controller has work for this version of an object, `selected` or not.
    pub(crate) fn wants(&self, object: &Value, selected: bool) -> bool {
        selected || object::has_finalizer(object, self.finalizer())
    }

    pub(crate) fn customize_request(&self, object: &Value) -> Value {
        related::customize_request(&self.controller_json, object)
    }

    /// The plan for an object whose finalizer must go without calling any hook.
    pub(crate) fn release_plan(&self) -> Plan {
        Plan {
            finalizer: Some(FinalizerChange::Remove(self.finalizer.clone())),
            ..Plan::default()
        }
    }

    /// What a response's `finalized` means for the object's finalizer in `phase`.
    pub(crate) fn finalizer_change(
        &self,
        phase: Phase,
        fields: &Map<String, Value>,
        object: &Value,
    ) -> Result<Option<FinalizerChange>, InvalidResponse> {
        lifecycle::finalizer_change(
            phase,
            fields,
            self.finalizer(),
            object::has_finalizer(object, self.finalizer()),
            self.has_finalize,
        )
    }

    /// A sync or finalize request: the controller, the object and its children under the
    /// kind's names for them, its related objects (`related`, grouped) and the phase.
    pub(crate) fn request<'a>(
        &'a self,
        phase: Phase,
        (object_field, object): (&'static str, Json<'a>),
        (children_field, children): (&'static str, Value),
        related: &'a Value,
    ) -> ObjectRequest<'a> {
        static NONE_RELATED: LazyLock<Value> = LazyLock::new(|| json!({}));
        let related = match related.is_object() {
            true => related,
            false => &NONE_RELATED,
        };
        ObjectRequest {
            built: object::fields([
                (children_field, children),
                ("finalizing", (phase == Phase::Finalize).into()),
            ]),
            lent: [
                ("controller", Json::Tree(&self.controller_json)),
                (object_field, object),
                ("related", Json::Tree(related)),
            ],
        }
    }
}

/// A sync or finalize request, with the controller, the object and its related objects lent
/// ([`HookRequest`]): only the children and the phase are built for it.
pub(crate) struct ObjectRequest<'a> {
    built: Value,
    lent: [(&'static str, Json<'a>); 3],
}

impl ObjectRequest<'_> {
    pub(crate) fn hook_request(&self) -> HookRequest<'_> {
        HookRequest::lending(&self.built, &self.lent)
    }

    /// The request as one JSON value, as its hook receives it.
    #[cfg(test)]
    pub(crate) fn to_value(&self) -> Value {
        self.hook_request().to_value()
    }
}

/// The object a one-object sync is about, as the sync read it: `tree` is all of it, or, when
/// `text` holds all of it, only its [`crate::store::HEAD_AND_STATUS`] (for a planner that
/// plans from those), and the hook request lends the text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Subject<'a> {
    pub tree: &'a Value,
    pub text: Option<&'a str>,
}

impl<'a> Subject<'a> {
    pub(crate) fn whole(tree: &'a Value) -> Subject<'a> {
        Subject { tree, text: None }
    }

    /// The object as its hook request shows it.
    pub(crate) fn lent(self) -> Json<'a> {
        self.text.map_or(Json::Tree(self.tree), Json::Text)
    }
}
