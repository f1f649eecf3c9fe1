//! One parent's sync, start to end: its selector and the children it claims, its customize hook
//! (the related rules), the hook calls of a rolling update's older revisions, then sync or
//! finalize, and the plan. The operator runs it over its watch caches (on a blocking thread),
//! `render` and `explain` over files and a cluster's objects, so all three do the same thing.

use super::api::{CUSTOMIZE, FINALIZE, SYNC};
use super::plan::{Composite, Observed, Rollout};
use super::rolling::{self, REVISION_LABEL, Revision};
use crate::api::HookKind;
use crate::hooks::HookRunner;
use crate::object::{self, ObjectKey};
use crate::plan::adoption::Claimant;
use crate::plan::lifecycle::Phase;
use crate::plan::related::{self, Related, related_objects};
use crate::plan::{Plan, SyncError, stamp_provenance};
use crate::resources::ResourceType;
use crate::selector::LabelSelector;
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What one parent's sync decided.
pub struct Synced {
    /// The hook that planned; none when only a finalizer is released.
    pub hook: Option<HookKind>,
    pub plan: Plan,
}

/// Plans one parent: `None` when it needs nothing. With a customize hook, its rules (called for,
/// or kept from an earlier call) are turned into types by `related` (the operator also starts
/// watching them there) before sync or finalize runs. A parent whose selector cannot be read fails: it must never look like "owns
/// nothing", which would let go of every child.
pub fn sync_parent(
    composite: &Composite,
    runner: &HookRunner,
    store: &dyn ObjectStore,
    parent: &Value,
    related: &dyn Related,
) -> Result<Option<Synced>, SyncError> {
    let phase = composite.phase(parent);
    let hook = match phase {
        Phase::Idle => return Ok(None),
        Phase::Release => {
            return Ok(Some(Synced {
                hook: None,
                plan: composite.release_plan(),
            }));
        }
        Phase::Sync => SYNC,
        Phase::Finalize => FINALIZE,
    };
    let selector = composite.selector(parent)?;
    let candidates = candidates(composite, store, parent);
    let (children, claims) = composite.claim(parent, &selector, candidates.iter().map(Arc::as_ref));
    let related = match composite.has_customize {
        true => related.resolve(related::customize(
            runner,
            CUSTOMIZE,
            &composite.customize_request(parent),
            related,
        )?)?,
        false => Vec::new(),
    };
    let related_objects = related_objects(store, parent, &related);
    let version = runner.hooks.version(hook);
    let observed = Observed {
        parent,
        children,
        claims,
        related: crate::plan::children::group_for_request(
            parent,
            related.iter().map(|(_, resource)| resource),
            related_objects.iter().map(Arc::as_ref),
            version,
        ),
    };
    let revisions = match (phase, &composite.revisions) {
        (Phase::Sync, Some(revision_type)) => revisions(store, revision_type, parent),
        _ => Vec::new(),
    };
    let rollout = match (phase, &composite.revisions) {
        (Phase::Sync, Some(_)) => Some(rollout(
            composite, runner, &observed, &selector, &revisions,
        )?),
        _ => None,
    };
    let response = runner.call(hook, &composite.request(phase, parent, &observed, version))?;
    let mut plan = composite
        .plan(phase, &observed, &selector, &response, rollout.as_ref())
        .map_err(|error| runner.hooks.invalid_response(hook, error))?;
    // Orphans the selector matches were claimed above; no other object is taken by label.
    Claimant {
        owner: parent,
        types: &composite.children,
        labels: &[],
    }
    .admit(&composite.name, &mut plan, store)?;
    stamp_provenance(&mut plan, runner, hook, parent);
    Ok(Some(Synced {
        hook: Some(hook),
        plan,
    }))
}

/// The objects a parent may claim: those of the child types it controls, and the orphans in
/// its scope (its namespace, or everywhere for a cluster-scoped parent).
pub fn candidates(
    composite: &Composite,
    store: &dyn ObjectStore,
    parent: &Value,
) -> Vec<Arc<Value>> {
    let scope = composite.parent.scope_of(parent);
    composite
        .children
        .iter()
        .flat_map(|child| {
            let resource = &child.resource;
            let orphans = store.orphans(resource, resource.scope(scope));
            store
                .controlled_by(resource, parent)
                .into_iter()
                .chain(orphans)
        })
        .collect()
}

/// The children a parent owns now (claiming orphans as it would), as the cache holds them.
pub fn claimed(
    composite: &Composite,
    store: &dyn ObjectStore,
    parent: &Value,
    selector: &LabelSelector,
) -> Vec<Arc<Value>> {
    let candidates = candidates(composite, store, parent);
    let (claimed, _) = composite.claim(parent, selector, candidates.iter().map(Arc::as_ref));
    let keys: BTreeSet<ObjectKey> = claimed.iter().map(|c| ObjectKey::of(c)).collect();
    candidates
        .iter()
        .filter(|c| keys.contains(&ObjectKey::of(c)))
        .cloned()
        .collect()
}

/// The ControllerRevisions of a parent (those carrying a revision label).
pub fn revisions(
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
        let response = runner.call(SYNC, &request)?;
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

/// What a parent's hook requests show besides related objects, as reads its controller's
/// account must be allowed: the parent (`get` in its namespace) and its children (`list` of
/// each child type in its scope: its namespace, or every namespace for a cluster-scoped
/// parent). Related objects are checked by [`crate::plan::related`].
pub fn observed_scopes(composite: &Composite, parent: &Value) -> Vec<crate::reads::ReadScope> {
    use crate::reads::{ReadScope, ReadVerb};
    let scope = composite.parent.scope_of(parent);
    let mut scopes = vec![ReadScope::object(&composite.parent, parent)];
    scopes.extend(
        composite
            .children
            .iter()
            .map(|child| ReadScope::new(ReadVerb::List, &child.resource, scope)),
    );
    scopes
}
