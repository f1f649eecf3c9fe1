//! The operator: watches, queues, apply, whatever the kind of controller.
//!
//! `keys` names objects, controllers and work; `context` holds the services every kind shares;
//! `authority` says whether this replica may write (alone, elected, or sharded: `shard` and
//! `membership`);
//! `kind` is what a kind of controller contributes (each kind implements it in its folder under
//! `crate::kinds`) and `registry` what the runtime does for every kind (load, reload, remove,
//! status, failures); `operator` owns a registry per kind it is started with and drives them.

pub(crate) mod access;
pub mod apply;
pub(crate) mod authority;
pub mod cache;
pub(crate) mod context;
mod credentials;
mod decode;
mod dependencies;
pub mod discovery;
mod egress;
mod events;
pub(crate) mod finalizers;
pub(crate) mod fingerprint;
pub mod health;
pub(crate) mod keys;
pub(crate) mod kind;
mod leader;
mod load;
mod lru;
mod membership;
pub mod metrics;
mod operator;
mod own_writes;
pub mod queue;
pub(crate) mod rbac;
mod registry;
pub(crate) mod related;
pub(crate) mod rollout;
pub(crate) mod routes;
mod scripts;
pub(crate) mod shard;
pub mod status;
pub(crate) mod synced;

pub use context::{DEFAULT_CONTROLLER_SHARE, DEFAULT_NAMESPACE, OperatorConfig, own_user};
pub use keys::{ControllerId, ObjRef, Work, WorkKey};
pub use leader::{ElectionError, LeaseConfig};
pub use operator::{Operator, StartError};
pub use registry::{KindEntry, KindRuntime};
pub use shard::ShardConfig;
