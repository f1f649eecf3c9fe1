//! A parent's sync as a one-object sync ([`crate::kinds::one_object`]): its selector and the
//! children it claims, the hook calls of a rolling update's older revisions, then the sync or
//! finalize request about it and the plan its answer makes.

use super::api::{CUSTOMIZE, FINALIZE, SYNC};
use super::plan::{Composite, Observed, Rollout};
use super::rolling::{self, REVISION_LABEL, Revision};
use crate::api::HookKind;
use crate::hooks::{HookRunner, InvalidResponse};
use crate::kinds::one_object::{Common, OneObject, Subject};
use crate::object::{self, ObjectKey};
use crate::plan::children::ChildType;
use crate::plan::lifecycle::Phase;
use crate::plan::{Plan, SyncError};
use crate::reads::{ReadScope, ReadVerb};
use crate::resources::ResourceType;
use crate::selector::LabelSelector;
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl OneObject for Composite {
    const SYNC: HookKind = SYNC;
    const FINALIZE: HookKind = FINALIZE;
    const CUSTOMIZE: HookKind = CUSTOMIZE;
    const ROLE: &'static str = "parent";
    const FIND_BEFORE_CUSTOMIZE: bool = true;

    /// The parent's selector and the objects it may claim.
    type Found = (LabelSelector, Vec<Arc<Value>>);

    fn common(&self) -> &Common {
        &self.common
    }

    fn selects(&self, object: &Value) -> bool {
        Self::selects(self, object)
    }

    /// `parentResource` has a label selector and nothing else.
    fn selects_by_labels_alone(&self, _: &ResourceType) -> bool {
        true
    }

    fn object_type(&self, parent: &Value) -> Option<&ResourceType> {
        self.parent.describes(parent).then_some(&self.parent)
    }

    fn find(&self, store: &dyn ObjectStore, parent: &Value) -> Result<Self::Found, SyncError> {
        let selector = self.selector(parent)?;
        let candidates = candidates(self, store, parent, &selector);
        Ok((selector, candidates))
    }

    fn plan_hook(
        &self,
        runner: &HookRunner,
        store: &dyn ObjectStore,
        phase: Phase,
        hook: HookKind,
        parent: Subject,
        (selector, candidates): &Self::Found,
        related: Value,
    ) -> Result<Plan, SyncError> {
        // Never only a head: its revisions hash and its selector read the spec.
        let parent = parent.tree;
        let (children, claims) = self.claim(parent, selector, candidates.iter().map(Arc::as_ref));
        let version = runner.hooks.version(hook);
        let observed = Observed {
            parent,
            children,
            claims,
            related,
        };
        let revisions = match (phase, &self.revisions) {
            (Phase::Sync, Some(revision_type)) => revisions(store, revision_type, parent),
            _ => Vec::new(),
        };
        let rollout = match (phase, &self.revisions) {
            (Phase::Sync, Some(_)) => Some(rollout(self, runner, &observed, selector, &revisions)?),
            _ => None,
        };
        let request = self.request(phase, parent, &observed, version);
        let response = runner.call(hook, request.hook_request())?;
        Ok(self
            .plan(phase, &observed, selector, &response, rollout.as_ref())
            .map_err(|error| runner.hooks.invalid_response(hook, error))?)
    }

    fn children(&self) -> &[ChildType] {
        &self.children
    }

    /// None: orphans the selector matches are claimed before planning; no other object is
    /// taken by label.
    fn claim_labels(&self) -> Vec<(&'static str, &str)> {
        Vec::new()
    }

    /// The children it claims and its ControllerRevisions; `None` when its selector is
    /// unreadable.
    fn observed(&self, store: &dyn ObjectStore, parent: &Value) -> Option<Vec<Arc<Value>>> {
        let selector = self.selector(parent).ok()?;
        let mut observed = claimed(self, store, parent, &selector);
        if let Some(revision_type) = &self.revisions {
            observed.extend(revisions(store, revision_type, parent));
        }
        Some(observed)
    }

    /// The parent (`get` in its namespace) and its children (`list` of each child type in its
    /// scope: its namespace, or every namespace for a cluster-scoped parent).
    fn observed_scopes(&self, _: &ResourceType, parent: &Value) -> Vec<ReadScope> {
        let scope = self.parent.scope_of(parent);
        let mut scopes = vec![ReadScope::object(&self.parent, parent)];
        scopes.extend(
            self.children
                .iter()
                .map(|child| ReadScope::new(ReadVerb::List, &child.resource, scope)),
        );
        scopes
    }

    fn plan_of(
        &self,
        phase: Phase,
        request: &Value,
        response: &Value,
    ) -> Result<Plan, InvalidResponse> {
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
    }
}

