//! Staged rollouts in the operator (`spec.rollout`): a controller's candidate revision beside
//! the one serving, the share of work items the candidate serves (Canary) or its evaluation on
//! every object without writing (Shadow), its progress step by step, and the snapshot of the
//! serving revision that lets a restarted replica, or a new leader, go on serving it while the
//! controller object already holds the candidate. The decisions are pure
//! ([`crate::plan::rollout`]). The state moves in two places only: `placement` when a
//! controller loads (its newest revision serves, is staged, or is held back), and
//! [`Rollouts::turn`] at every later turn (a canary steps on, or is to be promoted or held
//! back). The registry above loads and installs revisions for them ([`ControllerTable`]).
//! Beside this file: `snapshot` keeps the serving revision's snapshot, `shadow` evaluates a
//! shadow candidate.

mod placement;
mod shadow;
mod snapshot;

pub(crate) use placement::ControllerTable;

use shadow::shadow_pass;
use snapshot::{save_snapshot, snapshot_name};

use crate::api::{CanaryCounts, HaltedRevision, RolloutStatus, RolloutStrategy, ShadowReport};
use crate::plan::rollout::{self as plan, CanaryNext, Share};
use crate::reasons;
use crate::resources::ResourceType;
use crate::runtime::context::{Context, start_sweep};
use crate::runtime::keys::{ControllerId, WorkKey};
use crate::runtime::kind::{CandidateShare, Controller, Kind};
use crate::runtime::replicas::shard::{self, Item};
use crate::runtime::report::problem::Problem;
use crate::runtime::report::status::{Counts, RolloutReport};
use crate::runtime::write::fingerprint::Sweep;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a shadow revision is evaluated again over every object, while it waits: the
/// objects and what the serving revision wrote keep changing.
const SHADOW_REFRESH: Duration = Duration::from_secs(60);

/// A revision being rolled out, beside the one serving.
pub(crate) struct Candidate<K: Kind> {
    pub controller: Arc<Controller<K>>,
    share: Arc<CandidateShare>,
    /// Shared with the candidate it replaces when loaded again with rotated credentials, so
    /// what a sync or a rollout turn still holding that one records is not lost.
    progress: Arc<Mutex<Progress>>,
}

struct Progress {
    /// Canary: the step running and when it started (monotonic for its interval, the wall
    /// clock for status, which a new leader resumes from).
    step: usize,
    started: Instant,
    started_at: jiff::Timestamp,
    /// The candidate's work items whose last sync failed.
    failing: HashSet<String>,
    /// Shadow: the last evaluation, when the next is due, and whether one is running.
    shadow: Option<ShadowReport>,
    shadow_due: Instant,
    evaluating: bool,
}

impl<K: Kind> Candidate<K> {
    pub(crate) fn revision(&self) -> &str {
        &self.controller.revision
    }

    /// This candidate (its share and progress) running `controller`: the same revision,
    /// loaded again with other webhook credentials. A shadow report is due again, as the old
    /// credentials may have failed its calls.
    fn with_credentials_of(&self, mut controller: Controller<K>) -> Candidate<K> {
        controller.share = Some(self.share.clone());
        self.progress.lock().shadow_due = Instant::now();
        Candidate {
            controller: Arc::new(controller),
            share: self.share.clone(),
            progress: self.progress.clone(),
        }
    }

    fn strategy(&self) -> RolloutStrategy {
        self.controller.rollout.strategy
    }

    /// The canary step running (from 0).
    pub(crate) fn step(&self) -> usize {
        self.progress.lock().step
    }

    /// Whether it serves this work item (by its rollout unit).
    pub(crate) fn serves(&self, unit: &str) -> bool {
        self.share.serves(unit)
    }

    /// Whether it serves any work item at all (a shadow serves none).
    pub(crate) fn serves_any(&self) -> bool {
        self.share.get() != Share::Nothing
    }

    /// How one of its work items ended.
    pub(crate) fn record(&self, unit: String, failed: bool) {
        let mut progress = self.progress.lock();
        if failed {
            progress.failing.insert(unit);
        } else {
            progress.failing.remove(&unit);
        }
    }

    /// The share of step `step` over the work items the controller has now.
    fn share_of_step(&self, step: usize) -> Share {
        let rollout = &self.controller.rollout;
        match rollout.steps.get(step) {
            Some(step) => Share::of_step(
                step,
                self.controller
                    .outcomes
                    .keys()
                    .iter()
                    .map(|unit| plan::position(&unit.to_string())),
            ),
            None => Share::Everything,
        }
    }

