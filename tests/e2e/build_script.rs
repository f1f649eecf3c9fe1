//! What `build.rs` asks Cargo to watch for the commit in `metascript --version`: only paths that
//! exist (Cargo treats a missing one as changed on every build, rust-lang/cargo#4076, which
//! rebuilt the crate on every invocation), and always something that a new commit touches, in
//! each shape a checkout takes: a fresh repository, packed refs, a detached HEAD, a worktree.
//!
//! `hack/check-fresh-build.sh` checks the outcome on the real checkout (a second `cargo build`
//! compiles nothing); these cases cover the shapes that checkout may not have.

#[allow(dead_code)]
#[path = "../../build.rs"]
mod script;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// A throwaway repository driven by the git CLI, untouched by the user's git configuration.
struct Repo {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("main");
        std::fs::create_dir(&root).unwrap();
        let repo = Repo { _dir: dir, root };
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo.commit();
        repo
    }

    fn git(&self, args: &[&str]) -> String {
        git_in(&self.root, args)
    }

    /// An empty commit: it moves HEAD's branch (or a detached HEAD) and nothing else.
    fn commit(&self) {
        commit_in(&self.root);
    }
}

fn git_in(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("running git (needed to build from a checkout anyway)");
    assert!(
        output.status.success(),
        "git {} in {}: {}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn commit_in(dir: &Path) {
    // Past the file system's timestamp granularity, so a touched file is newer than before.
    std::thread::sleep(Duration::from_millis(20));
    git_in(dir, &["commit", "--quiet", "--allow-empty", "-m", "change"]);
}

/// The newest modification time among `paths`, directories searched as Cargo searches them.
fn newest(paths: &[PathBuf]) -> SystemTime {
    fn walk(path: &Path, newest: &mut SystemTime) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        *newest = (*newest).max(meta.modified().unwrap());
        if meta.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                walk(&entry.unwrap().path(), newest);
            }
        }
    }
    let mut time = SystemTime::UNIX_EPOCH;
    for path in paths {
        walk(path, &mut time);
    }
    time
}

/// What `build.rs` watches in `root`, checked for existence (the cargo#4076 trap), with the
/// watched paths made comparable.
fn watched(root: &Path) -> Vec<PathBuf> {
    let paths = script::git_watch(root);
    for path in &paths {
        assert!(
            path.exists(),
            "build.rs watches {}, which does not exist: Cargo would re-run it on every build",
            path.display()
        );
    }
    paths
}

fn canonical(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect()
}

/// Asserts that a commit made by `commit` touches something `root`'s watch list holds, so the
/// next build re-reads the commit.
fn a_commit_is_noticed(root: &Path, commit: impl FnOnce()) {
    let paths = watched(root);
    let before = newest(&paths);
    commit();
    assert!(
        newest(&paths) > before,
        "a commit touched none of {paths:?}: `metascript --version` would name an old commit"
    );
}

#[test]
fn a_fresh_repository_watches_head_and_its_loose_branch_only() {
    let repo = Repo::new();
    let git = repo.root.join(".git");
    assert!(
        !git.join("packed-refs").exists(),
        "a new repository has no packed-refs: the case this guards"
    );
    let paths = canonical(&watched(&repo.root));
    let expected = canonical(&[git.join("HEAD"), git.join("refs/heads/main")]);
    assert_eq!(paths, expected);
    a_commit_is_noticed(&repo.root, || repo.commit());
}

#[test]
fn a_packed_branch_is_watched_in_packed_refs_and_where_its_next_commit_lands() {
    let repo = Repo::new();
    repo.git(&["pack-refs", "--all"]);
    let git = repo.root.join(".git");
    assert!(
        !git.join("refs/heads/main").exists(),
        "pack-refs --all moved the branch into packed-refs"
    );
    let paths = canonical(&watched(&repo.root));
    assert!(
        paths.contains(&std::fs::canonicalize(git.join("packed-refs")).unwrap()),
        "{paths:?}"
    );
    // A commit on a packed branch writes its loose ref again and leaves packed-refs alone.
    a_commit_is_noticed(&repo.root, || repo.commit());
    // Then the loose ref is what counts again.
    assert!(git.join("refs/heads/main").is_file());
    assert_eq!(
        canonical(&watched(&repo.root)),
        canonical(&[git.join("HEAD"), git.join("refs/heads/main")])
    );
}

#[test]
fn a_detached_head_is_watched_alone() {
    let repo = Repo::new();
    repo.git(&["checkout", "--quiet", "--detach"]);
    let git = repo.root.join(".git");
    assert_eq!(
        canonical(&watched(&repo.root)),
        canonical(&[git.join("HEAD")])
    );
    a_commit_is_noticed(&repo.root, || repo.commit());
}

#[test]
fn a_worktree_watches_its_own_head_and_the_shared_branch() {
    let repo = Repo::new();
    let worktree = repo.root.parent().unwrap().join("worktree");
    repo.git(&[
        "worktree",
        "add",
        "--quiet",
        "-b",
        "feature",
        worktree.to_str().unwrap(),
    ]);
    assert!(
        worktree.join(".git").is_file(),
        "a worktree's .git is a file"
    );
    let git = repo.root.join(".git");
    assert_eq!(
        canonical(&watched(&worktree)),
        canonical(&[
            git.join("worktrees/worktree/HEAD"),
            git.join("refs/heads/feature")
        ])
    );
    a_commit_is_noticed(&worktree, || commit_in(&worktree));
    // A commit in the main checkout is not this worktree's business.
    let paths = watched(&worktree);
    let before = newest(&paths);
    repo.commit();
    assert_eq!(newest(&paths), before, "{paths:?}");

    // Its branch packed: still only existing paths, and its next commit still noticed.
    repo.git(&["pack-refs", "--all"]);
    assert!(!git.join("refs/heads/feature").exists());
    a_commit_is_noticed(&worktree, || commit_in(&worktree));
}

#[test]
fn outside_a_checkout_nothing_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(script::git_watch(dir.path()), Vec::<PathBuf>::new());
}
