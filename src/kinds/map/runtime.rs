//! MapControllers in the running operator. A parent fans out into one work item per (parent,
//! input) pair, so map calls for different pairs run in parallel; an input event reaches only
//! the parents that select it now or were fed by it before; a parent's aggregated status is
//! counted as events arrive (`tally`) and written by the status loop only when it changes.

use super::api::{KIND, MapController};
use super::bindings::Bindings;
use super::plan::Mapper;
use super::sync::{self, MapFanOut};
use super::tally::{Counted, Tallies};
use super::{MAP_KEY_LABEL, MAP_LABEL};
use crate::object;
use crate::plan::synced::{self, SyncedPlace};
use crate::plan::{Plan, SyncError};
use crate::resources::{ResolveError, ResourceResolver, ResourceType};
use crate::runtime::context::Context;
use crate::runtime::keys::{ControllerId, Group, ObjRef, Work, WorkKey};
use crate::runtime::kind::{Controller, Interest, Kind, Outcome};
use crate::runtime::replicas::shard::{self, Item};
use crate::runtime::report::problem::Problem;
use crate::runtime::watch::event::ObjectEvent;
use crate::runtime::write::apply::{PlanTarget, Written};
use crate::runtime::write::fingerprint::{self, Seen, Sweep};
use crate::script::{CallScope, EventSink};
use crate::store::ObjectStore;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

pub struct MapKind;

impl Kind for MapKind {
    type Object = MapController;
    type Planner = Mapper;
    type State = Bindings;
    type OutcomeKey = Group;

    fn build(
        controller: &MapController,
        resolver: &dyn ResourceResolver,
    ) -> Result<Mapper, ResolveError> {
        Mapper::new(controller, resolver)
    }

    fn interest(mapper: &Mapper) -> Interest {
        Interest {
            types: std::iter::once(&mapper.parent)
                .chain(&mapper.inputs)
                .chain(mapper.outputs.iter().map(|o| &o.resource))
                .cloned()
                .collect(),
            every_type: false,
        }
    }

    /// A first version fills the output index from the cache; it is installed first, so events
    /// from then on are indexed too (an output seen twice is filed once).
    async fn installed(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        _object: &Value,
        first: bool,
    ) {
        if !first {
            return;
        }
        for output_type in output_types(&controller.planner) {
            for output in context.informers.list(&output_type, None) {
                if let Some(group) = output_group(controller, &output) {
                    let output = ObjRef::of(&output_type, &output);
                    controller.state.index_output(&output, Some(group));
                }
            }
        }
    }

    /// Outputs are owned by their parents, which outlive the controller: nothing to release.
    async fn release(_: &Arc<Context>, _: &ControllerId, _: &Value) -> Result<(), Problem> {
        Ok(())
    }

    /// Every parent, each fanning out into its pairs when its work item runs. A resync fans
    /// the parents out here instead, so that the pairs it skips are never queued; a parent
    /// that cannot fan out goes through its own work item, which records why.
    fn enqueue_all(context: &Context, controller: &Controller<Self>, sweep: Sweep) -> u64 {
        let mapper = &controller.planner;
        let mut skipped = 0;
        for parent in context.informers.list(&mapper.parent, None) {
            let parent_ref = ObjRef::of(&mapper.parent, &parent);
            let read = match sweep {
                Sweep::Changed => read_fan_out(context, controller, &parent_ref),
                Sweep::Everything => {
                    controller.enqueue(context, Work::Object(parent_ref));
                    continue;
                }
            };
            match read {
                Ok(Some((parent, fan_out))) => {
                    skipped +=
                        fan_out_parent(context, controller, &parent_ref, &parent, &fan_out, sweep);
                }
                // Deleted since the list: its deletion event has it forgotten.
                Ok(None) => {}
                Err(_) => controller.enqueue(context, Work::Object(parent_ref)),
            }
        }
        skipped
    }

