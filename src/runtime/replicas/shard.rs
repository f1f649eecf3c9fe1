//! Sharding (`metascript run --shards auto`): every replica is active, and each work item is
//! written by exactly one live replica. Membership is a `coordination.k8s.io/v1` Lease per
//! replica, renewed and listed by [`crate::runtime::replicas::membership`]; this module is what follows from it:
//! who owns an item, and whether this replica may write one now. The protocol, its timings and
//! why it never lets two replicas write one item at once are in docs/operations.md
//! ("Sharding"). In short:
//!
//! - **Assignment**: an item belongs to the member with the highest sha256(member, item)
//!   (rendezvous hashing), so a replica that joins takes about 1/N of the items and one that
//!   leaves hands over only its own.
//! - **A view is good for a while**: a replica writes an item only while its last list of the
//!   members, *sent* less than `fresh_for` ago, says it owns it.
//! - **Its own lease too**: only until its last renewal was sent plus the lease duration minus
//!   a margin (its fence); a renewal answered after the fence counts as rejoining.
//! - **Newcomers wait**: after (re)joining while other replicas are members, a replica writes
//!   nothing for `warm_up` (longer than `fresh_for`): by then every view listed before it
//!   joined, the only kind that can give its items to another replica, has gone stale.
//! - **A member is gone** when its Lease is deleted, released, or seen unchanged for its
//!   duration, measured by the observer from the first sight of that renewal (clocks need not
//!   agree): by then its own fence had passed.
//!
//! So two replicas writing one item at one moment would each hold a fresh view naming itself
//! the owner. A view lacking the other replica means that one cannot write (it had not joined
//! when the view was listed and is still waiting, or its fence had passed); views holding both
//! give the item to the same one of them.

use crate::object;
use crate::runtime::keys::{ControllerId, Group, ObjRef, Work, WorkKey};
use crate::runtime::report::metrics::Metrics;
use crate::runtime::report::status::Counts;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Where the replicas' Leases live, who this replica is, and how long a Lease lasts.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    pub namespace: String,
    /// Replicas with the same group share the work; their Leases carry it as a label.
    pub group: String,
    /// Unique among the live replicas (the pod name, plus something unique to the process).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal.
    pub duration: Duration,
}

impl ShardConfig {
    /// The label every Lease of a group carries.
    pub(crate) const GROUP_LABEL: &str = "metascript.dev/shard-group";

    /// This replica's Lease: the group and a digest of the identity (which need not be a valid
    /// object name).
    pub(crate) fn lease_name(&self) -> String {
        format!(
            "{}-{}",
            self.group,
            &object::short_digest(&self.identity)[..10]
        )
    }

    /// A replica renews this often: three chances before its fence.
    pub(crate) fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    /// How long before others may think its Lease expired a replica stops writing: room for
    /// clocks that run at slightly different rates.
    pub(crate) fn margin(&self) -> Duration {
        (self.duration / 5).max(Duration::from_secs(1))
    }

    /// A replica lists the members this often (a list of a few small Leases).
    pub(crate) fn list_every(&self) -> Duration {
        (self.duration / 10).clamp(Duration::from_millis(250), Duration::from_secs(2))
    }

    /// How long a list of the members may be used after it was sent (several lists fit in it,
    /// so one slow answer does not stop the writes).
    pub(crate) fn fresh_for(&self) -> Duration {
        self.duration / 2
    }

    /// How long a replica that (re)joined beside others waits before writing: longer than any
    /// view listed before it joined is used.
    pub(crate) fn warm_up(&self) -> Duration {
        self.fresh_for() + self.margin()
    }
}

/// The identity of what a write is made for: a controller's own business (its status, its
/// finalizer, releasing what it held), an object it acts on (a target, a parent), or one group
/// of a map parent's outputs. One replica owns each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Item([u8; 32]);

impl Item {
    pub(crate) fn controller(controller: &ControllerId) -> Item {
        Item::digest(&["controller", controller.kind.as_str(), &controller.name])
    }

