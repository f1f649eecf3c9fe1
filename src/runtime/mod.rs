//! The operator: watches, queues, apply.

pub mod apply;
pub mod cache;
pub mod decorator;
pub mod discovery;
mod operator;
pub mod queue;
pub mod routes;
pub mod scripts;
pub mod status;

pub use operator::{Operator, OperatorConfig, StartError, WorkKey};
