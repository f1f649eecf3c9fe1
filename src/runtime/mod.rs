//! The operator: watches, queues, apply.

pub mod cache;
pub mod discovery;
pub mod apply;
pub mod decorator;
mod operator;
pub mod queue;
pub mod routes;
pub mod scripts;
pub mod status;

pub use operator::{Operator, OperatorConfig, StartError, WorkKey};