    pub(crate) fn object(controller: &ControllerId, object: &ObjRef) -> Item {
        Item::digest(&[
            "object",
            controller.kind.as_str(),
            &controller.name,
            &object.identity_digest(),
        ])
    }

    /// A map parent's outputs of one map key. The group with no key stands for the parent
    /// itself (its selector), and is the parent's.
    pub(crate) fn group(controller: &ControllerId, parent: &ObjRef, key: &str) -> Item {
        if key.is_empty() {
            return Item::object(controller, parent);
        }
        Item::digest(&[
            "group",
            controller.kind.as_str(),
            &controller.name,
            &parent.identity_digest(),
            key,
        ])
    }

    /// What a work item writes for. A map pair is its input's group (the map key is a digest
    /// of the input's identity), so the pair and an item settling that group's outputs are
    /// always the same replica's.
    pub(crate) fn of(key: &WorkKey) -> Item {
        let controller = &key.controller;
        match &key.work {
            Work::Load => Item::controller(controller),
            Work::Object(object) => Item::object(controller, object),
            Work::Pair { parent, input } => {
                Item::group(controller, parent, &input.identity_digest())
            }
            Work::Group(group) => Item::group(controller, &group.parent, &group.key),
        }
    }

    fn digest(parts: &[&str]) -> Item {
        let mut hasher = Sha256::new();
        for part in parts {
            // Lengths first, so no two different lists of parts hash the same bytes.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        Item(hasher.finalize().into())
    }
}

/// What a kind keeps outcomes by, as the item whose owner keeps them.
pub trait Sharded {
    fn item(&self, controller: &ControllerId) -> Item;
}

impl Sharded for ObjRef {
    fn item(&self, controller: &ControllerId) -> Item {
        Item::object(controller, self)
    }
}

impl Sharded for Group {
    fn item(&self, controller: &ControllerId) -> Item {
        Item::group(controller, &self.parent, &self.key)
    }
}

/// A live replica, as rendezvous hashing sees it.
#[derive(Clone, Debug)]
struct Member {
    identity: String,
    digest: [u8; 32],
}

impl Member {
    fn new(identity: String) -> Member {
        let digest = Sha256::digest(identity.as_bytes()).into();
        Member { identity, digest }
    }

    /// The member's weight for an item: the first 8 bytes of sha256(member, item).
    fn score(&self, item: &Item) -> u64 {
        let mut hasher = Sha256::new();
        hasher.update(self.digest);
        hasher.update(item.0);
        let digest = hasher.finalize();
        u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
    }
}

/// The member that owns an item: the highest score (ties, which need a sha256 collision in 64
/// bits, go to the greater identity so every replica still agrees).
fn owner<'a>(members: &'a [Member], item: &Item) -> Option<&'a Member> {
    members
        .iter()
        .map(|member| ((member.score(item), &member.identity), member))
        .max_by(|(a, _), (b, _)| a.cmp(b))
        .map(|(_, member)| member)
}

/// The members as one view listed them, apart from the view: which items this replica owns,
/// whether or not it may write now (what its caches keep whole).
#[derive(Clone, Debug)]
pub(crate) struct Assignment {
    members: Vec<Member>,
    me: String,
}

impl Assignment {
    /// Before any view: this replica owns nothing.
    pub(crate) fn nothing() -> Assignment {
        Assignment {
            members: Vec::new(),
            me: String::new(),
        }
    }

    pub(crate) fn owns(&self, item: &Item) -> bool {
        owner(&self.members, item).is_some_and(|member| member.identity == self.me)
    }
    /// `me` among `members`, as a view listing them would say.
    #[cfg(test)]
    pub(crate) fn of(members: &[&str], me: &str) -> Assignment {
        Assignment {
            members: members.iter().map(|m| Member::new(m.to_string())).collect(),
            me: me.to_string(),
        }
    }
}

/// What one replica tells the others in its Lease: its counts per controller, which the
/// replica owning a controller adds up into its status.
pub(crate) type Report = BTreeMap<String, Counts>;