    /// Starts step `step` at `started_at`.
    fn start_step(&self, step: usize, started_at: jiff::Timestamp) {
        let share = self.share_of_step(step);
        let mut progress = self.progress.lock();
        progress.step = step;
        progress.started_at = started_at;
        let ago = jiff::Timestamp::now()
            .duration_since(started_at)
            .unsigned_abs();
        progress.started = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
        drop(progress);
        self.share.set(share);
    }
}

/// What a controller's rollout remembers across its reloads.
struct Track<K: Kind> {
    candidate: Option<Arc<Candidate<K>>>,
    halted: Option<HaltedRevision>,
    /// The revision of the newest spec loaded.
    newest: String,
    /// A revision to serve at the next load: its canary ran its last step.
    promoting: Option<String>,
    /// The serving revision whose snapshot is saved.
    saved: Option<String>,
    /// What keeps the rollout from being safe, for the `Rollout` condition, and its message.
    trouble: Option<(Trouble, String)>,
}

/// What keeps a rollout from being safe: each clears on its own once it no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trouble {
    /// An undo (`metascript rollout undo`) cannot be carried out.
    UndoFailed,
    /// The serving revision's snapshot cannot be saved.
    SnapshotNotSaved,
}

impl Trouble {
    fn reason(self) -> &'static str {
        match self {
            Trouble::UndoFailed => reasons::UNDO_FAILED,
            Trouble::SnapshotNotSaved => reasons::SNAPSHOT_NOT_SAVED,
        }
    }
}

impl<K: Kind> Default for Track<K> {
    fn default() -> Self {
        Track {
            candidate: None,
            halted: None,
            newest: String::new(),
            promoting: None,
            saved: None,
            trouble: None,
        }
    }
}

/// The rollouts of one kind's controllers, by controller name.
pub(crate) struct Rollouts<K: Kind> {
    tracks: Mutex<HashMap<String, Track<K>>>,
}

impl<K: Kind> Default for Rollouts<K> {
    fn default() -> Self {
        Rollouts {
            tracks: Mutex::default(),
        }
    }
}

/// Where a turn of a controller's rollout comes from.
pub(crate) enum Turn<'a> {
    /// The status loop, on the replica that writes the controller's status: the candidate's
    /// clock and its work items failing on every replica (`failing`) decide.
    Lead { failing: u64 },
    /// The controller object's status changed: the replica driving the rollout moved it,
    /// and this one follows what it recorded there.
    Follow { object: &'a Value },
}

/// Where a turn took a rollout.
enum Advance<K: Kind> {
    Nothing,
    /// The candidate's share grew: the work items it serves now are to be queued.
    Stepped(Arc<Candidate<K>>),
    /// The controller is to load again: the candidate is to be promoted or held back.
    Reload,
}

/// A canary that stepped on: the queueing of the work items its larger share serves.
pub(crate) struct Stepped<K: Kind> {
    candidate: Arc<Candidate<K>>,
    queueing: tokio::task::JoinHandle<()>,
}

impl<K: Kind> Rollouts<K> {
    pub(crate) fn candidate(&self, name: &str) -> Option<Arc<Candidate<K>>> {
        self.tracks.lock().get(name)?.candidate.clone()
    }

    /// The placement inputs of a controller whose newest revision is `newest`: remembered, or
    /// (the first time this replica sees it) as its status says.
    fn revisions_of(
        &self,
        name: &str,
        object: &Value,
        newest: &str,
    ) -> (Option<HaltedRevision>, Option<String>) {
        let mut tracks = self.tracks.lock();
        let track = tracks.entry(name.to_string()).or_insert_with(|| Track {
            halted: rollout_status(object).and_then(|status| status.halted),
            ..Track::default()
        });
        track.newest = newest.to_string();
        (track.halted.clone(), track.promoting.clone())
    }

    /// Forgets a controller's rollout (a controller removed, or back to `Immediate`); returns
    /// the candidate it had.
    pub(crate) fn forget(&self, name: &str) -> Option<Arc<Candidate<K>>> {
        self.tracks.lock().remove(name)?.candidate
    }

    /// The newest revision serves: no candidate any more. Returns the one dropped.
    fn serve(&self, name: &str, revision: &str) -> Option<Arc<Candidate<K>>> {
        let mut tracks = self.tracks.lock();
        let track = tracks.entry(name.to_string()).or_default();
        track.promoting = None;
        if track
            .halted
            .as_ref()
            .is_some_and(|halted| halted.revision == revision)
        {
            track.halted = None;
        }
        track.candidate.take()
    }

