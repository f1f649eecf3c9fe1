//! Where a controller's newest revision goes in a staged rollout: it serves, is staged beside
//! the serving one, or is held back; the serving revision is restored from its snapshot after
//! a restart, or the one before it from its own (an undo). The registry holding the kind's
//! controllers loads and installs what this decides ([`ControllerTable`]).

use super::snapshot::{Snapshot, load_snapshot, replaced, snapshot_name, snapshot_of};
use super::{Rollouts, Trouble, rollout_status};
use crate::api::{
    ABORT_ANNOTATION, PROMOTE_ANNOTATION, SYNC_REQUESTED_ANNOTATION, UNDO_ANNOTATION,
};
use crate::hooks::ConfigMapLookup;
use crate::object;
use crate::plan::rollout::{self as plan, Placement, Revisions};
use crate::reasons;
use crate::runtime::context::{Context, sweep};
use crate::runtime::keys::{ControllerId, WorkKey};
use crate::runtime::kind::{Controller, Kind};
use crate::runtime::write::fingerprint::Sweep;
use serde_json::Value;
use std::sync::Arc;

/// The table of a kind's loaded controllers, as a rollout places revisions in it (the
/// registry): it sits above the rollout, which cannot call it by name.
pub(crate) trait ControllerTable<K: Kind>: Sync {
    /// The revision serving a controller.
    fn serving(&self, name: &str) -> Option<Arc<Controller<K>>>;

    /// A controller object read as a version ready to run, its scripts read from `pinned`
    /// (`previous`: the version running now), or why it does not load.
    fn pinned_version(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        previous: Option<&Arc<Controller<K>>>,
        pinned: &(dyn ConfigMapLookup + Sync),
    ) -> impl Future<Output = Result<Controller<K>, String>> + Send;

    /// Makes `controller` serve (`previous`: the version it replaces), syncing what changed.
    fn install(
        &self,
        context: &Arc<Context>,
        key: &WorkKey,
        object: &Value,
        controller: Controller<K>,
        previous: Option<Arc<Controller<K>>>,
    ) -> impl Future<Output = ()> + Send;

    /// The controller's load is done without installing its newest revision (staged or held
    /// back): its routes now include the candidate's, and the load is not retried.
    fn settle(&self, context: &Context, key: &WorkKey);

    /// Queues the serving revision's work items whose last sync it did not make.
    fn resync_serving(&self, context: &Arc<Context>, name: &str)
    -> impl Future<Output = ()> + Send;
}