/// The members as one list of the Leases showed them.
#[derive(Debug)]
struct View {
    /// Sorted by identity.
    members: Vec<Member>,
    /// When that list was sent: the view is good for `fresh_for` from then.
    listed: Instant,
    /// What every other member reported, by identity.
    reports: HashMap<String, Report>,
}

impl View {
    fn identities(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|m| m.identity.as_str())
    }
}

#[derive(Debug, Default)]
struct State {
    /// Writes stop then: the last renewal's send time plus the duration minus the margin.
    fence: Option<Instant>,
    /// A (re)join answered then waits for a view listed after it to decide its warm-up.
    joining: Option<Instant>,
    /// Writes start then (after the warm-up, if any).
    writable_from: Option<Instant>,
    view: Option<View>,
    /// This replica's own report, carried by its next renewal.
    report: Report,
}

/// Whether a work item runs here now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    Run,
    /// This replica owns it but may not write yet (warming up, or its view or lease lapsed):
    /// look again then.
    Later(Duration),
    /// Another replica's.
    Skip,
}

/// This replica's part in sharding: its lease, its view of the members, and the metrics that
/// show them.
pub struct Shards {
    config: ShardConfig,
    me: Member,
    state: Mutex<State>,
    /// Bumped whenever the members change, so the operator looks for the items it gained.
    changes: watch::Sender<u64>,
    metrics: Metrics,
}

impl Shards {
    pub(crate) fn new(config: ShardConfig, metrics: Metrics) -> Shards {
        Shards {
            me: Member::new(config.identity.clone()),
            config,
            state: Mutex::default(),
            changes: watch::Sender::new(0),
            metrics,
        }
    }

    pub(crate) fn config(&self) -> &ShardConfig {
        &self.config
    }

    /// A renewal (or the creation) of this replica's Lease, sent and answered then. It keeps
    /// the replica a member without a break only if answered before the fence; otherwise the
    /// others may have dropped it meanwhile, and it joins again.
    pub(crate) fn renewed(&self, sent: Instant, answered: Instant) {
        let fence = sent + self.config.duration - self.config.margin();
        if answered >= fence {
            // Answered after the fence it would set (the replica was frozen, or the API slow):
            // worth nothing; the next renewal, sent afresh, counts.
            return;
        }
        let mut state = self.state.lock();
        let continuous = state.fence.is_some_and(|fence| answered < fence);
        state.fence = Some(fence);
        if !continuous {
            tracing::info!(identity = %self.config.identity, "joined the shards");
            state.joining = Some(answered);
            state.writable_from = None;
        }
        self.publish_writable(&state);
    }

    /// This replica's Lease is gone (deleted, or never created): writes stop at once.
    pub(crate) fn lost(&self) {
        if self.stop() {
            tracing::warn!(identity = %self.config.identity, "this replica's Lease is gone; writes stop");
        }
    }

    /// Stops every write at once (the replica leaves, or lost its Lease); whether it was a
    /// member.
    pub(crate) fn stop(&self) -> bool {
        let mut state = self.state.lock();
        let was_member = state.fence.take().is_some();
        state.joining = None;
        state.writable_from = None;
        self.publish_writable(&state);
        was_member
    }

