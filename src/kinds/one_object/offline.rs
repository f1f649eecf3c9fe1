//! A one-object controller without the operator: an object synced over a store (`render`,
//! `explain`), and a hook's response checked the way the operator would (test cases).

use super::{OneObject, Subject, Synced, sync};
use crate::api::{HookKind, HookVersion};
use crate::hooks::InvalidResponse;
use crate::object::ObjectKey;
use crate::plan::lifecycle::Phase;
use crate::plan::related;
use crate::plan::{Offline, Plan, Planner, Role, Step, SyncError};
use crate::resources::ResourceType;
use serde_json::Value;
use std::sync::Arc;

/// Syncs an object offline: the types of its related rules resolve without being watched.
fn sync_with<P: OneObject>(
    planner: &P,
    offline: &Offline,
    object: &Value,
) -> Result<Option<Synced>, SyncError> {
    let related = related::Unwatched {
        controller: planner.name(),
        resolver: offline.resolver,
    };
    sync(
        planner,
        offline.runner,
        offline.store,
        Subject::whole(object),
        &related,
    )
}

impl<P: OneObject> Planner for P {
    fn reads(&self) -> Arc<[ResourceType]> {
        OneObject::reads(self).clone()
    }

    // `object` is always listed from `resource`, so its own type says the same.
    fn acts_on(&self, _: &ResourceType, object: &Value) -> bool {
        self.object_type(object).is_some() && self.phase(object) != Phase::Idle
    }

    fn sync_offline(&self, offline: &Offline, object: &Value) -> Vec<Step> {
        if self.object_type(object).is_none() {
            return Vec::new();
        }
        let step = |hook, result| Step {
            object: ObjectKey::of(object),
            detail: Vec::new(),
            hook,
            result,
        };
        match sync_with(self, offline, object) {
            Ok(None) => Vec::new(),
            Ok(Some(synced)) => vec![step(synced.hook, Ok(synced.plan))],
            Err(error) => vec![step(None, Err(error))],
        }
    }

    fn explain(&self, offline: &Offline, object: &Value) -> Vec<Role> {
        vec![Role {
            summary: format!("{}, phase {:?}", P::ROLE, self.phase(object)),
            outcome: sync_with(self, offline, object)
                .map(|synced| synced.map(|synced| vec![synced.plan])),
        }]
    }

    fn plan_response(
        &self,
        hook: HookKind,
        request: &Value,
        response: &Value,
    ) -> Result<Option<Plan>, InvalidResponse> {
        if hook == P::CUSTOMIZE {
            return related::related_rules(response, HookVersion::V1).map(|_| None);
        }
        let phase = if hook == P::FINALIZE {
            Phase::Finalize
        } else {
            Phase::Sync
        };
        self.plan_of(phase, request, response).map(Some)
    }
}