    fn route(context: &Context, controller: &Controller<Self>, event: &ObjectEvent) {
        let Some(object) = event.head() else {
            return;
        };
        let mapper = &controller.planner;
        // A parent (a deleted one too, to be forgotten), unless only its status changed (the
        // status this controller aggregates there).
        let news = controller.is_news(event);
        if event.resource == mapper.parent && news {
            let parent = ObjRef::of(&event.resource, object);
            let status_only = event.only_status_changed();
            if status_only {
                // Compared with the counts, and written back if someone else changed them.
                controller.state.status_changed(&parent);
            } else {
                // A new selector: nothing is written from the counts of the old selection;
                // the parent's work item or the status loop, whichever comes first, counts it
                // again.
                let reselects = !matches!((&event.old, &event.new), (Some(old), Some(new)) if old.pointer("/spec/selector") == new.pointer("/spec/selector"));
                if let Some(tallies) = tallies(controller).filter(|_| reselects) {
                    tallies.forget(&parent);
                    controller.state.status_changed(&parent);
                }
                controller.enqueue(context, Work::Object(parent));
            }
        }
        // A listed input that is not news is counted by the parents' count that follows it.
        if mapper.inputs.contains(&event.resource) && news {
            route_input(context, controller, event, object);
        }
        if mapper.outputs.iter().any(|o| o.resource == event.resource) {
            route_output(context, controller, event, object);
        }
    }

    fn recovered(controller: &Controller<Self>, group: &Group) {
        controller.state.status_changed(&group.parent);
    }

    /// Not when sharded: a parent's pairs are spread over the replicas, and none of them
    /// knows whether all of them went well.
    fn synced_on(
        context: &Context,
        mapper: &Mapper,
        _: &Value,
    ) -> Option<(SyncedPlace, ResourceType)> {
        if context.config.shards.is_some() {
            return None;
        }
        let resource = &mapper.parent;
        resource
            .has_status
            .then(|| (SyncedPlace::parent(), resource.clone()))
    }

    /// A pair is its input's group; a parent's fan-out is either revision's.
    fn rollout_unit(work: &Work) -> Option<Group> {
        match work {
            Work::Pair { parent, input } => Some(Group {
                parent: parent.clone(),
                key: input.identity_digest(),
            }),
            Work::Group(group) => Some(group.clone()),
            Work::Object(_) | Work::Load => None,
        }
    }

    async fn sync(
        context: &Arc<Context>,
        controller: &Arc<Controller<Self>>,
        work: &Work,
    ) -> Outcome<Group> {
        match work {
            Work::Object(parent) => sync_parent(context, controller, parent),
            Work::Pair { parent, input } => sync_pair(context, controller, parent, input).await,
            Work::Group(group) => sync_group(context, controller, group).await,
            Work::Load => Outcome::Done,
        }
    }

    /// The aggregated status of every parent that may have changed.
    async fn report(context: &Arc<Context>, controller: &Arc<Controller<Self>>) {
        for parent in controller.state.take_dirty_status() {
            write_parent_status(context, controller, &parent).await;
        }
    }
}

fn output_types(mapper: &Mapper) -> Vec<ResourceType> {
    mapper.outputs.iter().map(|o| o.resource.clone()).collect()
}

/// An input: counted (as the cache holds it now) by the parents that select it, and the pairs
/// of the parents that select it now, selected it before, or were fed by it (which covers a
/// label change that moved it out of every selector, and its deletion).
fn route_input(
    context: &Context,
    controller: &Controller<MapKind>,
    event: &ObjectEvent,
    object: &Value,
) {
    let mapper = &controller.planner;
    let input = ObjRef::of(&event.resource, object);
    let tallies = tallies(controller);
    let current = tallies.and_then(|_| context.get(&input));
    let mut parents: HashSet<ObjRef> = controller
        .state
        .parents_fed_by(&input)
        .into_iter()
        .collect();
    let namespace = mapper.parent.scope_of(object);
    for parent in context.informers.list(&mapper.parent, namespace) {
        let Ok(selector) = mapper.parent_selector(&parent) else {
            continue;
        };
        let parent_ref = ObjRef::of(&mapper.parent, &parent);
        if let Some(tallies) = tallies {
            let selected = current
                .as_deref()
                .filter(|input| mapper.selects_input(&parent, &selector, input))
                .and_then(|input| mapper.input_type_of(input))
                .cloned();
            if tallies.note(&parent_ref, Counted::Input(input.clone(), selected)) {
                controller.state.status_changed(&parent_ref);
            }
        }
        let selects = [&event.old, &event.new]
            .into_iter()
            .flatten()
            .any(|version| mapper.selects_input(&parent, &selector, version.head()));
        if selects {
            parents.insert(parent_ref);
        }
    }
    for parent in parents {
        let input = input.clone();
        controller.enqueue(context, Work::Pair { parent, input });
    }
}

