//! Build facts for `metascript --version` and the `metascript_build_info` metric: the commit
//! (from git, or METASCRIPT_COMMIT where the source has no .git, as in an image build) and the
//! versions of the two script engines (from Cargo.lock, so they cannot drift from what is
//! linked).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=METASCRIPT_COMMIT");
    println!("cargo:rerun-if-changed=Cargo.lock");
    for path in git_watch(Path::new(".")) {
        println!("cargo:rerun-if-changed={}", path.display());
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

/// The files (and directories) whose change can change what `git rev-parse HEAD` answers in the
/// checkout at `root`, for Cargo to watch. Only paths that exist: Cargo counts a missing one as
/// changed on every build (rust-lang/cargo#4076), which re-ran this script and rebuilt the crate
/// on every invocation where `.git/packed-refs` had never been written.
///
/// - `.git` is a directory in a clone and a file (`gitdir: …`) in a worktree made by
///   `git worktree add`; a worktree's HEAD is its own, its branches live in the common directory
///   (named by `commondir`).
/// - A detached HEAD holds the commit itself, so HEAD is all there is to watch.
/// - A branch is a loose file under `refs/` until `git pack-refs` (or gc, or some clones) moves
///   it into `packed-refs`; the next commit on it writes the loose file again, in a directory
///   that is watched for that reason. A reftable repository keeps every ref under `reftable/`.
/// - Outside a checkout with its own `.git` (a packaged crate, an image build), nothing: the
///   commit then comes from METASCRIPT_COMMIT.
pub fn git_watch(root: &Path) -> Vec<PathBuf> {
    let dot_git = root.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git
    } else if let Ok(link) = std::fs::read_to_string(&dot_git) {
        match link.trim().strip_prefix("gitdir:") {
            Some(dir) => root.join(dir.trim()),
            None => return Vec::new(),
        }
    } else {
        return Vec::new();
    };
    let common = match std::fs::read_to_string(git_dir.join("commondir")) {
        Ok(dir) => git_dir.join(dir.trim()),
        Err(_) => git_dir.clone(),
    };
    let head = git_dir.join("HEAD");
    let mut watch = vec![head.clone()];
    let reference = std::fs::read_to_string(&head).unwrap_or_default();
    if let Some(reference) = reference.trim().strip_prefix("ref: ") {
        let reftable = common.join("reftable");
        let loose = common.join(reference);
        if reftable.is_dir() {
            watch.push(reftable);
        } else if loose.is_file() {
            watch.push(loose);
        } else {
            watch.push(common.join("packed-refs"));
            // The loose ref's directory, or the nearest one that exists (a packed
            // `refs/heads/team/x` may have left no `refs/heads/team`).
            if let Some(dir) = loose
                .ancestors()
                .skip(1)
                .take_while(|dir| dir.starts_with(&common) && *dir != common)
                .find(|dir| dir.is_dir())
            {
                watch.push(dir.to_path_buf());
            }
        }
    }
    watch.retain(|path| path.exists());
    watch
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
