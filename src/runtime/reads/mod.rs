//! What hooks may read and what their reads mean for later work: the read access of a
//! controller's account, how RBAC changes reach it, and the dependencies each work item's reads
//! create.

pub(crate) mod access;
pub(crate) mod dependencies;
pub(crate) mod rbac;