/// The objects a parent may claim: those of the child types it controls, and the orphans in
/// its scope (its namespace, or everywhere for a cluster-scoped parent).
fn candidates(
    composite: &Composite,
    store: &dyn ObjectStore,
    parent: &Value,
    selector: &LabelSelector,
) -> Vec<Arc<Value>> {
    let scope = composite.parent.scope_of(parent);
    composite
        .children
        .iter()
        .flat_map(|child| {
            let resource = &child.resource;
            // Only orphans the selector matches may be adopted (`Composite::claim`).
            let orphans = store.orphans(resource, resource.scope(scope), selector);
            store
                .controlled_by(resource, parent)
                .into_iter()
                .chain(orphans)
        })
        .collect()
}

/// The children a parent owns now (claiming orphans as it would), as the cache holds them.
fn claimed(
    composite: &Composite,
    store: &dyn ObjectStore,
    parent: &Value,
    selector: &LabelSelector,
) -> Vec<Arc<Value>> {
    let candidates = candidates(composite, store, parent, selector);
    let (claimed, _) = composite.claim(parent, selector, candidates.iter().map(Arc::as_ref));
    let keys: BTreeSet<ObjectKey> = claimed.iter().map(|c| ObjectKey::of(c)).collect();
    candidates
        .iter()
        .filter(|c| keys.contains(&ObjectKey::of(c)))
        .cloned()
        .collect()
}

/// The ControllerRevisions of a parent (those carrying a revision label).
fn revisions(
    store: &dyn ObjectStore,
    revision_type: &ResourceType,
    parent: &Value,
) -> Vec<Arc<Value>> {
    store
        .controlled_by(revision_type, parent)
        .into_iter()
        .filter(|revision| object::label(revision, REVISION_LABEL).is_some())
        .collect()
}

/// The rolling update part of a sync: the latest revision, and the desired children of each
/// older revision a child still belongs to, computed by calling the sync hook with the parent
/// as it was then, as long as the revision's ControllerRevision exists and its sync hook is the
/// one loaded now (otherwise its children stay as they are until their turn to move).
fn rollout<'a>(
    composite: &Composite,
    runner: &HookRunner,
    observed: &Observed,
    selector: &LabelSelector,
    revisions: &'a [Arc<Value>],
) -> Result<Rollout<'a>, SyncError> {
    let parent = observed.parent;
    let hook = runner
        .hooks
        .get(SYNC)
        .map(|h| h.digest())
        .unwrap_or_default();
    let latest = Revision::latest(parent, &composite.field_paths, hook);
    let recorded: BTreeMap<String, Revision> = revisions
        .iter()
        .filter_map(|revision| Revision::of_object(revision))
        .map(|revision| (revision.hash.clone(), revision))
        .collect();
    let older: BTreeSet<&str> = observed
        .children
        .iter()
        .filter(|child| !object::is_deleting(child))
        .filter_map(|child| object::label(child, REVISION_LABEL))
        .filter(|hash| *hash != latest.hash)
        .collect();
    let mut old = BTreeMap::new();
    for hash in older {
        let Some(revision) = recorded.get(hash).filter(|r| r.hook == latest.hook) else {
            continue;
        };
        let then = revision.parent(parent, &composite.field_paths);
        let request = composite.request(Phase::Sync, &then, observed, runner.hooks.version(SYNC));
        let response = runner.call(SYNC, request.hook_request())?;
        let desired = composite
            .desired(parent, selector, &response)
            .map_err(|error| runner.hooks.invalid_response(SYNC, error))?;
        let children = desired
            .into_iter()
            .filter(|(_, index)| composite.rolling[*index].is_some())
            .map(|(child, _)| {
                let child = rolling::stamped(child, hash);
                (ObjectKey::of(&child), child)
            })
            .collect();
        old.insert(hash.to_string(), children);
    }
    Ok(Rollout {
        latest,
        revisions: revisions.iter().map(Arc::as_ref).collect(),
        old,
    })
}
