//! The call the current thread is running, for the callbacks of both engines.
//!
//! Helpers, `print`, and the progress callbacks that tick the budget are installed once (per Rhai
//! engine, per Luau state) but serve one call at a time, and a call runs entirely on the thread
//! that started it; so the per-call parts (helper environment, budget) live in a thread-local for
//! the duration of the call instead of being rebound into the engine on every call.

use super::helpers::HelperEnv;
use super::limits::Budget;
use std::cell::RefCell;
use std::sync::Arc;

struct ActiveCall {
    env: HelperEnv,
    budget: Arc<Budget>,
}

thread_local! {
    static ACTIVE: RefCell<Option<ActiveCall>> = const { RefCell::new(None) };
}

/// Makes a call active on this thread until dropped, restoring the previous one (none in
/// practice) even if the evaluation unwinds.
pub(crate) struct ActiveGuard(Option<ActiveCall>);

impl ActiveGuard {
    pub fn enter(env: HelperEnv, budget: Arc<Budget>) -> ActiveGuard {
        let call = ActiveCall { env, budget };
        ActiveGuard(ACTIVE.with(|a| a.borrow_mut().replace(call)))
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let previous = self.0.take();
        ACTIVE.with(|a| *a.borrow_mut() = previous);
    }
}

/// Runs `f` with the active call's environment and budget; `None` outside a call.
pub(crate) fn with_active<R>(f: impl FnOnce(&HelperEnv, &Budget) -> R) -> Option<R> {
    ACTIVE.with(|a| a.borrow().as_ref().map(|call| f(&call.env, &call.budget)))
}
