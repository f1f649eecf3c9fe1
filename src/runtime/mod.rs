//! The operator: watches, queues, apply.

pub mod cache;
pub mod discovery;