/// An output: kept in the index and in its parent's counts, and its pair (or detached group)
/// looked at again.
fn route_output(
    context: &Context,
    controller: &Controller<MapKind>,
    event: &ObjectEvent,
    object: &Value,
) {
    let output = ObjRef::of(&event.resource, object);
    let group = event
        .new
        .as_ref()
        .and_then(|new| output_group(controller, new.head()));
    controller.state.index_output(&output, group);
    count_output(context, controller, event, &output);
    if object::label(object, MAP_LABEL) != Some(controller.id.name.as_str()) {
        return;
    }
    let Some(parent) = ObjRef::owner_of(&controller.planner.parent, object) else {
        return;
    };
    // An output exactly as this controller's apply left it needs no second map call.
    let own = context.applier.own_writes.is_own(&controller.id, event);
    if let Some(map_key) = object::label(object, MAP_KEY_LABEL).filter(|_| !own) {
        let group = Group {
            parent: parent.clone(),
            key: map_key.to_string(),
        };
        let work = match controller.state.input_of(&group) {
            Some(input) => Work::Pair {
                parent: parent.clone(),
                input,
            },
            None => Work::Group(group),
        };
        controller.enqueue(context, work);
    }
}

/// Moves an output, as the cache holds it now, in or out of the counts of every parent its
/// versions name (an output that changed hands leaves its former parent's).
fn count_output(
    context: &Context,
    controller: &Controller<MapKind>,
    event: &ObjectEvent,
    output: &ObjRef,
) {
    let Some(tallies) = tallies(controller) else {
        return;
    };
    let mapper = &controller.planner;
    let current = context.get(output);
    let mut parents: Vec<ObjRef> = Vec::new();
    for version in [
        event.old.as_ref().map(|old| old.head()),
        event.new.as_ref().map(|new| new.head()),
        current.as_deref(),
    ] {
        let owner = version.and_then(|version| ObjRef::owner_of(&mapper.parent, version));
        if let Some(owner) = owner.filter(|owner| !parents.contains(owner)) {
            parents.push(owner);
        }
    }
    for parent_ref in parents {
        let owned = current.as_deref().filter(|output| {
            context
                .get(&parent_ref)
                .is_some_and(|parent| mapper.owns(&parent, output))
        });
        let counted = owned
            .and_then(|output| mapper.output_counted(output))
            .map(|(output_type, conditions)| (output_type.clone(), conditions));
        if tallies.note(&parent_ref, Counted::Output(output.clone(), counted)) {
            controller.state.status_changed(&parent_ref);
        }
    }
}

/// The parents' counts, when this controller keeps them: a candidate revision of a staged
/// rollout shares the serving revision's state, and only the serving revision counts.
fn tallies(controller: &Controller<MapKind>) -> Option<&Tallies> {
    controller
        .share
        .is_none()
        .then(|| controller.state.tallies())
}

/// The group an object belongs to as one of this controller's outputs.
fn output_group(controller: &Controller<MapKind>, output: &Value) -> Option<Group> {
    if object::label(output, MAP_LABEL) != Some(controller.id.name.as_str()) {
        return None;
    }
    Some(Group {
        parent: ObjRef::owner_of(&controller.planner.parent, output)?,
        key: object::label(output, MAP_KEY_LABEL)?.to_string(),
    })
}

/// The group standing for the parent itself (its selector), apart from every input's.
fn parent_group(parent: &ObjRef) -> Group {
    Group {
        parent: parent.clone(),
        key: String::new(),
    }
}

