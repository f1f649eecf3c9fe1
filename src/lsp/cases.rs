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
pub(super) struct TestTarget {
    pub test_file: PathBuf,
    /// Whether it runs the file as a `controller` manifest (else as a `script`).
    pub controller: bool,
    /// The hook it names (`hook:`), if it names one.
    pub hook: Option<String>,
    pub cases: usize,
}

impl TestTarget {
    /// Whether it runs this hook of a manifest: the one it names, or its kind's first.
    pub(super) fn runs(&self, hook: HookKind) -> bool {
        self.controller
            && match &self.hook {
                Some(name) => name == hook.as_str(),
                None => hook.kind().hooks().first() == Some(&hook),
            }
    }
}

/// The test files beside `file` that run it: as a `script`, as a `controller` manifest (with
/// the hook they call), or as the script a `controller` manifest's hook reads from `scriptsDir`
/// (`configMapRef` key named like the file), which counts as running it as a script.
pub(super) fn targets(file: &Path) -> Vec<TestTarget> {
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
    let same = |name: &str| same_file(&dir.join(name), file);
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
            if controllers.items().into_iter().any(same) {
                return Some(TestTarget {
                    test_file,
                    controller: true,
                    hook: spec.hook.clone(),
                    cases,
                });
            }
            let scripts = dir.join(spec.scripts_dir.as_ref()?);
            let reads_it = controllers.items().into_iter().any(|manifest| {
                hook_keys(&dir.join(manifest), spec.hook.as_deref())
                    .iter()
                    .any(|key| same_file(&scripts.join(key), file))
            });
            reads_it.then_some(TestTarget {
                test_file,
                controller: false,
                hook: spec.hook,
                cases,
            })
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || a.canonicalize()
            .ok()
            .is_some_and(|a| Some(a) == b.canonicalize().ok())
}

/// The `configMapRef` keys of the hooks of the controllers in a manifest that a test file runs:
/// the hook it names, or each kind's first.
fn hook_keys(manifest: &Path, hook: Option<&str>) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(manifest) else {
        return Vec::new();
    };
    let documents = crate::yaml::parse_documents(&text).unwrap_or_default();
    documents
        .iter()
        .filter_map(|value| crate::kinds::of(value)?.parse(value).ok())
        .flat_map(|controller| {
            let spec = controller.spec();
            spec.named_hooks()
                .into_iter()
                .filter(|(kind, _)| match hook {
                    Some(name) => name == kind.as_str(),
                    None => kind.kind().hooks().first() == Some(kind),
                })
                .filter_map(|(_, hook)| {
                    Some(hook.script.as_ref()?.config_map_ref.as_ref()?.key.clone())
                })
                .collect::<Vec<_>>()
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

    /// The layout docs/testing.md recommends: a manifest whose hook reads `configMapRef` key
    /// `sync.rhai`, a test file naming the manifest with `scriptsDir`, the script beside them.
    #[test]
    fn a_script_a_manifest_reads_from_scripts_dir_is_run_by_its_test_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap()
        };
        write(
            "controller.yaml",
            "apiVersion: metascript.dev/v1alpha1\nkind: DecoratorController\n\
             metadata: {name: team}\nspec:\n  resources: [{apiVersion: v1, resource: configmaps}]\n  \
             hooks:\n    sync:\n      script:\n        configMapRef: \
             {namespace: default, name: team-hooks, key: sync.rhai}\n    finalize:\n      \
             script:\n        configMapRef: {namespace: default, name: team-hooks, key: fin.rhai}\n",
        );
        write("sync.rhai", "#{}");
        write("fin.rhai", "#{}");
        write(
            "team.test.yaml",
            "controller: controller.yaml\nscriptsDir: .\ncases: [{name: a, request: {}}]\n",
        );
        let found = targets(&dir.path().join("sync.rhai"));
        assert_eq!(
            found,
            [TestTarget {
                test_file: dir.path().join("team.test.yaml"),
                controller: false,
                hook: None,
                cases: 1
            }]
        );
        // The test file calls sync (the kind's first hook), not finalize.
        assert_eq!(targets(&dir.path().join("fin.rhai")), []);
        // Without scriptsDir the test file reads ConfigMaps only.
        write("team.test.yaml", "controller: controller.yaml\ncases: []\n");
        assert_eq!(targets(&dir.path().join("sync.rhai")), []);
    }
}
