//! Build facts for `metascript --version` and the `metascript_build_info` metric: the commit
//! (from git, or METASCRIPT_COMMIT where the source has no .git, as in an image build) and the
//! versions of the two script engines (from Cargo.lock, so they cannot drift from what is
//! linked).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=METASCRIPT_COMMIT");
    println!("cargo:rerun-if-changed=Cargo.lock");
    let git = Path::new(".git");
    if git.is_dir() {
        println!("cargo:rerun-if-changed=.git/HEAD");
        if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
            && let Some(reference) = head.trim().strip_prefix("ref: ")
        {
            println!("cargo:rerun-if-changed=.git/{reference}");
        }
        println!("cargo:rerun-if-changed=.git/packed-refs");
    }
    let commit = std::env::var("METASCRIPT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=METASCRIPT_COMMIT={commit}");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let rhai = locked_version(&lock, "rhai").unwrap_or_else(|| "unknown".into());
    // luau0-src versions read `0.22.0+luau740`: the part after `+luau` is Luau's release.
    let luau = locked_version(&lock, "luau0-src")
        .and_then(|v| {
            v.split_once("+luau")
                .map(|(_, release)| format!("0.{release}"))
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=METASCRIPT_RHAI_VERSION={rhai}");
    println!("cargo:rustc-env=METASCRIPT_LUAU_VERSION={luau}");
}

fn git_commit() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_string();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}

/// The version Cargo.lock records for a package (the first, if several).
fn locked_version(lock: &str, package: &str) -> Option<String> {
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{package}\"") {
            let version = lines.next()?.strip_prefix("version = \"")?;
            return Some(version.trim_end_matches('"').to_string());
        }
    }
    None
}
