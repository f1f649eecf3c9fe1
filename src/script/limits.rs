//! Per-call budgets: the defaults, how a hook's `limits` override them, and the operation and
//! wall-clock budget that both engines tick from their progress callbacks.

use super::error::LimitKind;
use super::memory::{CallMemory, Exceeded};
use crate::api::Limits;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Rhai operations or Luau interrupt ticks. Both engines run this many in well under a second
/// (measured in `limits_tests`), so the operation budget, not the clock, stops a runaway loop in
/// a release build; the timeout is the backstop for slow operations (big conversions, regexes).
pub(crate) const DEFAULT_MAX_OPERATIONS: u64 = 5_000_000;
/// A hook is a pure function of its request; half a second is generous for any sane one.
pub(crate) const DEFAULT_TIMEOUT_MILLIS: u64 = 500;
/// What one call may hold at once: its heap (Luau's, Rhai's values) and the conversions of its
/// request and response.
pub(crate) const DEFAULT_MAX_MEMORY_BYTES: u64 = 64 * 1024 * 1024;
/// Rhai counts the bytes of every string inside a value (recursively), so this also bounds the
/// text held by one response.
pub(crate) const DEFAULT_MAX_STRING_SIZE: u64 = 16 * 1024 * 1024;
/// Rhai counts nested arrays and maps recursively too.
pub(crate) const DEFAULT_MAX_ARRAY_SIZE: u64 = 1_000_000;
pub(crate) const DEFAULT_MAX_MAP_SIZE: u64 = 1_000_000;
/// Rhai function-call nesting; not configurable per hook.
pub(crate) const MAX_CALL_DEPTH: usize = 64;
/// Deepest expression nesting Rhai accepts at the top level and inside functions, the same in
/// every build.
pub(super) const MAX_EXPR_DEPTH: usize = 64;
pub(super) const MAX_FUNCTION_EXPR_DEPTH: usize = 32;

/// How deeply lists and maps may nest in a value crossing between JSON and a script (a request,
/// a response, a helper's arguments and its result), in both languages: the conversions recurse
/// once per level. Luau's conversion always stopped here, and serde_json, which parses what the
/// API server sends, stops at about the same depth.
pub(crate) const MAX_DEPTH: usize = 128;

/// Why a value deeper than [`MAX_DEPTH`] is refused.
pub(super) fn too_deep() -> String {
    format!("lists and maps nested deeper than {MAX_DEPTH} levels")
}

/// The limit a call that exceeded a memory budget is stopped by.
pub(super) fn memory_limit(exceeded: Exceeded) -> LimitKind {
    match exceeded {
        Exceeded::Call => LimitKind::Memory,
        Exceeded::Pool => LimitKind::ScriptMemory,
    }
}

/// A hook's limits with every default filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct EffectiveLimits {
    pub max_operations: u64,
    pub timeout_millis: u64,
    pub max_memory_bytes: u64,
    pub max_string_size: u64,
    pub max_array_size: u64,
    pub max_map_size: u64,
}

impl From<&Limits> for EffectiveLimits {
    fn from(limits: &Limits) -> Self {
        EffectiveLimits {
            max_operations: limits.max_operations.unwrap_or(DEFAULT_MAX_OPERATIONS),
            timeout_millis: limits.timeout_millis.unwrap_or(DEFAULT_TIMEOUT_MILLIS),
            max_memory_bytes: limits.max_memory_bytes.unwrap_or(DEFAULT_MAX_MEMORY_BYTES),
            max_string_size: limits.max_string_size.unwrap_or(DEFAULT_MAX_STRING_SIZE),
            max_array_size: limits.max_array_size.unwrap_or(DEFAULT_MAX_ARRAY_SIZE),
            max_map_size: limits.max_map_size.unwrap_or(DEFAULT_MAX_MAP_SIZE),
        }
    }
}

impl EffectiveLimits {
    /// Each limit, at most `ceiling`'s.
    pub(crate) fn at_most(self, ceiling: &EffectiveLimits) -> EffectiveLimits {
        EffectiveLimits {
            max_operations: self.max_operations.min(ceiling.max_operations),
            timeout_millis: self.timeout_millis.min(ceiling.timeout_millis),
            max_memory_bytes: self.max_memory_bytes.min(ceiling.max_memory_bytes),
            max_string_size: self.max_string_size.min(ceiling.max_string_size),
            max_array_size: self.max_array_size.min(ceiling.max_array_size),
            max_map_size: self.max_map_size.min(ceiling.max_map_size),
        }
    }

    /// The user-facing description of a violated limit, with its value.
    pub(crate) fn describe(&self, limit: LimitKind) -> String {
        match limit {
            LimitKind::Operations => {
                format!("operation budget of {} exhausted", self.max_operations)
            }
            LimitKind::Timeout => format!("timed out after {} ms", self.timeout_millis),
            LimitKind::Memory => {
                format!("memory limit of {} exceeded", bytes(self.max_memory_bytes))
            }
            LimitKind::ScriptMemory => format!(
                "the operator's script memory ({}, shared by every call; metascript run \
                 --script-memory) is used up: this call held {:.1} MiB when it was stopped",
                bytes(super::memory::pool_limit() as u64),
                super::memory::CallMemory::peak() as f64 / (1024.0 * 1024.0)
            ),
            LimitKind::StringSize => {
                format!(
                    "string size limit of {} exceeded",
                    bytes(self.max_string_size)
                )
            }
            LimitKind::ArraySize => {
                format!("array size limit of {} items exceeded", self.max_array_size)
            }
            LimitKind::MapSize => {
                format!("map size limit of {} entries exceeded", self.max_map_size)
            }
            LimitKind::CallDepth => format!("call depth limit of {MAX_CALL_DEPTH} exceeded"),
            LimitKind::Stack => format!(
                "stack limit of {} exceeded: a value nested too deeply to print, compare or copy",
                bytes(super::stack::STACK_BUDGET as u64)
            ),
        }
    }
}

