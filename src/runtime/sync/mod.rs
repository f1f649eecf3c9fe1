//! The runtime's side of syncing one object, shared by the kinds: the related objects its
//! customize hook names, the finalizers it keeps, and its `Synced` condition.

pub(crate) mod finalizers;
pub(crate) mod related;
pub(crate) mod synced;
