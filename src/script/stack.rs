//! The stack a Rhai call runs on.
//!
//! Rhai recurses over values: dropping, copying or size-checking a nested list or map takes a
//! frame or two per level, and printing or comparing one calls the engine again per level. A
//! stack overflow aborts the whole process, so each call gets a stack of its own size, and the
//! engine's recursions are stopped before they reach its end:
//! - what the evaluation uses (the script's own calls, and printing or comparing nested values,
//!   which tick the progress callback at every level) is held to [`STACK_BUDGET`], checked at
//!   every operation; a call past it stops with the stack limit;
//! - below that, [`DEPTH_RESERVE`] is left for what recurses without ticking (dropping,
//!   copying, size-checking). Values only nest one level per operation, and Rhai size-checks a
//!   value whole each time one grows, so nesting `n` levels walks about `n²/2` of them: the
//!   depth a call reaches grows with the square root of its time, not with its memory or its
//!   operations. (Function values, which the size checks do not look into, cannot carry values:
//!   `curry` and closures kept anywhere but a call are refused when a script compiles.)
//!
//! Measured in a release build (a probe painting the stack; more numbers by the constants):
//! nesting reaches about 3,000 levels of maps and 4,000 of lists in the default 500 ms, 6,000
//! and 8,000 in 2 s, 13,000 and 18,000 in 10 s (the square root of the time, as above). Lua's
//! tables are not recursive in Rust, and converting them stops at `MAX_DEPTH`: Lua calls need
//! no more than any thread has.

use std::cell::Cell;

const MIB: usize = 1024 * 1024;

/// What evaluating a call may use: the deepest a script can go (64 nested calls) used 376 KiB.
/// Printing or comparing a nested value takes 1.4 to 1.8 KiB per level, so a value about 2,500
/// levels deep stops there.
pub(super) const STACK_BUDGET: usize = 4 * MIB;
/// Left below [`STACK_BUDGET`] for the recursions over values that run within one operation:
/// dropping, copying or formatting (in an error) a value takes at most 354 bytes per level of
/// maps and 267 of lists, so this holds maps about 190,000 levels deep, which take a call about
/// 30 minutes to build (lists: 250,000 levels, as long).
pub(super) const DEPTH_RESERVE: usize = 64 * MIB;
/// The stack a Rhai call runs with.
pub(super) const CALL_STACK: usize = STACK_BUDGET + DEPTH_RESERVE;
/// The stack of the operator's threads: a call, and what its thread used before it. Virtual
/// memory: a thread only holds the pages its deepest call touched.
pub const THREAD_STACK: usize = CALL_STACK + 2 * MIB;

thread_local! {
    /// The lowest the running call's stack may reach while it evaluates; 0 outside a call.
    static FLOOR: Cell<usize> = const { Cell::new(0) };
}

/// Runs a Rhai call with [`CALL_STACK`] of stack: on this thread's when it has that much left
/// (the operator's threads have, [`THREAD_STACK`]), else on one made for the call and freed
/// after it (tests, command-line tools).
pub(super) fn run<R>(call: impl FnOnce() -> R) -> R {
    stacker::maybe_grow(CALL_STACK, THREAD_STACK, || {
        let _floor = Floor::set(here().saturating_sub(STACK_BUDGET));
        call()
    })
}

/// Whether the running call has used its [`STACK_BUDGET`].
pub(super) fn exhausted() -> bool {
    let floor = FLOOR.with(Cell::get);
    floor != 0 && here() < floor
}

/// About where the stack is now.
#[inline(always)]
fn here() -> usize {
    let marker = 0u8;
    std::ptr::addr_of!(marker) as usize
}

/// Sets the floor for a call until dropped, even if the call panics.
struct Floor(usize);

impl Floor {
    fn set(floor: usize) -> Floor {
        Floor(FLOOR.with(|f| f.replace(floor)))
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        FLOOR.with(|f| f.set(self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uses about `bytes` of stack, then reports whether the budget was spent.
    #[inline(never)]
    fn descend(bytes: usize) -> bool {
        let frame = [0u8; 4096];
        std::hint::black_box(&frame);
        if bytes <= frame.len() {
            exhausted()
        } else {
            descend(bytes - frame.len())
        }
    }

    #[test]
    fn a_call_gets_its_stack_and_its_budget_is_told_spent() {
        assert!(!exhausted(), "outside a call, never");
        // A test thread has 2 MiB: the call runs on a stack made for it.
        let (room, within, past) = run(|| {
            (
                stacker::remaining_stack(),
                descend(STACK_BUDGET / 2),
                descend(STACK_BUDGET + 64 * 1024),
            )
        });
        assert!(room.is_some_and(|room| room >= CALL_STACK), "{room:?}");
        assert!(!within && past);
        assert!(!exhausted(), "the floor goes with the call");
    }
}
