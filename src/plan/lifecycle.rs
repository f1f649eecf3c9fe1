//! The life of an object a controller syncs with a finalize hook (a decorator's target, a
//! composite's parent): which hook it needs now, the finalizer that holds its deletion until
//! `finalize` says it is done, and what a response's `finalized` means for that finalizer.

use super::FinalizerChange;
use super::response::{InvalidResponse, json_type};
use crate::api::KindName;
use crate::object;
use serde_json::{Map, Value};

/// Which hook, if any, an object needs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Selected and alive: call `sync`.
    Sync,
    /// Deleted or opted out while holding the controller's finalizer: call `finalize`.
    Finalize,
    /// Holds the finalizer but the controller has no finalize hook any more: just release it.
    Release,
    /// Nothing to do.
    Idle,
}

impl Phase {
    /// The phase of an object that the controller `selects` (or not), `holding` its finalizer
    /// (or not), for a controller with or without a finalize hook.
    pub(crate) fn of(object: &Value, selects: bool, holding: bool, has_finalize: bool) -> Phase {
        if selects && !object::is_deleting(object) {
            Phase::Sync
        } else if holding && has_finalize {
            Phase::Finalize
        } else if holding {
            Phase::Release
        } else {
            Phase::Idle
        }
    }

    /// Whether an object in this phase runs a hook (and so needs its related objects).
    pub(crate) fn runs_hook(self) -> bool {
        matches!(self, Phase::Sync | Phase::Finalize)
    }
}

/// The finalizer a controller of `kind` named `controller` puts on the objects it finalizes:
/// `metascript.dev/<kind>-<controller>`. Finalizer names are qualified names, whose name part
/// is at most 63 characters; longer controller names are digested.
pub(crate) fn finalizer_for(kind: KindName, controller: &str) -> String {
    let mut name = format!("{}-{controller}", kind.as_str());
    if name.len() > 63 {
        name = format!("{}-{}", kind.as_str(), object::short_digest(controller));
    }
    format!("metascript.dev/{name}")
}

/// What a sync or finalize response means for the finalizer: added while the controller has a
/// finalize hook, removed once `finalize` answers `finalized: true` (or when the hook is gone).
pub(crate) fn finalizer_change(
    phase: Phase,
    response: &Map<String, Value>,
    finalizer: &str,
    holding: bool,
    has_finalize: bool,
) -> Result<Option<FinalizerChange>, InvalidResponse> {
    Ok(match phase {
        Phase::Finalize => match response.get("finalized") {
            Some(Value::Bool(true)) if holding => Some(FinalizerChange::Remove(finalizer.into())),
            None | Some(Value::Null) | Some(Value::Bool(_)) => None,
            Some(other) => {
                return Err(InvalidResponse::new(
                    "finalized",
                    format!("expected a boolean, got {}", json_type(other)),
                ));
            }
        },
        _ if has_finalize && !holding => Some(FinalizerChange::Add(finalizer.into())),
        _ if !has_finalize && holding => Some(FinalizerChange::Remove(finalizer.into())),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finalizer_names_are_qualified_names_whatever_the_controller_name() {
        let kind = crate::kinds::decorator::KIND;
        assert_eq!(finalizer_for(kind, "spp"), "metascript.dev/decorator-spp");
        let long = finalizer_for(kind, &"x".repeat(80));
        let name = long.strip_prefix("metascript.dev/").unwrap();
        assert!(name.len() <= 63, "{long}");
    }

    #[test]
    fn finalized_true_releases_only_a_held_finalizer() {
        let fields = |v: Value| v.as_object().cloned().unwrap();
        let done = fields(json!({"finalized": true}));
        assert_eq!(
            finalizer_change(Phase::Finalize, &done, "f", true, true).unwrap(),
            Some(FinalizerChange::Remove("f".into()))
        );
        assert_eq!(
            finalizer_change(Phase::Finalize, &done, "f", false, true).unwrap(),
            None
        );
        let error = finalizer_change(
            Phase::Finalize,
            &fields(json!({"finalized": "yes"})),
            "f",
            true,
            true,
        )
        .unwrap_err();
        assert_eq!(error.path, "finalized");
        let none = fields(json!({}));
        assert_eq!(
            finalizer_change(Phase::Sync, &none, "f", false, true).unwrap(),
            Some(FinalizerChange::Add("f".into()))
        );
        assert_eq!(
            finalizer_change(Phase::Sync, &none, "f", true, false).unwrap(),
            Some(FinalizerChange::Remove("f".into()))
        );
    }
}