/// A parent fans out: one pair per selected input, one item per detached output group, then
/// its status. A deleted parent is forgotten (the garbage collector deletes its outputs).
fn sync_parent(
    context: &Context,
    controller: &Controller<MapKind>,
    parent_ref: &ObjRef,
) -> Outcome<Group> {
    let (parent, fan_out) = match read_fan_out(context, controller, parent_ref) {
        Ok(Some(read)) => read,
        Ok(None) => {
            controller
                .outcomes
                .forget_where(|group| group.parent == *parent_ref);
            controller.state.forget_parent(parent_ref);
            return Outcome::Done;
        }
        // Every replica fans out; the failure is the parent's owner's to count and report.
        Err(_)
            if !context
                .authority
                .assigned(&Item::object(&controller.id, parent_ref)) =>
        {
            return Outcome::Done;
        }
        // Counted as a failing group of the parent until its selector is fixed (a parent
        // deleted meanwhile is forgotten by its deletion's work item).
        Err(error) => {
            let Some(parent) = context.get(parent_ref) else {
                return Outcome::Done;
            };
            return Outcome::Failed {
                key: parent_group(parent_ref),
                about: parent,
                failure: error.into(),
            };
        }
    };
    fan_out_parent(
        context,
        controller,
        parent_ref,
        &parent,
        &fan_out,
        Sweep::Everything,
    );
    Outcome::Forgotten(parent_group(parent_ref))
}

/// Queues a parent's pairs (with [`Sweep::Changed`], those whose fingerprint changed) and its
/// detached groups, and has the status loop write its status when it differs from the counts
/// of this fan-out. Returns how many pairs it skipped.
fn fan_out_parent(
    context: &Context,
    controller: &Controller<MapKind>,
    parent_ref: &ObjRef,
    parent: &Value,
    fan_out: &MapFanOut,
    sweep: Sweep,
) -> u64 {
    let mapper = &controller.planner;
    // The parent's part of every pair's fingerprint, once.
    let parent_seen = (sweep == Sweep::Changed).then(|| parent_seen(parent));
    let mut skipped = 0;
    for input in &fan_out.inputs {
        let Some(input_type) = mapper.input_type_of(input) else {
            continue;
        };
        let input_ref = ObjRef::of(input_type, input);
        if let Some(parent_seen) = &parent_seen
            && pair_unchanged(
                context,
                controller,
                parent_seen,
                parent_ref,
                parent,
                &input_ref,
                input,
            )
        {
            skipped += 1;
            continue;
        }
        let parent = parent_ref.clone();
        controller.enqueue(
            context,
            Work::Pair {
                parent,
                input: input_ref,
            },
        );
    }
    for (map_key, _) in fan_out.detached(mapper) {
        let parent = parent_ref.clone();
        controller.enqueue(
            context,
            Work::Group(Group {
                parent,
                key: map_key,
            }),
        );
    }
    // Counted afresh as the fan-out was read: the status loop compares the counts.
    controller.state.status_changed(parent_ref);
    skipped
}

/// Reads a parent's fan-out, with the parent as the cache holds it now (`None`: it is gone),
/// and counts it afresh for its status (see [`Tallies::recount`]).
///
/// [`Tallies::recount`]: super::tally::Tallies::recount
fn read_fan_out(
    context: &Context,
    controller: &Controller<MapKind>,
    parent_ref: &ObjRef,
) -> Result<Option<(Arc<Value>, MapFanOut)>, SyncError> {
    let mapper = &controller.planner;
    let read = || {
        let Some(parent) = context.get(parent_ref) else {
            return Ok(None);
        };
        let fan_out = MapFanOut::read(mapper, &*context.informers, &parent)?;
        Ok(Some((parent, fan_out)))
    };
    let Some(tallies) = tallies(controller) else {
        return read();
    };
    tallies.recount(parent_ref, read, |(_, fan_out), count| {
        for input in &fan_out.inputs {
            if let Some(input_type) = mapper.input_type_of(input) {
                let input_ref = ObjRef::of(input_type, input);
                count(Counted::Input(input_ref, Some(input_type.clone())));
            }
        }
        for output in &fan_out.outputs {
            if let Some((output_type, conditions)) = mapper.output_counted(output) {
                let output_ref = ObjRef::of(output_type, output);
                count(Counted::Output(
                    output_ref,
                    Some((output_type.clone(), conditions)),
                ));
            }
        }
    })
}

