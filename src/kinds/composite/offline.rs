//! A CompositeController without the operator: a parent synced over a store (`render`,
//! `explain`), and a hook's response checked the way the operator would (test cases).

use super::api::{CUSTOMIZE, FINALIZE};
use super::plan::{Composite, Observed};
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

impl Composite {
    /// Syncs a parent offline: the types of its related rules resolve without being watched.
    fn sync_with(&self, offline: &Offline, parent: &Value) -> Result<Option<Synced>, SyncError> {
        let related = related::Unwatched {
            controller: &self.name,
            resolver: offline.resolver,
        };
        sync::sync_parent(self, offline.runner, offline.store, parent, &related)
    }
}

impl Planner for Composite {
    fn reads(&self) -> Arc<[ResourceType]> {
        self.reads.clone()
    }

    fn acts_on(&self, resource: &ResourceType, object: &Value) -> bool {
        *resource == self.parent && self.phase(object) != Phase::Idle
    }

    fn sync_offline(&self, offline: &Offline, parent: &Value) -> Vec<Step> {
        if !self.parent.describes(parent) {
            return Vec::new();
        }
        let step = |hook, result| Step {
            object: ObjectKey::of(parent),
            detail: Vec::new(),
            hook,
            result,
        };
        match self.sync_with(offline, parent) {
            Ok(None) => Vec::new(),
            Ok(Some(synced)) => vec![step(synced.hook, Ok(synced.plan))],
            Err(error) => vec![step(None, Err(error))],
        }
    }

    fn explain(&self, offline: &Offline, parent: &Value) -> Vec<Role> {
        vec![Role {
            summary: format!("parent, phase {:?}", self.phase(parent)),
            outcome: self
                .sync_with(offline, parent)
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
        let parent = &request["parent"];
        if !self.parent.describes(parent) {
            return Err(InvalidResponse::new(
                "(request)",
                "request.parent is not of the controller's parent type, so the response cannot \
                 be checked as the operator would",
            ));
        }
        let selector = self.selector(parent).map_err(|error| {
            InvalidResponse::new("(request)", format!("request.parent: {error}"))
        })?;
        let observed = Observed {
            parent,
            children: Vec::new(),
            claims: Vec::new(),
            related: Value::Null,
        };
        self.plan(phase, &observed, &selector, response, None)
            .map(drop)
    }
}