    /// A list of the members, sent then, with what each reported.
    pub(crate) fn listed(&self, sent: Instant, members: Vec<(String, Report)>) {
        let mut state = self.state.lock();
        let mut reports = HashMap::new();
        let mut listed: Vec<Member> = Vec::with_capacity(members.len());
        for (identity, report) in members {
            if identity != self.me.identity {
                reports.insert(identity.clone(), report);
            }
            listed.push(Member::new(identity));
        }
        listed.sort_by(|a, b| a.identity.cmp(&b.identity));
        let view = View {
            members: listed,
            listed: sent,
            reports,
        };
        let includes_me = view.identities().any(|m| m == self.me.identity);
        if let Some(joined) = state.joining
            && sent >= joined
            && includes_me
        {
            let alone = view.members.len() == 1;
            state.joining = None;
            // Alone, nobody can hold a view that gives this replica's items to someone else.
            let from = if alone {
                sent
            } else {
                joined + self.config.warm_up()
            };
            state.writable_from = Some(from);
            tracing::info!(
                members = view.members.len(),
                warm_up_seconds = from.saturating_duration_since(sent).as_secs_f64(),
                "member of the shards"
            );
        }
        let changed = state
            .view
            .as_ref()
            .is_none_or(|old| !old.identities().eq(view.identities()));
        if changed {
            let members: Vec<&str> = view.identities().collect();
            tracing::info!(members = %members.join(","), "shard members changed");
            self.metrics.shard_members.set(view.members.len() as i64);
            self.metrics.shard_handovers.inc();
        }
        state.view = Some(view);
        self.publish_writable(&state);
        drop(state);
        if changed {
            self.changes.send_modify(|epoch| *epoch += 1);
        }
    }

    /// Who owns what in the current view, for the caches to keep this replica's share.
    pub(crate) fn assignment(&self) -> Assignment {
        let state = self.state.lock();
        Assignment {
            members: state
                .view
                .as_ref()
                .map(|view| view.members.clone())
                .unwrap_or_default(),
            me: self.me.identity.clone(),
        }
    }

    /// Changes of the members, as they are noticed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether the current view gives the item to this replica (whether or not it may write
    /// now): what it keeps outcomes and queued work for.
    pub(crate) fn assigned(&self, item: &Item) -> bool {
        let state = self.state.lock();
        self.owned_in(&state, item)
    }

    /// Whether this replica may write for the item now.
    pub(crate) fn may_write(&self, item: &Item) -> bool {
        let state = self.state.lock();
        self.wait(&state, Instant::now()).is_none() && self.owned_in(&state, item)
    }

    /// Whether a work item for `item` runs now (`fans_out`: it only queues other work, which
    /// every replica does for itself).
    pub(crate) fn admit(&self, item: &Item, fans_out: bool) -> Admit {
        let state = self.state.lock();
        if fans_out {
            return Admit::Run;
        }
        if !self.owned_in(&state, item) {
            return Admit::Skip;
        }
        match self.wait(&state, Instant::now()) {
            None => Admit::Run,
            Some(wait) => Admit::Later(wait),
        }
    }

    /// How many live members this replica sees (0 before its first view).
    pub(crate) fn members(&self) -> usize {
        self.state
            .lock()
            .view
            .as_ref()
            .map_or(0, |view| view.members.len())
    }

    /// Records this replica's counts for one controller (for its Lease), and returns them
    /// added to what the other members reported for it.
    pub(crate) fn total(&self, controller: &ControllerId, own: Counts) -> Counts {
        let key = controller.to_string_short();
        self.metrics.set_owned_items(controller, own.targets);
        let mut state = self.state.lock();
        state.report.insert(key.clone(), own.clone());
        let others = state.view.iter().flat_map(|view| view.reports.values());
        others
            .filter_map(|report| report.get(&key))
            .fold(own, |total, counts| total + counts.clone())
    }

    /// Forgets the report of controllers that are gone.
    pub(crate) fn retain_report(&self, keep: impl Fn(&str) -> bool) {
        self.state.lock().report.retain(|key, _| keep(key));
    }

    /// What this replica reports in its Lease.
    pub(crate) fn report(&self) -> Report {
        self.state.lock().report.clone()
    }

    fn owned_in(&self, state: &State, item: &Item) -> bool {
        let owner = state.view.as_ref().and_then(|v| owner(&v.members, item));
        owner.is_some_and(|m| m.identity == self.me.identity)
    }

    /// How long until this replica may write, `None` when it may now. Unknown waits (no
    /// lease, a stale view) are looked at again after one list.
    fn wait(&self, state: &State, now: Instant) -> Option<Duration> {
        let unknown = Some(self.config.list_every());
        if state.fence.is_none_or(|fence| now >= fence) {
            return unknown;
        }
        let Some(from) = state.writable_from else {
            return unknown;
        };
        if now < from {
            return Some(from - now);
        }
        match &state.view {
            Some(view) if now < view.listed + self.config.fresh_for() => None,
            _ => unknown,
        }
    }