/// The parent as every map call of it sees it. The counts this controller aggregates into
/// its status are left out: they move with every pair's outputs, and a pair is not mapped
/// again when only they change (a status-only parent event queues no work), so a resync does
/// not map it again for them either.
fn parent_seen(parent: &Value) -> Seen {
    let mut seen = Seen::default();
    // A map parent's status is the operator's: counts and its `Synced` condition.
    seen.content(
        parent,
        &["/status/inputs", "/status/outputs", "/status/conditions"],
    );
    seen
}

/// What a map call for a pair builds its request from: the parent, the input and the
/// outputs of the input's map key.
fn pair_seen(parent_seen: &Seen, input: &Value, outputs: &[Arc<Value>]) -> Seen {
    let mut seen = parent_seen.clone();
    seen.object(input);
    for output in outputs {
        seen.object(output);
    }
    seen
}

/// Whether a pair's last map call was pure and saw exactly what the cache holds now.
fn pair_unchanged(
    context: &Context,
    controller: &Controller<MapKind>,
    parent_seen: &Seen,
    parent_ref: &ObjRef,
    parent: &Value,
    input_ref: &ObjRef,
    input: &Value,
) -> bool {
    let group = Group {
        parent: parent_ref.clone(),
        key: Mapper::map_key(input),
    };
    let Some(recorded) = controller.outcomes.fingerprint(&group) else {
        return false;
    };
    let outputs = group_outputs(context, controller, parent, &group);
    let reads = context.current_reads(&controller.id, || Work::Pair {
        parent: parent_ref.clone(),
        input: input_ref.clone(),
    });
    pair_seen(parent_seen, input, &outputs).fingerprint(controller.version, reads) == recorded
}

/// One (parent, input) pair: map a selected input, or settle the outputs of one that is gone
/// or no longer selected (tombstone hook, or deletion).
async fn sync_pair(
    context: &Arc<Context>,
    controller: &Arc<Controller<MapKind>>,
    parent_ref: &ObjRef,
    input_ref: &ObjRef,
) -> Outcome<Group> {
    let input = context.get(input_ref);
    let group = Group {
        parent: parent_ref.clone(),
        key: input_ref.identity_digest(),
    };
    let Some(parent) = context.get(parent_ref) else {
        controller.state.unbind(&group, input_ref);
        return Outcome::Forgotten(group);
    };
    let mapper = &controller.planner;
    let selected = match mapper.parent_selector(&parent) {
        Ok(selector) => input
            .as_ref()
            .is_some_and(|i| mapper.selects_input(&parent, &selector, i)),
        Err(error) => {
            return Outcome::Failed {
                key: group,
                about: parent,
                failure: SyncError::from(error).into(),
            };
        }
    };
    // The map or tombstone hook's reads are what this pair depends on.
    let scope = controller.scope(context, &mapper.reads);
    let mut seen = None;
    let result = match input.filter(|_| selected) {
        Some(input) => {
            controller.state.bind(&group, input_ref);
            let outputs = group_outputs(context, controller, &parent, &group);
            let parent_seen = controller
                .state
                .parent_seen(parent_ref, &parent, parent_seen);
            seen = Some(pair_seen(&parent_seen, &input, &outputs));
            let (mapper, parent) = (mapper.clone(), parent.clone());
            context
                .blocking(
                    &controller.id,
                    &controller.hooks,
                    &scope,
                    move |context, runner| {
                        let reads = sync::observed_scopes(&mapper, &parent);
                        crate::plan::admit(runner.scope, &mapper.name, &reads)?;
                        let observed: Vec<&Value> = outputs.iter().map(Arc::as_ref).collect();
                        sync::map_input(
                            &mapper,
                            runner,
                            &*context.informers,
                            &parent,
                            &input,
                            &observed,
                        )
                    },
                )
                .await
        }
        None => {
            controller.state.unbind(&group, input_ref);
            settle_detached(context, controller, &parent, &group, &scope).await
        }
    };
    let pair = Work::Pair {
        parent: parent_ref.clone(),
        input: input_ref.clone(),
    };
    context.record_reads(&WorkKey::new(&controller.id, pair), &scope);
    publish_events(context, controller, &parent, &scope.events, &result).await;
    finish(context, controller, parent, group, &scope, seen, result).await
}

