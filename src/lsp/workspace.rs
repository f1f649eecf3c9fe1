//! What the files of the workspace hold that checking an open file needs: the
//! CustomResourceDefinitions (types a controller names, and their schemas) and the ConfigMaps
//! (scripts a hook references). Read once when the editor connects and again when a manifest is
//! saved. The CRDs read from a cluster, when the server reads one, are kept beside them.

use crate::object;
use crate::resources::StaticResolver;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A workspace's manifests are read up to this many files, each up to this size: a language
/// server must answer quickly in a repository of any size.
const MAX_FILES: usize = 2000;
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The types and ConfigMaps of a workspace.
#[derive(Clone, Debug)]
pub(super) struct Workspace {
    pub root: Option<PathBuf>,
    /// Built-in types and the CustomResourceDefinitions of the workspace and the cluster.
    pub resolver: StaticResolver,
    /// The workspace's CustomResourceDefinitions.
    pub crds: Vec<Value>,
    /// The cluster's, as last read (shared: they outlive a scan of the files).
    pub cluster_crds: Arc<[Value]>,
    pub config_maps: Vec<Value>,
}

impl Workspace {
    /// Reads the manifests under `root` (none without one); `cluster_crds` are a cluster's
    /// CustomResourceDefinitions. A type both define is the workspace's: it is what the user
    /// edits, and applies next.
    pub(super) fn scan(root: Option<&Path>, cluster_crds: Arc<[Value]>) -> Workspace {
        let mut resolver = StaticResolver::with_builtins();
        // The workspace's are added after, over the cluster's.
        for crd in cluster_crds.iter() {
            resolver.add_crd(crd);
        }
        let mut workspace = Workspace {
            root: root.map(Path::to_path_buf),
            resolver,
            crds: Vec::new(),
            cluster_crds,
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
            cluster_crds = workspace.cluster_crds.len(),
            config_maps = workspace.config_maps.len(),
            "read the workspace's manifests"
        );
        workspace
    }

    /// The files read again (a manifest was saved), with the same cluster types.
    pub(super) fn rescan(&self) -> Workspace {
        Workspace::scan(self.root.as_deref(), self.cluster_crds.clone())
    }

    /// Every CustomResourceDefinition known, the workspace's first: the first that defines a
    /// type is its schema.
    pub(super) fn crds(&self) -> impl Iterator<Item = &Value> {
        self.crds.iter().chain(self.cluster_crds.iter())
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
        let workspace = Workspace::scan(Some(dir.path()), Arc::new([]));
        assert_eq!(workspace.crds.len(), 1);
        assert_eq!(workspace.config_maps.len(), 1);
        assert!(
            workspace
                .resolver
                .find_kind("example.com/v1", "Widget")
                .is_some()
        );
    }

    #[test]
    fn the_clusters_crds_count_after_the_workspaces_own() {
        let dir = tempfile::tempdir().unwrap();
        let crd = |kind: &str, scope: &str| {
            let plural = format!("{}s", kind.to_lowercase());
            serde_json::json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.example.com")},
                "spec": {"group": "example.com", "scope": scope,
                         "names": {"kind": kind, "plural": plural},
                         "versions": [{"name": "v1", "served": true, "storage": true}]}
            })
        };
        let edited = crd("Widget", "Cluster");
        std::fs::write(
            dir.path().join("crd.yaml"),
            serde_json::to_string(&edited).unwrap(),
        )
        .unwrap();
        let cluster: Arc<[Value]> =
            vec![crd("Widget", "Namespaced"), crd("Gadget", "Namespaced")].into();
        let workspace = Workspace::scan(Some(dir.path()), cluster);
        let widget = workspace
            .resolver
            .find_kind("example.com/v1", "Widget")
            .unwrap();
        assert!(!widget.namespaced, "the workspace's Widget, cluster-scoped");
        assert!(
            workspace
                .resolver
                .find_kind("example.com/v1", "Gadget")
                .is_some()
        );
        let first_widget = workspace
            .crds()
            .find(|crd| crd["spec"]["names"]["kind"] == "Widget")
            .unwrap();
        assert_eq!(first_widget, &edited);
        // A rescan keeps the cluster's.
        std::fs::remove_file(dir.path().join("crd.yaml")).unwrap();
        let rescanned = workspace.rescan();
        assert!(rescanned.crds.is_empty());
        let widget = rescanned
            .resolver
            .find_kind("example.com/v1", "Widget")
            .unwrap();
        assert!(widget.namespaced, "the cluster's Widget now");
    }
}