    /// The newest revision is held back. Returns the candidate dropped.
    fn hold(&self, name: &str, halted: HaltedRevision) -> Option<Arc<Candidate<K>>> {
        let mut tracks = self.tracks.lock();
        let track = tracks.entry(name.to_string()).or_default();
        track.halted = Some(halted);
        track.candidate.take()
    }

    /// Makes `controller` the candidate, or keeps the one of the same revision (its progress
    /// with it). A new candidate starts where the controller's status says one of its revision
    /// was (a restart, a new leader), else at its first step; so does a kept one whose status
    /// is ahead of this replica (a later step, or the same one started earlier: a standby that
    /// takes over). A kept one loaded again with rotated webhook credentials runs with them
    /// from then on. Returns it, and whether it is new (also when only its rollout settings
    /// changed).
    fn stage(
        &self,
        name: &str,
        mut controller: Controller<K>,
        object: &Value,
    ) -> (Arc<Candidate<K>>, bool) {
        let recorded = rollout_status(object)
            .filter(|status| status.candidate.as_deref() == Some(controller.revision.as_str()));
        let mut resume = recorded.as_ref().and_then(|status| {
            let started_at = status.step_started_at.as_deref()?.parse().ok()?;
            Some((status.step? as usize, started_at))
        });
        let mut tracks = self.tracks.lock();
        let track = tracks.entry(name.to_string()).or_default();
        // The same revision with other rollout settings (steps, maxErrors, strategy) is a
        // candidate anew that goes on from the step it was at.
        if let Some(kept) = &track.candidate
            && kept.revision() == controller.revision
            && kept.controller.rollout != controller.rollout
        {
            let progress = kept.progress.lock();
            resume = Some((progress.step, progress.started_at));
        }
        if let Some(kept) = &track.candidate
            && kept.revision() == controller.revision
            && kept.controller.rollout == controller.rollout
        {
            // Rotated webhook credentials (no part of the revision): the same candidate, at
            // the same point, calling its hooks with the new ones.
            if kept.controller.credentials_digest() != controller.credentials_digest() {
                let renewed = Arc::new(kept.with_credentials_of(controller));
                track.candidate = Some(renewed.clone());
            }
            let kept = track.candidate.as_ref().expect("a candidate kept");
            let behind = resume.is_some_and(|(step, started_at)| {
                let progress = kept.progress.lock();
                (step, std::cmp::Reverse(started_at))
                    > (progress.step, std::cmp::Reverse(progress.started_at))
            });
            if let (true, Some((step, started_at))) = (behind, resume) {
                kept.start_step(step, started_at);
            }
            return (kept.clone(), false);
        }
        let share = Arc::new(CandidateShare::new(Share::Nothing));
        controller.share = Some(share.clone());
        let candidate = Arc::new(Candidate {
            controller: Arc::new(controller),
            share,
            progress: Arc::new(Mutex::new(Progress {
                step: 0,
                started: Instant::now(),
                started_at: jiff::Timestamp::now(),
                failing: HashSet::new(),
                shadow: recorded.and_then(|status| status.shadow),
                shadow_due: Instant::now(),
                evaluating: false,
            })),
        });
        if candidate.strategy() == RolloutStrategy::Canary {
            let (step, started_at) = resume.unwrap_or((0, jiff::Timestamp::now()));
            candidate.start_step(step, started_at);
        }
        track.candidate = Some(candidate.clone());
        (candidate, true)
    }

    /// This replica's part of a controller's canary: which candidate (see
    /// [`Counts::candidate`]), the work items (of those it keeps outcomes of) it serves, and
    /// how many of them failed on their last sync.
    pub(crate) fn candidate_counts(&self, name: &str, serving: &Controller<K>) -> (u64, u64, u64) {
        let Some(candidate) = self.candidate(name).filter(|c| c.serves_any()) else {
            return (0, 0, 0);
        };
        let served = serving
            .outcomes
            .keys()
            .iter()
            .filter(|unit| candidate.serves(&unit.to_string()))
            .count() as u64;
        let failing = candidate.progress.lock().failing.len() as u64;
        // Never 0, which stands for no candidate.
        let which = plan::position(candidate.revision()).max(1);
        (which, served, failing)
    }

