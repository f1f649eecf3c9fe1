//! Running a script's `*.test.yaml` cases from the editor: which test files exercise an open
//! script (those beside it naming it as their `script`, or naming its manifest as their
//! `controller` with the hook), and the runner that runs one, which the command line hands in
//! (`metascript test`'s harness lives in the `cli` layer, above this one).

use crate::api::HookKind;
use crate::cases::TestFile;
use crate::validate::ScriptSpot;
use std::path::{Path, PathBuf};

/// One case's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseOutcome {
    pub name: String,
    /// Why it failed; `None` when it passed.
    pub failure: Option<String>,
    /// Where in a script it failed, when the hook failed there.
    pub spot: Option<ScriptSpot>,
}

/// Runs the cases of a test file, as `metascript test` does.
pub trait CaseRunner {
    /// Every case's outcome, or why the file cannot be used.
    fn run(&self, test_file: &Path) -> Result<Vec<CaseOutcome>, String>;
}

/// A test file that runs a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestTarget {
    pub test_file: PathBuf,
    /// Whether it runs the file as a `controller` manifest (else as a `script`).
    pub controller: bool,
    /// The hook it names (`hook:`), if it names one.
    pub hook: Option<String>,
    pub cases: usize,
}

impl TestTarget {
    /// Whether it runs this hook of a manifest: the one it names, or its kind's first.
    pub fn runs(&self, hook: HookKind) -> bool {
        self.controller
            && match &self.hook {
                Some(name) => name == hook.as_str(),
                None => hook.kind().hooks().first() == Some(&hook),
            }
    }
}

/// The test files beside `file` that run it: as a `script`, or as a `controller` manifest
/// (with the hook they call).
pub fn targets(file: &Path) -> Vec<TestTarget> {
    let Some(dir) = file.parent() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut test_files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            name.ends_with(".test.yaml") || name.ends_with(".test.yml")
        })
        .collect();
    test_files.sort();
    let same = |name: &str| {
        let named = dir.join(name);
        named == file || named.canonicalize().ok() == file.canonicalize().ok()
    };
    test_files
        .into_iter()
        .filter_map(|test_file| {
            let text = std::fs::read_to_string(&test_file).ok()?;
            let spec: TestFile = serde_saphyr::from_str(&text).ok()?;
            let cases = spec.cases.len();
            if let Some(scripts) = &spec.script
                && scripts.items().into_iter().any(same)
            {
                return Some(TestTarget {
                    test_file,
                    controller: false,
                    hook: spec.hook,
                    cases,
                });
            }
            let controllers = spec.controller.as_ref()?;
            controllers
                .items()
                .into_iter()
                .any(same)
                .then_some(TestTarget {
                    test_file,
                    controller: true,
                    hook: spec.hook.clone(),
                    cases,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_beside_a_script_or_manifest_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write("sync.rhai", "#{}");
        write("controller.yaml", "");
        write(
            "sync.test.yaml",
            "script: [sync.rhai, sync.lua]\ncases: [{name: a, request: {}}]\n",
        );
        write(
            "controller.test.yaml",
            "controller: controller.yaml\nhook: finalize\ncases: []\n",
        );
        write("other.test.yaml", "script: other.rhai\ncases: []\n");
        write("broken.test.yaml", "cases: [");
        let script = targets(&dir.path().join("sync.rhai"));
        assert_eq!(
            script,
            [TestTarget {
                test_file: dir.path().join("sync.test.yaml"),
                controller: false,
                hook: None,
                cases: 1
            }]
        );
        let manifest = targets(&dir.path().join("controller.yaml"));
        assert_eq!(manifest.len(), 1);
        assert!(manifest[0].runs(crate::kinds::decorator::FINALIZE));
        assert!(!manifest[0].runs(crate::kinds::decorator::SYNC));
    }
}
