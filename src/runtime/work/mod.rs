//! The workers' primitives: the queue that hands each key to one worker at a time (never
//! two, queued once however many events arrive), and the health of the workers.

pub(crate) mod health;
pub(crate) mod queue;
