//! What the files of the workspace hold that checking an open file needs: the
//! CustomResourceDefinitions (types a controller names, and their schemas) and the ConfigMaps
//! (scripts a hook references). Read once when the editor connects and again when a manifest is
//! saved.

use crate::object;
use crate::resources::StaticResolver;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A workspace's manifests are read up to this many files, each up to this size: a language
/// server must answer quickly in a repository of any size.
const MAX_FILES: usize = 2000;
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The types and ConfigMaps of a workspace.
#[derive(Clone, Debug)]
pub struct Workspace {
    pub root: Option<PathBuf>,
    /// Built-in types and the workspace's CustomResourceDefinitions.
    pub resolver: StaticResolver,
    pub crds: Vec<Value>,
    pub config_maps: Vec<Value>,
}

impl Workspace {
    /// Reads the manifests under `root` (none without one).
    pub fn scan(root: Option<&Path>) -> Workspace {
        let mut workspace = Workspace {
            root: root.map(Path::to_path_buf),
            resolver: StaticResolver::with_builtins(),
            crds: Vec::new(),
            config_maps: Vec::new(),
        };
        let mut files = Vec::new();
        if let Some(root) = root {
            manifest_files(root, 0, &mut files);
        }
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            // A file that does not parse is the editor's business once it is opened.
            for value in crate::yaml::parse_documents(&text).unwrap_or_default() {
                match object::kind(&value) {
                    "CustomResourceDefinition" if workspace.resolver.add_crd(&value) => {
                        workspace.crds.push(value)
                    }
                    "ConfigMap" => workspace.config_maps.push(value),
                    _ => {}
                }
            }
        }
        tracing::debug!(
            crds = workspace.crds.len(),
            config_maps = workspace.config_maps.len(),
            "read the workspace's manifests"
        );
        workspace
    }
}

/// The YAML files under `dir` (not test files), skipping hidden directories and build output.
fn manifest_files(dir: &Path, depth: usize, files: &mut Vec<PathBuf>) {
    if depth > 8 || files.len() >= MAX_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with('.') || matches!(name, "target" | "node_modules") {
            continue;
        }
        if path.is_dir() {
            manifest_files(&path, depth + 1, files);
        } else if (name.ends_with(".yaml") || name.ends_with(".yml"))
            && !name.ends_with(".test.yaml")
            && !name.ends_with(".test.yml")
            && path.metadata().is_ok_and(|m| m.len() <= MAX_FILE_BYTES)
            && files.len() < MAX_FILES
        {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_and_config_maps_are_read_from_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("deploy")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
                   metadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  \
                   scope: Namespaced\n  names: {kind: Widget, plural: widgets}\n  \
                   versions: [{name: v1, served: true, storage: true}]\n";
        std::fs::write(dir.path().join("deploy/crd.yaml"), crd).unwrap();
        let config_map =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: s}\ndata: {a.rhai: '#{}'}\n";
        std::fs::write(dir.path().join("cm.yml"), config_map).unwrap();
        std::fs::write(dir.path().join(".git/hidden.yaml"), config_map).unwrap();
        std::fs::write(dir.path().join("broken.yaml"), "a: [").unwrap();
        let workspace = Workspace::scan(Some(dir.path()));
        assert_eq!(workspace.crds.len(), 1);
        assert_eq!(workspace.config_maps.len(), 1);
        assert!(
            workspace
                .resolver
                .find_kind("example.com/v1", "Widget")
                .is_some()
        );
    }
}
