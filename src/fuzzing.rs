//! What every fuzz target (a proptest named `fuzz_…`) shares: a case count small enough for
//! the test suite, which `PROPTEST_CASES` raises for a longer run (`hack/test.sh` runs them
//! all once more with it). proptest reads that variable only for its default configuration,
//! so a target that sets its own count reads it here.

use proptest::test_runner::Config;

pub(crate) fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        ..Config::default()
    }
}
