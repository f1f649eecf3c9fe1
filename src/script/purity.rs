//! Whether a call's answer followed from its request and its tracked reads alone. A periodic
//! resync may skip a work item whose inputs have not changed since its last pure sync
//! (`docs/operations.md`); anything else a hook can see (the clock, randomness, a webhook's own
//! state) makes the call impure, and the item is then synced on every resync.
//!
//! The helpers and engine callbacks that reach outside the request note it here, through the
//! active call's `HelperEnv`, so both languages share one rule.

use std::sync::{Arc, OnceLock};

/// Shared by every hook call of one work item; cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Purity(Arc<OnceLock<&'static str>>);

impl Purity {
    #[cfg(test)]
    pub(crate) fn new() -> Purity {
        Purity::default()
    }

    /// Notes that a call used something besides its request (the first use is kept, to be
    /// named in logs).
    pub(crate) fn taint(&self, source: &'static str) {
        let _ = self.0.set(source);
    }

    /// What made the calls impure, or `None` while they are pure.
    pub(crate) fn impurity(&self) -> Option<&'static str> {
        self.0.get().copied()
    }

    #[cfg(test)]
    pub(crate) fn is_pure(&self) -> bool {
        self.impurity().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_impure_use_is_kept_and_shared_by_clones() {
        let purity = Purity::new();
        let shared = purity.clone();
        assert!(purity.is_pure());
        shared.taint("now()");
        shared.taint("math.random");
        assert_eq!(purity.impurity(), Some("now()"));
        assert!(!purity.is_pure());
    }
}
