//! The operator: watches, queues, apply.

pub mod apply;
pub mod cache;
mod controller;
pub mod decorator;
pub mod discovery;
pub mod map;
pub mod metrics;
mod operator;
pub mod queue;
pub mod routes;
pub mod scripts;
pub mod status;

pub use operator::{Operator, OperatorConfig, StartError, WorkKey};