/// An output group whose input is unknown: mapped again if a selected input has its key,
/// otherwise detached. The input is looked up in the cache when this replica has not bound it
/// (it has not mapped that pair yet: after a start, a takeover or a handover of the group),
/// so live outputs are never taken for detached ones.
async fn sync_group(
    context: &Arc<Context>,
    controller: &Arc<Controller<MapKind>>,
    group: &Group,
) -> Outcome<Group> {
    let Some(parent) = context.get(&group.parent) else {
        return Outcome::Forgotten(group.clone());
    };
    let input = match controller.state.input_of(group) {
        Some(input) => Some(input),
        None => match selected_input(context, controller, &parent, &group.key) {
            Ok(input) => input,
            // An unreadable selector detaches nothing.
            Err(error) => {
                return Outcome::Failed {
                    key: group.clone(),
                    about: parent,
                    failure: error.into(),
                };
            }
        },
    };
    if let Some(input) = input {
        let parent = group.parent.clone();
        controller.enqueue(context, Work::Pair { parent, input });
        return Outcome::Done;
    }
    let scope = controller.scope(context, &controller.planner.reads);
    let result = settle_detached(context, controller, &parent, group, &scope).await;
    let key = WorkKey::new(&controller.id, Work::Group(group.clone()));
    context.record_reads(&key, &scope);
    publish_events(context, controller, &parent, &scope.events, &result).await;
    finish(
        context,
        controller,
        parent,
        group.clone(),
        &scope,
        None,
        result,
    )
    .await
}

/// The input of a parent's selection whose map key is `key`, as the cache has it now.
fn selected_input(
    context: &Context,
    controller: &Controller<MapKind>,
    parent: &Value,
    key: &str,
) -> Result<Option<ObjRef>, SyncError> {
    let mapper = &controller.planner;
    let fan_out = MapFanOut::read(mapper, &*context.informers, parent)?;
    let input = fan_out
        .inputs
        .iter()
        .find(|input| Mapper::map_key(input) == key);
    Ok(input.and_then(|input| {
        let input_type = mapper.input_type_of(input)?;
        Some(ObjRef::of(input_type, input))
    }))
}

/// A map hook's Events are about the parent: the object users `kubectl describe` for the
/// mapping it asked for. None when planning failed (see [`Context::publish_script_events`]).
async fn publish_events(
    context: &Context,
    controller: &Controller<MapKind>,
    parent: &Value,
    events: &EventSink,
    planned: &Result<Plan, Problem>,
) {
    if planned.is_err() {
        return;
    }
    context
        .publish_script_events(parent, &controller.reference, KIND.action(), events)
        .await;
}

/// The outputs of a group, from the index, as the cache has them now.
fn group_outputs(
    context: &Context,
    controller: &Controller<MapKind>,
    parent: &Value,
    group: &Group,
) -> Vec<Arc<Value>> {
    controller
        .state
        .outputs_of(group)
        .iter()
        .filter_map(|output| context.get(output))
        // The index may briefly hold an output that changed hands; the object decides.
        .filter(|o| {
            controller.planner.owns(parent, o)
                && object::label(o, MAP_KEY_LABEL) == Some(group.key.as_str())
        })
        .collect()
}

async fn settle_detached(
    context: &Arc<Context>,
    controller: &Arc<Controller<MapKind>>,
    parent: &Arc<Value>,
    group: &Group,
    scope: &CallScope,
) -> Result<Plan, Problem> {
    let detached = group_outputs(context, controller, parent, group);
    if detached.is_empty() {
        return Ok(Plan::default());
    }
    let (mapper, parent, map_key) = (
        controller.planner.clone(),
        parent.clone(),
        group.key.clone(),
    );
    context
        .blocking(
            &controller.id,
            &controller.hooks,
            scope,
            move |_, runner| {
                let reads = sync::observed_scopes(&mapper, &parent);
                crate::plan::admit(runner.scope, &mapper.name, &reads)?;
                let observed: Vec<&Value> = detached.iter().map(Arc::as_ref).collect();
                sync::plan_detached(&mapper, runner, &parent, map_key, &observed).result
            },
        )
        .await
}

