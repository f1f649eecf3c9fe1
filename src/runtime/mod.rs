//! The operator: watches, queues, apply, whatever the kind of controller.
//!
//! Its parts, from the bottom up (each uses only those before it; the layering test keeps the
//! order free of loops): `keys` names objects, controllers and work, and `lru` bounds what is
//! remembered per key; `work` is the queue and the workers' health; `report` the status, Events
//! and metrics; `watch` the shared watch caches and discovery; `replicas` who may write; `write`
//! applying plans, own writes and resync fingerprints; `reads` what hooks may read and what their
//! reads depend on; `context` bundles those services for every kind; `load` makes a controller
//! object ready to run; `kind` is what a kind of controller contributes (each kind implements it
//! in its folder under `crate::kinds`); `sync` is the runtime's side of syncing one object;
//! `rollout` stages a new revision; `registry` is what the runtime does for every kind's
//! controllers, and `operator` owns a registry per kind and drives them.

pub(crate) mod context;
pub(crate) mod keys;
pub(crate) mod kind;
pub(crate) mod load;
mod lru;
mod operator;
pub(crate) mod reads;
pub(crate) mod registry;
pub(crate) mod replicas;
pub mod report;
pub(crate) mod rollout;
pub(crate) mod sync;
pub mod watch;
pub mod work;
pub mod write;

pub use context::{DEFAULT_CONTROLLER_SHARE, DEFAULT_NAMESPACE, OperatorConfig, own_user};
pub use keys::{ControllerId, ObjRef};
pub use operator::{Operator, StartError};
pub(crate) use registry::KindEntry;
pub use replicas::leader::LeaseConfig;
pub(crate) use replicas::shard::ShardConfig;

#[cfg(test)]
mod tests;
