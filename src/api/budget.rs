//! `spec.budget`: what a controller may cost per minute before the operator paces its work.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a controller may cost the operator per minute. Past it, its work is slowed, not dropped:
/// its work items wait until the excess is paid back at the budget's rate, while other
/// controllers' work goes on (`docs/operations.md#budgets`). A figure not set here is the
/// operator's default for it (`--default-cpu-budget`, `--default-write-budget`), and none is
/// above the operator's ceiling (`--max-cpu-budget`, `--max-write-budget`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// CPU time of its script hooks per minute, in milliseconds (`status.usage.recent.hookCPUMillis`
    /// per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cpu_millis_per_minute: Option<i64>,
    /// Write requests for its objects per minute (`status.usage.recent.writes` per minute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub writes_per_minute: Option<i64>,
}

impl Budget {
    /// Whether it limits anything.
    pub fn is_set(&self) -> bool {
        self.cpu_millis_per_minute.is_some() || self.writes_per_minute.is_some()
    }

    /// What a controller asking for `own` gets: each figure it sets, else the `default`, and
    /// never more than the `ceiling` (a controller that sets none, without a default, gets the
    /// ceiling). Figures that are not positive limit nothing.
    pub fn effective(own: Option<&Budget>, default: &Budget, ceiling: &Budget) -> Budget {
        let pick = |own: Option<i64>, default: Option<i64>, ceiling: Option<i64>| {
            let positive = |figure: Option<i64>| figure.filter(|f| *f > 0);
            match (positive(own).or(positive(default)), positive(ceiling)) {
                (Some(asked), Some(ceiling)) => Some(asked.min(ceiling)),
                (asked, ceiling) => asked.or(ceiling),
            }
        };
        let own = own.copied().unwrap_or_default();
        Budget {
            cpu_millis_per_minute: pick(
                own.cpu_millis_per_minute,
                default.cpu_millis_per_minute,
                ceiling.cpu_millis_per_minute,
            ),
            writes_per_minute: pick(
                own.writes_per_minute,
                default.writes_per_minute,
                ceiling.writes_per_minute,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(cpu: Option<i64>, writes: Option<i64>) -> Budget {
        Budget {
            cpu_millis_per_minute: cpu,
            writes_per_minute: writes,
        }
    }

    #[test]
    fn a_controllers_own_figure_wins_over_the_default_but_not_over_the_ceiling() {
        let default = budget(Some(500), None);
        let ceiling = budget(Some(2_000), Some(600));
        let own = budget(Some(5_000), Some(100));
        assert_eq!(
            Budget::effective(Some(&own), &default, &ceiling),
            budget(Some(2_000), Some(100))
        );
        assert_eq!(
            Budget::effective(None, &default, &ceiling),
            budget(Some(500), Some(600)),
            "none set: the default, else the ceiling"
        );
        let none = Budget::default();
        assert_eq!(Budget::effective(Some(&own), &none, &none), own);
        assert_eq!(Budget::effective(None, &none, &none), none);
        assert!(!none.is_set());
        assert_eq!(
            Budget::effective(Some(&budget(Some(0), None)), &none, &none),
            none,
            "zero limits nothing"
        );
    }
}
