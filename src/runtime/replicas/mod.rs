//! Running as more than one replica: who may write (alone, elected or sharded), leader
//! election, and shard membership.

pub(crate) mod authority;
pub(crate) mod leader;
pub(crate) mod membership;
pub(crate) mod shard;
