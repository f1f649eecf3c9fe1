//! Reading the cluster: one watch per resource type shared by every controller, what the API
//! server sends decoded into no more than the operator keeps, and types resolved by discovery.

pub mod cache;
pub(crate) mod compare;
pub(crate) mod decode;
pub mod discovery;
pub mod event;
pub mod schemas;
pub(crate) mod share;
pub(crate) mod store;
