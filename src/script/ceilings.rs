//! The most a hook's `limits` may ask for in a given operator (`metascript run --max-hook-*`).
//! Authors choose their hooks' budgets, but the workers, the blocking threads and the script
//! memory pool are shared by every controller: a hook asking for a minute or a gigabyte is
//! refused where it is loaded (and so at admission), with a message naming the ceiling.

use super::limits::{DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_OPERATIONS, DEFAULT_TIMEOUT_MILLIS};
use crate::api::Limits;

/// Limits a hook may ask for at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitCeilings {
    pub max_operations: u64,
    pub timeout_millis: u64,
    pub max_memory_bytes: u64,
}

/// Twenty times the default operations and time, twice the default memory: room for heavy
/// hooks, while one call still ends in seconds and holds at most half the default pool
/// (`--script-memory 256Mi`), so it cannot starve every other call.
pub(crate) const DEFAULT_CEILINGS: LimitCeilings = LimitCeilings {
    max_operations: 20 * DEFAULT_MAX_OPERATIONS,
    timeout_millis: 20 * DEFAULT_TIMEOUT_MILLIS,
    max_memory_bytes: 2 * DEFAULT_MAX_MEMORY_BYTES,
};

impl Default for LimitCeilings {
    fn default() -> Self {
        DEFAULT_CEILINGS
    }
}

/// A hook's `limits` field above the operator's ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "script.limits.{field} is {asked}, above the most this operator allows ({ceiling}; \
     metascript run {flag})"
)]
pub struct AboveCeiling {
    pub field: &'static str,
    pub asked: u64,
    pub ceiling: u64,
    pub flag: &'static str,
}

impl LimitCeilings {
    /// The first field of `limits` above its ceiling; unset fields take the defaults, which
    /// every ceiling is at least.
    pub(crate) fn check(&self, limits: &Limits) -> Result<(), AboveCeiling> {
        let fields = [
            (
                "maxOperations",
                limits.max_operations,
                self.max_operations,
                "--max-hook-operations",
            ),
            (
                "timeoutMillis",
                limits.timeout_millis,
                self.timeout_millis,
                "--max-hook-timeout",
            ),
            (
                "maxMemoryBytes",
                limits.max_memory_bytes,
                self.max_memory_bytes,
                "--max-hook-memory",
            ),
        ];
        for (field, asked, ceiling, flag) in fields {
            if let Some(asked) = asked
                && asked > ceiling
            {
                return Err(AboveCeiling {
                    field,
                    asked,
                    ceiling,
                    flag,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_up_to_the_ceiling_pass_and_above_it_name_field_and_flag() {
        let ceilings = LimitCeilings {
            max_operations: 100,
            timeout_millis: 1_000,
            max_memory_bytes: 1 << 20,
        };
        let at = Limits {
            max_operations: Some(100),
            timeout_millis: Some(1_000),
            max_memory_bytes: Some(1 << 20),
            ..Limits::default()
        };
        assert_eq!(ceilings.check(&at), Ok(()));
        assert_eq!(ceilings.check(&Limits::default()), Ok(()));
        let above = Limits {
            timeout_millis: Some(60_000),
            ..Limits::default()
        };
        let error = ceilings.check(&above).unwrap_err();
        assert_eq!(
            error.to_string(),
            "script.limits.timeoutMillis is 60000, above the most this operator allows (1000; \
             metascript run --max-hook-timeout)"
        );
    }

    #[test]
    fn the_defaults_fit_under_the_default_ceilings() {
        let defaults = Limits {
            max_operations: Some(DEFAULT_MAX_OPERATIONS),
            timeout_millis: Some(DEFAULT_TIMEOUT_MILLIS),
            max_memory_bytes: Some(DEFAULT_MAX_MEMORY_BYTES),
            ..Limits::default()
        };
        assert_eq!(DEFAULT_CEILINGS.check(&defaults), Ok(()));
    }
}