/// Applies a group's plan, planned in `scope`. Only live groups (a selected input, with what
/// its map call saw) count in status and may be skipped by a resync.
async fn finish(
    context: &Arc<Context>,
    controller: &Arc<Controller<MapKind>>,
    parent: Arc<Value>,
    group: Group,
    scope: &CallScope,
    live: Option<Seen>,
    result: Result<Plan, Problem>,
) -> Outcome<Group> {
    let applied = match result {
        Ok(plan) if plan.is_noop() => Ok(Written::default()),
        Ok(plan) => {
            let child_types = output_types(&controller.planner);
            let target = PlanTarget {
                object: &parent,
                resource: &controller.planner.parent,
                child_types: &child_types,
                controller: &controller.id,
                writer: &controller.writer,
            };
            context
                .applier
                .execute(&target, &plan)
                .await
                .map_err(Problem::from)
        }
        Err(failure) => Err(failure),
    };
    // The parent's counts move with the events of what this wrote, which mark its status.
    match (applied, live) {
        (Ok(written), Some(seen)) => Outcome::Synced {
            key: group,
            resync_after: None,
            fingerprint: fingerprint::after_sync(controller.version, seen, &written, scope),
        },
        (Ok(_), None) => Outcome::Forgotten(group),
        (Err(failure), _) => Outcome::Failed {
            key: group,
            about: parent,
            failure: failure.scrubbed(&scope.secrets),
        },
    }
}

/// Writes a parent's aggregated status when its counts changed it. Runs in the
/// status loop rather than the work queue, so the counts never wait behind a long queue;
/// sharded, on the replica that owns the parent.
async fn write_parent_status(
    context: &Context,
    controller: &Controller<MapKind>,
    parent_ref: &ObjRef,
) {
    let item = Item::object(&controller.id, parent_ref);
    if !context.authority.assigned(&item) {
        return;
    }
    let mapper = &controller.planner;
    let Some(tallies) = tallies(controller) else {
        return;
    };
    let counts = tallies.counts(parent_ref, mapper).or_else(|| {
        // Forgotten when its selector changed, and its work item has not counted it again
        // (it waits in the queue, or was skipped while leadership lapsed): counted here.
        let read = read_fan_out(context, controller, parent_ref);
        read.ok()
            .flatten()
            .and_then(|_| tallies.counts(parent_ref, mapper))
    });
    let (Some(parent), Some(counts)) = (context.get(parent_ref), counts) else {
        return;
    };
    let mut plan = Plan {
        status: mapper.status_change(&parent, &counts),
        ..Plan::default()
    };
    // True only while none of its pairs fails (each failure wrote it False).
    let failing = || {
        controller
            .outcomes
            .any_failed(|group| &group.parent == parent_ref)
    };
    let clear = if !synced::is_true(&parent, synced::SYNCED) && !failing() {
        crate::runtime::sync::synced::succeeded(context, controller, &parent, &mut plan)
    } else {
        None
    };
    let target = PlanTarget {
        object: &parent,
        resource: &mapper.parent,
        child_types: &[],
        controller: &controller.id,
        writer: &controller.writer,
    };
    let written = match plan.is_noop() {
        true => Ok(Written::default()),
        false => shard::acting_for(item, context.applier.execute(&target, &plan)).await,
    };
    match written {
        Ok(written) => {
            let clearing = crate::runtime::sync::synced::write_alone(
                context, controller, &parent, clear, &written,
            );
            shard::acting_for(item, clearing).await;
        }
        Err(error) => {
            tracing::warn!(controller = %controller.id, parent = %parent_ref, %error, "cannot write aggregated status");
            controller.state.status_changed(parent_ref);
        }
    }
}
