//! A DecoratorController without the operator: a target synced over a store (`render`,
//! `explain`), and a hook's response checked the way the operator would (test cases).

use super::api::{CUSTOMIZE, FINALIZE};
use super::plan::{Decorator, Observed};
use super::sync::{self, Synced};
use crate::api::{HookKind, HookVersion};
use crate::hooks::InvalidResponse;
use crate::object::ObjectKey;
use crate::plan::lifecycle::Phase;
use crate::plan::related;
use crate::plan::{Offline, Planner, Role, Step, SyncError};
use crate::resources::ResourceType;
use serde_json::Value;
use std::sync::Arc;

impl Decorator {
    /// Syncs a target offline: the types of its related rules resolve without being watched.
    fn sync_with(&self, offline: &Offline, target: &Value) -> Result<Option<Synced>, SyncError> {
        let related = related::Unwatched {
            controller: &self.name,
            resolver: offline.resolver,
        };
        sync::sync_target(self, offline.runner, offline.store, target, &related)
    }
}

impl Planner for Decorator {
    fn reads(&self) -> Arc<[ResourceType]> {
        self.reads.clone()
    }

    fn acts_on(&self, _: &ResourceType, object: &Value) -> bool {
        self.target_type(object).is_some() && self.phase(object) != Phase::Idle
    }

    fn sync_offline(&self, offline: &Offline, target: &Value) -> Vec<Step> {
        if self.target_type(target).is_none() {
            return Vec::new();
        }
        let step = |hook, result| Step {
            object: ObjectKey::of(target),
            detail: Vec::new(),
            hook,
            result,
        };
        match self.sync_with(offline, target) {
            Ok(None) => Vec::new(),
            Ok(Some(synced)) => vec![step(synced.hook, Ok(synced.plan))],
            Err(error) => vec![step(None, Err(error))],
        }
    }

    fn explain(&self, offline: &Offline, target: &Value) -> Vec<Role> {
        vec![Role {
            summary: format!("target, phase {:?}", self.phase(target)),
            outcome: self
                .sync_with(offline, target)
                .map(|synced| synced.map(|synced| vec![synced.plan])),
        }]
    }

    fn check_response(
        &self,
        hook: HookKind,
        request: &Value,
        response: &Value,
    ) -> Result<(), InvalidResponse> {
        if hook == CUSTOMIZE {
            return related::related_rules(response, HookVersion::V1).map(drop);
        }
        let phase = if hook == FINALIZE {
            Phase::Finalize
        } else {
            Phase::Sync
        };
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
            attachments: Vec::new(),
            related: Value::Null,
        };
        self.plan(phase, &observed, response).map(drop)
    }
}
