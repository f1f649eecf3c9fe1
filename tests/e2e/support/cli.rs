//! The built `metascript` binary, run to completion as a user would run it.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository root, where the binary runs (so example paths resolve as in the docs).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `metascript ARGS…`, its output once it exited.
pub fn metascript<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_metascript"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("the metascript binary runs")
}

/// The standard output of a run that must have succeeded; `what` names it in the failure, which
/// shows both outputs.
pub fn stdout_of(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} exited with {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}