    fn publish_writable(&self, state: &State) {
        let writable = self.wait(state, Instant::now()).is_none();
        self.metrics.shard_writable.set(i64::from(writable));
    }

    /// Refreshes the `writable` gauge (a fence or view lapses, a warm-up ends, with time).
    pub(crate) fn refresh_metrics(&self) {
        self.publish_writable(&self.state.lock());
    }
}

tokio::task_local! {
    /// The item the running task writes for.
    static ACTING_FOR: Item;
}

/// Runs `work` as writing for `item`: every write it makes, however deep, is checked against
/// that item's owner at the moment it is sent, without handing the item down every call.
pub(crate) async fn acting_for<F: Future>(item: Item, work: F) -> F::Output {
    ACTING_FOR.scope(item, work).await
}

/// The item the running task writes for, if any.
pub(crate) fn acting() -> Option<Item> {
    ACTING_FOR.try_with(|item| *item).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::StaticResolver;

    fn config(identity: &str) -> ShardConfig {
        ShardConfig {
            namespace: "ns".into(),
            group: "metascript".into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
        }
    }

    fn members(names: &[&str]) -> Vec<Member> {
        names.iter().map(|n| Member::new(n.to_string())).collect()
    }

    fn items(n: usize) -> Vec<Item> {
        let controller = ControllerId::new(crate::kinds::decorator::KIND, "spp");
        let config_maps = StaticResolver::with_builtins()
            .find_kind("v1", "ConfigMap")
            .expect("ConfigMap is built in");
        (0..n)
            .map(|i| {
                let object = ObjRef {
                    resource: config_maps.clone(),
                    namespace: Some("ns".into()),
                    name: format!("cm-{i}"),
                };
                Item::object(&controller, &object)
            })
            .collect()
    }

    fn owners(members: &[Member], items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|item| owner(members, item).unwrap().identity.clone())
            .collect()
    }

    #[test]
    fn items_spread_evenly_and_a_join_or_leave_moves_only_its_share() {
        let items = items(3000);
        let three = owners(&members(&["a", "b", "c"]), &items);
        for name in ["a", "b", "c"] {
            let share = three.iter().filter(|o| *o == name).count();
            assert!((900..=1100).contains(&share), "{name} owns {share} of 3000");
        }
        // A fourth takes about a quarter, only from the others, and nothing moves between them.
        let four = owners(&members(&["a", "b", "c", "d"]), &items);
        let moved: Vec<(&String, &String)> =
            three.iter().zip(&four).filter(|(a, b)| a != b).collect();
        assert!(
            moved.iter().all(|(_, to)| *to == "d"),
            "only to the newcomer"
        );
        assert!((600..=900).contains(&moved.len()), "{} moved", moved.len());
        // One leaving hands over its own only.
        let two = owners(&members(&["a", "c"]), &items);
        for (before, after) in three.iter().zip(&two) {
            if before != "b" {
                assert_eq!(before, after);
            }
        }
        // The order members are listed in does not matter.
        assert_eq!(owners(&members(&["c", "a", "b"]), &items), three);
    }

    #[test]
    fn a_pair_and_the_group_of_its_map_key_are_one_item_and_the_empty_group_is_the_parent() {
        let resolver = StaticResolver::with_builtins();
        let config_maps = resolver.find_kind("v1", "ConfigMap").unwrap();
        let controller = ControllerId::new(crate::kinds::map::KIND, "m");
        let parent = ObjRef {
            resource: config_maps.clone(),
            namespace: Some("ns".into()),
            name: "parent".into(),
        };
        let input = ObjRef {
            resource: config_maps,
            namespace: Some("ns".into()),
            name: "input".into(),
        };
        let input_object = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "input", "namespace": "ns"}});
        let map_key = crate::kinds::map::Mapper::map_key(&input_object);
        let pair = WorkKey::new(
            &controller,
            Work::Pair {
                parent: parent.clone(),
                input: input.clone(),
            },
        );
        let group = Group {
            parent: parent.clone(),
            key: map_key,
        };
        assert_eq!(Item::of(&pair), group.item(&controller));
        assert_eq!(
            Item::of(&WorkKey::new(&controller, Work::Group(group.clone()))),
            group.item(&controller)
        );
        let parent_group = Group {
            parent: parent.clone(),
            key: String::new(),
        };
        assert_eq!(
            parent_group.item(&controller),
            Item::of(&WorkKey::new(&controller, Work::Object(parent.clone())))
        );
        assert_ne!(parent.item(&controller), input.item(&controller));
        assert_ne!(
            Item::controller(&controller),
            Item::of(&WorkKey::new(&controller, Work::Object(parent)))
        );
    }

    /// An item that `me` owns among `all`.
    fn owned_by(me: &str, all: &[&str]) -> Item {
        let members = members(all);
        items(100)
            .into_iter()
            .find(|item| owner(&members, item).unwrap().identity == me)
            .expect("some item")
    }

    fn list(names: &[&str]) -> Vec<(String, Report)> {
        names
            .iter()
            .map(|n| (n.to_string(), Report::new()))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_alone_writes_at_once_and_stops_at_its_fence() {
        let shards = Shards::new(config("a"), Metrics::default());
        let item = owned_by("a", &["a"]);
        assert_eq!(shards.admit(&item, false), Admit::Skip, "no view yet");
        let sent = Instant::now();
        shards.renewed(sent, sent);
        assert!(!shards.may_write(&item), "not listed yet");
        shards.listed(Instant::now(), list(&["a"]));
        assert!(shards.may_write(&item), "alone: no warm-up");
        assert_eq!(shards.admit(&item, false), Admit::Run);
        // Its view goes stale before its lease: lists keep coming in a healthy replica.
        tokio::time::advance(Duration::from_secs(7)).await;
        shards.listed(Instant::now(), list(&["a"]));
        assert!(shards.may_write(&item));
        // No renewal since: the fence (15 s − 3 s after it was sent) passes.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!shards.may_write(&item), "its fence passed");
        assert!(matches!(shards.admit(&item, false), Admit::Later(_)));
        assert_eq!(shards.metrics.shard_writable.get(), 1, "until refreshed");
        shards.refresh_metrics();
        assert_eq!(shards.metrics.shard_writable.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_view_stops_writes_even_with_a_live_lease() {
        let shards = Shards::new(config("a"), Metrics::default());
        let item = owned_by("a", &["a"]);
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a"]));
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(4)).await;
            shards.renewed(Instant::now(), Instant::now());
        }
        assert!(!shards.may_write(&item), "listed 12 s ago, good for 7.5 s");
        assert_eq!(
            shards.admit(&item, false),
            Admit::Later(Duration::from_millis(1500)),
            "looked at again after a list"
        );
        shards.listed(Instant::now(), list(&["a"]));
        assert!(shards.may_write(&item));
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_waits_out_every_view_listed_before_it_joined() {
        let shards = Shards::new(config("d"), Metrics::default());
        let changes = shards.subscribe();
        let item = owned_by("d", &["a", "b", "c", "d"]);
        let joined = Instant::now();
        shards.renewed(joined, joined);
        // A list sent before the join answered does not end the join, however it looks.
        shards.listed(
            joined - Duration::from_millis(1),
            list(&["a", "b", "c", "d"]),
        );
        assert!(matches!(shards.admit(&item, false), Admit::Later(_)));
        tokio::time::advance(Duration::from_millis(500)).await;
        shards.listed(Instant::now(), list(&["a", "b", "c", "d"]));
        assert!(changes.has_changed().unwrap(), "the members changed");
        assert!(shards.assigned(&item));
        // Warm-up: half the lease (how long the others use a view) plus the margin.
        let warm_up = Duration::from_millis(10_500);
        assert_eq!(
            shards.admit(&item, false),
            Admit::Later(warm_up - Duration::from_millis(500))
        );
        assert!(!shards.may_write(&item));
        tokio::time::advance(warm_up - Duration::from_millis(500)).await;
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b", "c", "d"]));
        assert!(shards.may_write(&item));
        assert!(shards.admit(&owned_by("a", &["a", "b", "c", "d"]), false) == Admit::Skip);
        assert_eq!(
            shards.admit(&owned_by("a", &["a", "b", "c", "d"]), true),
            Admit::Run,
            "work that only fans out runs everywhere"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_answered_after_the_fence_is_a_new_join() {
        let shards = Shards::new(config("a"), Metrics::default());
        let item = owned_by("a", &["a", "b"]);
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        tokio::time::advance(Duration::from_secs(11)).await;
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(shards.may_write(&item), "warmed up, renewed in time");
        // A renewal sent just before its fence and answered just after it (a slow API).
        tokio::time::advance(Duration::from_millis(11_900)).await;
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(200)).await;
        shards.renewed(sent, Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(!shards.may_write(&item), "rejoined: it waits again");
        tokio::time::advance(Duration::from_millis(10_500)).await;
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(shards.may_write(&item), "warmed up again");
        // Frozen (SIGSTOP) past its fence: the renewal sent before is worth nothing, and the
        // next one, sent afresh, joins again.
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(!shards.may_write(&item), "the fence passed while frozen");
        shards.renewed(sent, Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(!shards.may_write(&item), "the stale renewal set no fence");
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(!shards.may_write(&item), "rejoined: it waits again");
        tokio::time::advance(Duration::from_millis(10_500)).await;
        shards.renewed(Instant::now(), Instant::now());
        shards.listed(Instant::now(), list(&["a", "b"]));
        assert!(shards.may_write(&item));
        shards.lost();
        assert!(
            !shards.may_write(&item),
            "a lost Lease stops writes at once"
        );
    }

    #[test]
    fn counts_add_up_what_every_member_reported() {
        let shards = Shards::new(config("a"), Metrics::default());
        let controller = ControllerId::new(crate::kinds::decorator::KIND, "spp");
        let counts = |targets, failing| Counts {
            targets,
            synced: targets - failing,
            failing,
            ..Counts::default()
        };
        let report = |c| Report::from([(controller.to_string_short(), c)]);
        shards.listed(
            Instant::now(),
            vec![
                ("a".into(), report(counts(100, 100))),
                ("b".into(), report(counts(10, 1))),
                ("c".into(), report(counts(20, 0))),
            ],
        );
        assert_eq!(shards.total(&controller, counts(5, 2)), counts(35, 3));
        assert_eq!(
            shards.report(),
            report(counts(5, 2)),
            "its own, as counted now"
        );
        shards.retain_report(|_| false);
        assert!(shards.report().is_empty());
    }

    #[test]
    fn timings_leave_room_for_renewals_lists_and_clock_rates() {
        let config = config("a");
        assert_eq!(config.renew_every(), Duration::from_secs(5));
        assert_eq!(config.margin(), Duration::from_secs(3));
        assert_eq!(config.list_every(), Duration::from_millis(1500));
        assert!(config.renew_every() * 2 < config.duration - config.margin());
        assert!(config.list_every() * 4 < config.fresh_for());
        assert!(config.warm_up() > config.fresh_for());
        let short = ShardConfig {
            duration: Duration::from_secs(3),
            ..config.clone()
        };
        assert!(short.renew_every() < short.duration - short.margin());
        assert!(short.list_every() * 4 < short.fresh_for());
        assert_eq!(config.lease_name().len(), "metascript-".len() + 10);
        assert_ne!(config.lease_name(), short_identity().lease_name());
    }

    fn short_identity() -> ShardConfig {
        ShardConfig {
            identity: "b".into(),
            ..config("a")
        }
    }
}