/// `64 MiB` rather than `67108864 bytes` when the number is a round binary size.
fn bytes(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    const KIB: u64 = 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= KIB && n.is_multiple_of(KIB) {
        format!("{} KiB", n / KIB)
    } else {
        format!("{n} bytes")
    }
}

/// The operation and wall-clock budget of one call. Ticked from Rhai's `on_progress` and Luau's
/// interrupt; once tripped it stays tripped, so a script that catches the error (Lua `pcall`)
/// is stopped again at its next tick and the call still reports the limit.
#[derive(Debug)]
pub(crate) struct Budget {
    limits: EffectiveLimits,
    max_operations: u64,
    deadline: Instant,
    ops: AtomicU64,
    tripped: OnceLock<LimitKind>,
}

/// Reading the clock costs more than an operation, so it is read once per this many ticks.
const CLOCK_EVERY: u64 = 1024;

impl Budget {
    pub(crate) fn start(limits: &EffectiveLimits) -> Budget {
        Budget {
            limits: *limits,
            max_operations: limits.max_operations,
            deadline: Instant::now() + Duration::from_millis(limits.timeout_millis),
            ops: AtomicU64::new(0),
            tripped: OnceLock::new(),
        }
    }

    /// Counts one tick (Lua).
    pub(crate) fn tick(&self) -> Result<(), LimitKind> {
        // Relaxed is enough: a call's budget is only ticked by the thread running the call.
        let ops = self.ops.fetch_add(1, Ordering::Relaxed) + 1;
        self.check(ops)
    }

    /// Records the engine's running operation count (Rhai counts for us).
    pub(crate) fn progress(&self, ops: u64) -> Result<(), LimitKind> {
        self.ops.store(ops, Ordering::Relaxed);
        self.check(ops)
    }

    fn check(&self, ops: u64) -> Result<(), LimitKind> {
        if let Some(limit) = self.tripped.get() {
            return Err(*limit);
        }
        if ops > self.max_operations {
            return Err(self.trip(LimitKind::Operations));
        }
        if let Some(exceeded) = CallMemory::exceeded() {
            return Err(self.trip(memory_limit(exceeded)));
        }
        if super::stack::exhausted() {
            return Err(self.trip(LimitKind::Stack));
        }
        if ops.is_multiple_of(CLOCK_EVERY) && Instant::now() >= self.deadline {
            return Err(self.trip(LimitKind::Timeout));
        }
        Ok(())
    }

    /// Marks the budget as exhausted by `limit` (first one wins) and returns the winner.
    pub(crate) fn trip(&self, limit: LimitKind) -> LimitKind {
        *self.tripped.get_or_init(|| limit)
    }

    /// The user-facing description of `limit` with this budget's value.
    pub(crate) fn describe(&self, limit: LimitKind) -> String {
        self.limits.describe(limit)
    }

    pub(crate) fn tripped(&self) -> Option<LimitKind> {
        self.tripped.get().copied()
    }

    /// Whether the deadline has passed, for checks outside the tick loop (after a conversion).
    pub(crate) fn check_clock(&self) -> Result<(), LimitKind> {
        if let Some(limit) = self.tripped() {
            return Err(limit);
        }
        if Instant::now() >= self.deadline {
            return Err(self.trip(LimitKind::Timeout));
        }
        Ok(())
    }

    pub(crate) fn operations(&self) -> u64 {
        self.ops.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_unset_fields_and_overrides_win() {
        let limits = Limits {
            max_operations: Some(10),
            ..Limits::default()
        };
        let effective = EffectiveLimits::from(&limits);
        assert_eq!(effective.max_operations, 10);
        assert_eq!(effective.timeout_millis, DEFAULT_TIMEOUT_MILLIS);
        assert_eq!(effective.max_memory_bytes, DEFAULT_MAX_MEMORY_BYTES);
    }

    #[test]
    fn budget_trips_on_operations_and_stays_tripped() {
        let limits = EffectiveLimits::from(&Limits {
            max_operations: Some(3),
            ..Limits::default()
        });
        let budget = Budget::start(&limits);
        assert!(budget.tick().is_ok());
        assert!(budget.tick().is_ok());
        assert!(budget.tick().is_ok());
        assert_eq!(budget.tick(), Err(LimitKind::Operations));
        assert_eq!(budget.check_clock(), Err(LimitKind::Operations));
    }

    #[test]
    fn budget_trips_on_deadline() {
        let limits = EffectiveLimits::from(&Limits {
            timeout_millis: Some(1),
            ..Limits::default()
        });
        let budget = Budget::start(&limits);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(budget.progress(CLOCK_EVERY), Err(LimitKind::Timeout));
    }

    #[test]
    fn limit_descriptions_name_the_value() {
        let limits = EffectiveLimits::from(&Limits::default());
        assert_eq!(
            limits.describe(LimitKind::Memory),
            "memory limit of 64 MiB exceeded"
        );
        assert_eq!(
            limits.describe(LimitKind::Operations),
            "operation budget of 5000000 exhausted"
        );
        assert_eq!(
            limits.describe(LimitKind::Timeout),
            "timed out after 500 ms"
        );
    }
}
