//! What this build is: `metascript --version` and the `metascript_build_info` metric.

pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
pub(crate) const COMMIT: &str = env!("METASCRIPT_COMMIT");
pub(crate) const RHAI: &str = env!("METASCRIPT_RHAI_VERSION");
pub(crate) const LUAU: &str = env!("METASCRIPT_LUAU_VERSION");

/// `0.1.0 (commit 0123456789ab, rhai 1.27.0, luau 0.740)`
pub(crate) const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("METASCRIPT_COMMIT"),
    ", rhai ",
    env!("METASCRIPT_RHAI_VERSION"),
    ", luau ",
    env!("METASCRIPT_LUAU_VERSION"),
    ")"
);