    /// One turn of a controller's rollout, the one place its state moves (see [`Turn`]).
    /// What the turn calls for starts here: a canary's larger share is queued (off the
    /// runtime's threads), a controller whose candidate is to be promoted or held back is
    /// queued to load again. Returns the step, if the canary took one, for a leader to wait
    /// for and announce; a follower lets the queueing end on its own.
    pub(crate) fn turn(
        &self,
        context: &Arc<Context>,
        id: &ControllerId,
        turn: Turn<'_>,
    ) -> Option<Stepped<K>> {
        let advance = match turn {
            Turn::Lead { failing } => self.advance(context, &id.name, failing),
            Turn::Follow { object } => self.follow(&id.name, object),
        };
        match advance {
            Advance::Nothing => None,
            Advance::Stepped(candidate) => {
                let (context, controller) = (context.clone(), candidate.controller.clone());
                let queueing = start_sweep(move || {
                    K::enqueue_all(&context, &controller, Sweep::Changed);
                });
                Some(Stepped {
                    candidate,
                    queueing,
                })
            }
            Advance::Reload => {
                context.queue.add(WorkKey::load(id));
                None
            }
        }
    }

    /// The status loop's turn of a controller's rollout (on the replica that writes its
    /// status; `controllers`: the controller objects' type): a snapshot of the serving revision
    /// that could not be saved is tried again, and a canary's step is announced once its share
    /// is queued.
    pub(crate) async fn lead(
        &self,
        context: &Arc<Context>,
        serving: &Controller<K>,
        controllers: &ResourceType,
        failing: u64,
    ) {
        let id = &serving.id;
        if self.candidate(&id.name).is_none() {
            return;
        }
        self.save(context, serving).await;
        let Some(Stepped {
            candidate,
            queueing,
        }) = self.turn(context, id, Turn::Lead { failing })
        else {
            return;
        };
        if let Err(error) = queueing.await {
            tracing::warn!(%error, "queueing what a controller acts on failed");
        }
        if let Some(object) = context.informers.get(controllers, None, &id.name) {
            let note = format!(
                "revision {} serves a larger share of the work items (step {} of {})",
                candidate.revision(),
                candidate.step() + 1,
                candidate.controller.rollout.steps.len()
            );
            let published = context.note(&object, reasons::CANARY_STEP, "Rollout", &note);
            shard::acting_for(Item::controller(id), published).await;
        }
    }

    /// The status loop's turn for a controller's candidate: a canary steps on, is promoted, or
    /// is rolled back when `failing` of its work items (on every replica) fail; a shadow is
    /// evaluated again when due.
    fn advance(&self, context: &Arc<Context>, name: &str, failing: u64) -> Advance<K> {
        let Some(candidate) = self.candidate(name) else {
            return Advance::Nothing;
        };
        match candidate.strategy() {
            RolloutStrategy::Canary => {
                let (step, running) = {
                    let progress = candidate.progress.lock();
                    (progress.step, progress.started.elapsed())
                };
                match plan::canary_next(&candidate.controller.rollout, step, running, failing) {
                    CanaryNext::Wait(_) => Advance::Nothing,
                    CanaryNext::Step(next) => {
                        candidate.start_step(next, jiff::Timestamp::now());
                        Advance::Stepped(candidate)
                    }
                    CanaryNext::Promote => {
                        if let Some(track) = self.tracks.lock().get_mut(name) {
                            track.promoting = Some(candidate.revision().to_string());
                        }
                        Advance::Reload
                    }
                    CanaryNext::RollBack(why) => {
                        if let Some(track) = self.tracks.lock().get_mut(name) {
                            track.halted = Some(HaltedRevision {
                                revision: candidate.revision().to_string(),
                                reason: plan::ROLLED_BACK.to_string(),
                                message: format!(
                                    "revision {} was rolled back: {why}",
                                    candidate.revision()
                                ),
                            });
                        }
                        Advance::Reload
                    }
                }
            }
            RolloutStrategy::Shadow => {
                let due = {
                    let mut progress = candidate.progress.lock();
                    let due = !progress.evaluating && progress.shadow_due <= Instant::now();
                    progress.evaluating |= due;
                    due
                };
                if due {
                    let context = context.clone();
                    tokio::spawn(async move {
                        let report = shadow_pass(&context, &candidate.controller).await;
                        let mut progress = candidate.progress.lock();
                        progress.shadow = Some(report);
                        progress.evaluating = false;
                        progress.shadow_due = Instant::now() + SHADOW_REFRESH;
                    });
                }
                Advance::Nothing
            }
            RolloutStrategy::Immediate => Advance::Nothing,
        }
    }