impl<K: Kind> Rollouts<K> {
    /// A staged `spec.rollout`: the newest revision serves, becomes the candidate beside the
    /// serving one, or is held back ([`plan::place`]). After a restart the
    /// serving revision is restored from its snapshot, as the controller's status names it.
    pub(crate) async fn place(
        &self,
        table: &impl ControllerTable<K>,
        context: &Arc<Context>,
        key: &WorkKey,
        object: &Arc<Value>,
        mut newest: Controller<K>,
        previous: Option<Arc<Controller<K>>>,
    ) {
        let id = &key.controller;
        let name = id.name.as_str();
        let restored = match (&previous, rollout_status(object)) {
            (None, Some(status)) if status.serving != newest.revision => {
                match self
                    .restore(table, context, id, object, &status.serving)
                    .await
                {
                    Ok(restored) => restored,
                    // Nothing runs until the serving revision is known: serving the newest
                    // everywhere because an API call failed would undo the rollout.
                    Err(error) => {
                        tracing::warn!(controller = %id, revision = %status.serving, %error, "cannot read the serving revision's snapshot; loading again later");
                        context.queue.retry_later(key.clone());
                        return;
                    }
                }
            }
            _ => None,
        };
        let serving = previous.as_deref().or(restored.as_ref());
        if let Some(serving) = serving {
            // The candidate and the serving revision count the same work items.
            newest.outcomes = serving.outcomes.clone();
            newest.state = serving.state.clone();
        }
        let (halted, promoting) = self.revisions_of(name, object, &newest.revision);
        let placement = plan::place(
            newest.rollout.strategy,
            Revisions {
                newest: &newest.revision,
                serving: serving.map(|s| s.revision.as_str()),
                halted: halted.as_ref(),
                promote: object::annotation(object, PROMOTE_ANNOTATION),
                abort: object::annotation(object, ABORT_ANNOTATION),
                undo: object::annotation(object, UNDO_ANNOTATION),
                promoting: promoting.as_deref(),
            },
        );
        // Held back with nothing else serving (an undo of the serving revision): the revision
        // before it serves again, from its snapshot. Without one the newest serves on, and the
        // `Rollout` condition says why.
        let mut placement = placement;
        let mut undone_to = None;
        if matches!(placement, Placement::Hold(_))
            && serving.is_none_or(|serving| serving.revision == newest.revision)
        {
            match self
                .before(table, context, id, object, &newest.revision)
                .await
            {
                Ok(before) => {
                    self.clear_trouble(name, Trouble::UndoFailed);
                    undone_to = Some(before);
                }
                Err(why) => {
                    let message = format!("revision {} cannot be undone: {why}", newest.revision);
                    tracing::warn!(controller = %id, revision = %newest.revision, %why, "cannot undo");
                    if self.trouble(name, Trouble::UndoFailed, message.clone()) {
                        context
                            .warn(object, None, reasons::UNDO_FAILED, "Rollout", &message)
                            .await;
                    }
                    placement = Placement::Serve;
                }
            }
        } else {
            self.clear_trouble(name, Trouble::UndoFailed);
        }
        // Unless the newest revision serves anyway, the serving one runs on beside it: again
        // from its snapshot after a restart, or loaded again when its webhook credentials
        // rotated. Installed with the version it replaces, if any.
        let serving_again = match (&placement, restored, &previous) {
            _ if undone_to.is_some() => undone_to.map(|before| (before, previous.clone())),
            (Placement::Serve, ..) | (_, None, None) => None,
            (_, Some(restored), _) => {
                tracing::info!(controller = %id, revision = %restored.revision, "serving revision restored from its snapshot");
                Some((restored, None))
            }
            (_, None, Some(serving)) => self
                .with_rotated_credentials(table, context, id, object, serving, &newest)
                .await
                .map(|reloaded| (reloaded, Some(serving.clone()))),
        };
        match placement {
            Placement::Serve => {
                let dropped = self.serve(name, &newest.revision);
                let promoted = dropped
                    .as_ref()
                    .is_some_and(|candidate| candidate.revision() == newest.revision);
                let revision = newest.revision.clone();
                table.install(context, key, object, newest, previous).await;
                if dropped.is_some() {
                    table.resync_serving(context, name).await;
                }
                if promoted {
                    let note = format!("revision {revision} serves every object");
                    context
                        .note(object, reasons::PROMOTED, "Rollout", &note)
                        .await;
                }
                if let Some(serving) = table.serving(name) {
                    self.save(context, &serving).await;
                }
            }
            Placement::Stage => {
                // Staged first, so that the serving revision's work items of the candidate's
                // share go to the candidate.
                let (candidate, started) = self.stage(name, newest, object);
                if let Some((serving, replaced)) = serving_again {
                    table.install(context, key, object, serving, replaced).await;
                }
                let serving = table
                    .serving(name)
                    .expect("a serving revision to stage beside");
                self.save(context, &serving).await;
                table.settle(context, key);
                if started {
                    let note = format!(
                        "revision {} is rolled out ({:?}) beside revision {}, which serves the \
                         rest",
                        candidate.revision(),
                        candidate.controller.rollout.strategy,
                        serving.revision
                    );
                    tracing::info!(controller = %id, candidate = %candidate.revision(), serving = %serving.revision, "rollout started");
                    context
                        .note(object, reasons::ROLLOUT_STARTED, "Rollout", &note)
                        .await;
                    // Whatever an earlier candidate served goes back to the serving revision.
                    table.resync_serving(context, name).await;
                }
                if candidate.serves_any() {
                    let (context, controller) = (context.clone(), candidate.controller.clone());
                    sweep("queueing what a controller acts on", move || {
                        K::enqueue_all(&context, &controller, Sweep::Changed);
                    })
                    .await;
                }
            }
            Placement::Hold(halted) => {
                let dropped = self.hold(name, halted.clone());
                if let Some((serving, replaced)) = serving_again {
                    let undone = replaced
                        .as_ref()
                        .is_some_and(|replaced| replaced.revision == halted.revision);
                    let revision = serving.revision.clone();
                    table.install(context, key, object, serving, replaced).await;
                    if undone {
                        self.saved(name, &revision);
                        tracing::info!(controller = %id, undone = %halted.revision, serving = %revision, "rollout undone");
                        context
                            .warn(object, None, &halted.reason, "Rollout", &halted.message)
                            .await;
                        table.resync_serving(context, name).await;
                    }
                }
                table.settle(context, key);
                if let Some(dropped) = dropped {
                    tracing::warn!(controller = %id, candidate = %dropped.revision(), reason = %halted.reason, message = %halted.message, "rollout halted");
                    context
                        .warn(object, None, &halted.reason, "Rollout", &halted.message)
                        .await;
                    table.resync_serving(context, name).await;
                }
            }
        }
    }

