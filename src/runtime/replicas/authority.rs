//! Whether this replica may write, whatever way the replicas run: alone (always), with leader
//! election (while it leads), or sharded (for the items it owns, see [`crate::runtime::replicas::shard`]). Every
//! write asks it just before it is sent.

use crate::runtime::keys::{ControllerId, WorkKey};
use crate::runtime::replicas::leader::Leadership;
use crate::runtime::replicas::shard::{self, Admit, Item, Shards};
use crate::runtime::report::status::Counts;
use std::sync::Arc;

pub struct Authority {
    pub leadership: Arc<Leadership>,
    /// Present when sharded; then `leadership` always leads.
    pub shards: Option<Arc<Shards>>,
}

impl Authority {
    /// Whether the running task may write now, for the item it acts for (see
    /// [`shard::acting_for`]). Sharded, a task acting for nothing writes nothing.
    pub(crate) fn may_write(&self) -> bool {
        match &self.shards {
            Some(shards) => {
                self.leadership.is_leader()
                    && shard::acting().is_some_and(|item| shards.may_write(&item))
            }
            None => self.leadership.is_leader(),
        }
    }

    /// Whether this replica may write for `item` now.
    pub(crate) fn may_write_for(&self, item: &Item) -> bool {
        self.leadership.is_leader() && self.shards.as_ref().is_none_or(|s| s.may_write(item))
    }

    /// Whether a work item runs here now. Loading a controller runs on every replica (each
    /// needs it loaded), and so does work that only queues other work (`fans_out`). A standby
    /// runs nothing else (taking over redoes it).
    pub(crate) fn admit(&self, key: &WorkKey, fans_out: bool) -> Admit {
        if key.work == crate::runtime::keys::Work::Load {
            return Admit::Run;
        }
        if !self.leadership.is_leader() {
            return Admit::Skip;
        }
        match &self.shards {
            Some(shards) => shards.admit(&Item::of(key), fans_out),
            None => Admit::Run,
        }
    }

    /// Whether this replica keeps what concerns the item (its outcome, its queued work): it
    /// does unless another replica owns it.
    pub(crate) fn assigned(&self, item: &Item) -> bool {
        self.shards.as_ref().is_none_or(|s| s.assigned(item))
    }

    /// The part of a controller's work this replica does: one over the live members, sharded
    /// (what keeps a budget the replicas share), else all of it.
    pub(crate) fn share(&self) -> f64 {
        match &self.shards {
            Some(shards) => 1.0 / shards.members().max(1) as f64,
            None => 1.0,
        }
    }

    /// A controller's counts across every replica, from this replica's own.
    pub(crate) fn total(&self, controller: &ControllerId, own: Counts) -> Counts {
        match &self.shards {
            Some(shards) => shards.total(controller, own),
            None => own,
        }
    }
}