    /// Follows what the replica driving a controller's rollout recorded in its status (when
    /// sharded, every replica serves a candidate's work items it owns): a later step, a
    /// rollback of the candidate, or its promotion.
    fn follow(&self, name: &str, object: &Value) -> Advance<K> {
        let (Some(status), Some(candidate)) = (rollout_status(object), self.candidate(name)) else {
            return Advance::Nothing;
        };
        let revision = candidate.revision().to_string();
        if status.serving == revision {
            if let Some(track) = self.tracks.lock().get_mut(name) {
                track.promoting = Some(revision);
            }
            return Advance::Reload;
        }
        if let Some(halted) = status.halted.filter(|halted| halted.revision == revision) {
            if let Some(track) = self.tracks.lock().get_mut(name) {
                track.halted = Some(halted);
            }
            return Advance::Reload;
        }
        let recorded = status.step.zip(
            status
                .step_started_at
                .as_deref()
                .and_then(|at| at.parse::<jiff::Timestamp>().ok()),
        );
        match recorded {
            Some((step, started_at))
                if status.candidate.as_deref() == Some(revision.as_str())
                    && step as usize > candidate.step() =>
            {
                candidate.start_step(step as usize, started_at);
                Advance::Stepped(candidate)
            }
            _ => Advance::Nothing,
        }
    }

    /// `status.rollout` and the `Rollout` condition of a controller whose serving version is
    /// `serving` and whose counts (on every replica) are `counts`; none for one that rolls out
    /// `Immediate` with nothing held back.
    pub(crate) fn report(
        &self,
        name: &str,
        serving: &Controller<K>,
        counts: &Counts,
    ) -> Option<RolloutReport> {
        let tracks = self.tracks.lock();
        let track = tracks.get(name)?;
        // A candidate just rolled back or aborted is gone as soon as the controller reloads.
        let candidate = track.candidate.as_ref().filter(|candidate| {
            track
                .halted
                .as_ref()
                .is_none_or(|halted| halted.revision != candidate.revision())
        });
        let strategy = candidate.map_or(serving.rollout.strategy, |c| c.strategy());
        let halted = track
            .halted
            .clone()
            .filter(|halted| halted.revision == track.newest);
        if !strategy.stages() && halted.is_none() {
            return None;
        }
        let mut status = RolloutStatus {
            strategy,
            serving: serving.revision.clone(),
            halted: halted.clone(),
            ..RolloutStatus::default()
        };
        let mut condition = Ok(());
        if let Some(candidate) = candidate {
            let progress = candidate.progress.lock();
            status.candidate = Some(candidate.revision().to_string());
            status.shadow = progress.shadow.clone();
            if strategy == RolloutStrategy::Canary {
                status.step = Some(progress.step as u32);
                status.step_started_at = Some(progress.started_at.to_string());
                let serving_units = counts.candidate_serving;
                status.canary = Some(CanaryCounts {
                    serving: serving_units,
                    failing: counts.candidate_failing,
                });
                let mut units: Vec<String> = serving
                    .outcomes
                    .keys()
                    .iter()
                    .map(ToString::to_string)
                    .filter(|unit| candidate.serves(unit))
                    .collect();
                condition = Err(Problem::new(
                    reasons::CANARY_IN_PROGRESS,
                    format!(
                        "revision {} serves {serving_units} work item(s) at step {} of {}{}; {} \
                         serves the rest",
                        candidate.revision(),
                        progress.step + 1,
                        candidate.controller.rollout.steps.len(),
                        listed(&mut units, serving_units),
                        serving.revision
                    ),
                ));
            } else {
                condition = Err(Problem::new(
                    reasons::SHADOWING,
                    format!(
                        "revision {} is evaluated without writing until it is promoted; {} \
                         serves every object",
                        candidate.revision(),
                        serving.revision
                    ),
                ));
            }
        } else if let Some(halted) = &halted {
            condition = Err(Problem::new(halted.reason.clone(), &halted.message));
        }
        // Trouble comes first: it says the rollout is not as safe as the rest reads.
        if let Some((trouble, message)) = &track.trouble {
            let rest = match &condition {
                Err(problem) => format!(" ({}: {})", problem.reason, problem.message),
                Ok(()) => String::new(),
            };
            condition = Err(Problem::new(trouble.reason(), format!("{message}{rest}")));
        }
        Some(RolloutReport { status, condition })
    }