    /// The revision that served before `revision`, loaded from its snapshot (an undo), or why
    /// it cannot be.
    async fn before(
        &self,
        table: &impl ControllerTable<K>,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        revision: &str,
    ) -> Result<Controller<K>, String> {
        let kept = |name: &str| {
            format!(
                "ControllerRevision {}/{}",
                context.config.snapshot_namespace,
                snapshot_name(id, name)
            )
        };
        let replaced = replaced(context, id, object, revision)
            .await
            .map_err(|error| format!("cannot read {}: {error}", kept(revision)))?
            .ok_or_else(|| {
                format!(
                    "no snapshot names the revision that served before it ({} is missing or \
                     names none: it was the first to serve, or rolled out Immediate)",
                    kept(revision)
                )
            })?;
        let snapshot = load_snapshot(context, id, object, &replaced)
            .await
            .map_err(|error| format!("cannot read {}: {error}", kept(&replaced)))?
            .ok_or_else(|| {
                format!(
                    "the snapshot of revision {replaced} is gone ({})",
                    kept(&replaced)
                )
            })?;
        if let Some(why) = crate::tenancy::undo_refusal(&snapshot.controller, object) {
            return Err(format!(
                "revision {replaced}, which served before it, {why}"
            ));
        }
        snapshot_version(table, context, id, object, &snapshot, &replaced, None)
            .await
            .map_err(|why| format!("revision {replaced} does not load: {why}"))
    }

    /// The serving revision of a staged rollout, from the snapshot the status names (after a
    /// restart): `None` when it is gone or does not load, and then the newest revision serves;
    /// an error when the snapshot could not be read.
    async fn restore(
        &self,
        table: &impl ControllerTable<K>,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        revision: &str,
    ) -> Result<Option<Controller<K>>, kube::Error> {
        let snapshot = match load_snapshot(context, id, object, revision).await? {
            Some(snapshot) => snapshot,
            None => {
                let note = format!(
                    "the snapshot of serving revision {revision} is gone \
                     (ControllerRevision {}/{}): the newest revision serves every object",
                    context.config.snapshot_namespace,
                    snapshot_name(id, revision)
                );
                tracing::warn!(controller = %id, revision, "{note}");
                context
                    .warn(object, None, reasons::LOAD_FAILED, "Rollout", &note)
                    .await;
                return Ok(None);
            }
        };
        match snapshot_version(table, context, id, object, &snapshot, revision, None).await {
            Ok(serving) => {
                self.saved(&id.name, revision);
                Ok(Some(serving))
            }
            Err(message) => {
                tracing::warn!(controller = %id, revision, %message, "the serving revision's snapshot does not load; the newest revision serves");
                Ok(None)
            }
        }
    }

    /// The serving revision loaded again with rotated webhook credentials, while it runs
    /// beside a candidate or a held-back revision (the newest version read is not it, so it
    /// would go on with the old ones). It is loaded from a snapshot of itself as it runs, so
    /// nothing else about it changes. `newest` was read just now: when it reads the same
    /// credential objects, its digest tells without reading them again.
    async fn with_rotated_credentials(
        &self,
        table: &impl ControllerTable<K>,
        context: &Arc<Context>,
        id: &ControllerId,
        object: &Arc<Value>,
        serving: &Arc<Controller<K>>,
        newest: &Controller<K>,
    ) -> Option<Controller<K>> {
        let watch = serving.credentials.as_ref()?;
        let rotated = match &newest.credentials {
            Some(read) if read.reads_the_same(watch) => read.digest() != watch.digest(),
            _ => match watch.changed().await {
                Ok(changed) => changed,
                Err(error) => {
                    tracing::warn!(controller = %id, revision = %serving.revision, %error, "cannot read the serving revision's webhook credentials again");
                    return None;
                }
            },
        };
        if !rotated {
            return None;
        }
        let snapshot = snapshot_of(serving);
        match snapshot_version(
            table,
            context,
            id,
            object,
            &snapshot,
            &serving.revision,
            Some(serving),
        )
        .await
        {
            Ok(reloaded) => Some(reloaded),
            Err(message) => {
                tracing::warn!(controller = %id, revision = %serving.revision, %message, "the serving revision's webhook credentials changed, but it does not load with them; it goes on with the old ones");
                None
            }
        }
    }
}

/// A revision loaded from a snapshot of it (`previous`: the version of it running now,
/// whose outcomes it keeps).
async fn snapshot_version<K: Kind>(
    table: &impl ControllerTable<K>,
    context: &Arc<Context>,
    id: &ControllerId,
    object: &Arc<Value>,
    snapshot: &Snapshot,
    revision: &str,
    previous: Option<&Arc<Controller<K>>>,
) -> Result<Controller<K>, String> {
    let kept = Arc::new(snapshot.controller.clone());
    let mut version = table
        .pinned_version(context, id, &kept, previous, snapshot)
        .await?;
    // It is the same controller object: Events name it as it is now.
    version.reference = crate::runtime::report::events::reference(object);
    version.sync_requested =
        object::annotation(object, SYNC_REQUESTED_ANNOTATION).map(str::to_string);
    // Its snapshot is kept under this name, whatever its spec hashes to now.
    version.revision = revision.to_string();
    Ok(version)
}
