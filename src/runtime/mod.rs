//! The operator: watches, queues, apply.
//!
//! `keys` names objects, controllers and work; `context` holds the services every kind shares;
//! `kind` is what a kind of controller contributes and `registry` what the runtime does for
//! every kind (load, reload, remove, status, failures); `decorator` and `map` are the two kinds;
//! `operator` owns the registries and drives them.

pub mod apply;
pub mod cache;
mod context;
mod decorator;
mod dependencies;
pub mod discovery;
mod events;
mod fingerprint;
mod keys;
mod kind;
mod leader;
mod load;
mod map;
pub mod metrics;
mod operator;
mod own_writes;
pub mod queue;
mod registry;
mod routes;
mod scripts;
pub mod status;

pub use context::OperatorConfig;
pub use keys::{ControllerId, KindName, ObjRef, Work, WorkKey};
pub use leader::{ElectionError, LeaseConfig};
pub use operator::{Operator, StartError};
