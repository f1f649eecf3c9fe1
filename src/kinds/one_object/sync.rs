//! One object's sync, start to end: what it finds in the store, its customize hook (the related
//! rules) and their types, then sync or finalize, and the plan. The operator runs it over its
//! watch caches (on a blocking thread), `render` and `explain` over files and a cluster's
//! objects, so all three do exactly the same thing.

use super::{OneObject, Subject};
use crate::api::HookKind;
use crate::hooks::HookRunner;
use crate::plan::adoption::Claimant;
use crate::plan::children;
use crate::plan::lifecycle::Phase;
use crate::plan::related::{self, Related, related_objects};
use crate::plan::{Plan, SyncError, stamp_provenance};
use crate::store::ObjectStore;
use std::sync::Arc;

/// What one object's sync decided.
pub(crate) struct Synced {
    /// The hook that planned; none when only a finalizer is released.
    pub hook: Option<HookKind>,
    pub plan: Plan,
}

/// Plans one object: `None` when it needs nothing. With a customize hook, its rules (called
/// for, or kept from an earlier call) are turned into types by `related` (the operator also
/// starts watching them there) before sync or finalize runs.
pub(crate) fn sync<P: OneObject>(
    planner: &P,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    subject: Subject,
    related: &dyn Related,
) -> Result<Option<Synced>, SyncError> {
    let object = subject.tree;
    let phase = planner.phase(object);
    let hook = match phase {
        Phase::Idle => return Ok(None),
        Phase::Release => {
            return Ok(Some(Synced {
                hook: None,
                plan: planner.common().release_plan(),
            }));
        }
        Phase::Sync => P::SYNC,
        Phase::Finalize => P::FINALIZE,
    };
    let found_first = match P::FIND_BEFORE_CUSTOMIZE {
        true => Some(planner.find(store, object)?),
        false => None,
    };
    let related = match planner.has_customize() {
        true => related.resolve(related::customize(
            runner,
            P::CUSTOMIZE,
            &planner.common().customize_request(object),
            related,
        )?)?,
        false => Vec::new(),
    };
    let related_objects = related_objects(store, object, &related);
    let found = match found_first {
        Some(found) => found,
        None => planner.find(store, object)?,
    };
    let related = children::group_for_request(
        object,
        related.iter().map(|(_, resource)| resource),
        related_objects.iter().map(Arc::as_ref),
        runner.hooks.version(hook),
    );
    let mut plan = planner.plan_hook(runner, store, phase, hook, subject, &found, related)?;
    Claimant {
        owner: object,
        types: planner.children(),
        labels: &planner.claim_labels(),
    }
    .admit(planner.name(), &mut plan, store)?;
    stamp_provenance(&mut plan, runner, hook, object);
    Ok(Some(Synced {
        hook: Some(hook),
        plan,
    }))
}