    /// Forgets a controller's trouble of this kind, which no longer holds.
    fn clear_trouble(&self, name: &str, cleared: Trouble) {
        if let Some(track) = self.tracks.lock().get_mut(name)
            && track
                .trouble
                .as_ref()
                .is_some_and(|(trouble, _)| *trouble == cleared)
        {
            track.trouble = None;
        }
    }

    /// Notes what keeps a controller's rollout from being safe. Returns whether it is news,
    /// to be logged.
    fn trouble(&self, name: &str, trouble: Trouble, message: String) -> bool {
        let mut tracks = self.tracks.lock();
        let track = tracks.entry(name.to_string()).or_default();
        let trouble = Some((trouble, message));
        let news = track.trouble != trouble;
        track.trouble = trouble;
        news
    }

    /// Whether the serving revision's snapshot is yet to be saved.
    fn unsaved(&self, name: &str, revision: &str) -> bool {
        self.tracks
            .lock()
            .get(name)
            .is_none_or(|track| track.saved.as_deref() != Some(revision))
    }

    /// Notes that the serving revision's snapshot is saved.
    fn saved(&self, name: &str, revision: &str) {
        self.tracks
            .lock()
            .entry(name.to_string())
            .or_default()
            .saved = Some(revision.to_string());
    }

    /// Saves the serving revision's snapshot when it is not yet (by the replica that writes the
    /// controller's status: it is a write), naming the revision it replaces, and deletes the
    /// controller's other snapshots but that one (`metascript rollout undo` goes back to it).
    /// A failure shows in the `Rollout` condition and is tried again at the next load or
    /// status turn.
    async fn save(&self, context: &Context, serving: &Controller<K>) {
        let owner = Item::controller(&serving.id);
        let name = &serving.id.name;
        if !context.authority.may_write_for(&owner) || !self.unsaved(name, &serving.revision) {
            return;
        }
        let replaces = self
            .tracks
            .lock()
            .get(name)
            .and_then(|track| track.saved.clone());
        match save_snapshot(context, serving, replaces.as_deref()).await {
            Ok(()) => {
                self.saved(name, &serving.revision);
                self.clear_trouble(name, Trouble::SnapshotNotSaved);
            }
            Err(error) => {
                let message = format!(
                    "the snapshot of serving revision {} cannot be saved as ControllerRevision \
                     {}/{}: {error}; a restart or a new leader now would serve the newest \
                     revision everywhere, and undo has nothing to go back to",
                    serving.revision,
                    context.config.snapshot_namespace,
                    snapshot_name(&serving.id, &serving.revision)
                );
                // Once per new failure: it is retried every status turn.
                if self.trouble(name, Trouble::SnapshotNotSaved, message) {
                    tracing::warn!(controller = %serving.id, revision = %serving.revision, %error, "cannot save the serving revision's snapshot");
                }
            }
        }
    }
}

/// `status.rollout` as the controller object carries it.
pub(crate) fn rollout_status(object: &Value) -> Option<RolloutStatus> {
    serde_json::from_value(object.pointer("/status/rollout")?.clone()).ok()
}

/// `units`, sorted, as a condition message lists them: at most [`LISTED_UNITS`], then how
/// many more of `total` there are.
fn listed(units: &mut [String], total: u64) -> String {
    if units.is_empty() {
        return String::new();
    }
    units.sort_unstable();
    let shown = units.len().min(LISTED_UNITS);
    let more = total.saturating_sub(shown as u64);
    let rest = match more {
        0 => String::new(),
        more => format!(" and {more} more"),
    };
    format!(": {}{rest}", units[..shown].join(", "))
}

/// The candidate's work items a `Rollout` condition names.
const LISTED_UNITS: usize = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_lists_a_bounded_sorted_few_and_counts_the_rest() {
        assert_eq!(listed(&mut [], 0), "");
        let mut two = ["b".to_string(), "a".to_string()];
        assert_eq!(listed(&mut two, 2), ": a, b");
        let mut many: Vec<String> = (0..30).map(|i| format!("t-{i:02}")).collect();
        many.reverse();
        let text = listed(&mut many, 42);
        assert!(text.starts_with(": t-00, t-01,"), "{text}");
        assert!(text.ends_with("t-09 and 32 more"), "{text}");
    }
}
