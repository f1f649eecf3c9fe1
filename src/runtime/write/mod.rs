//! Writing to the cluster: carrying out plans, telling the operator's own writes from anyone
//! else's, and fingerprinting what a sync saw so a resync can skip what cannot have changed.

pub(crate) mod apply;
pub(crate) mod fingerprint;
pub(crate) mod own_writes;
