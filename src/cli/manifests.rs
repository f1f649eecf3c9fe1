//! Reading Kubernetes manifests from YAML files and directories, for `render` and `test`.

use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: invalid YAML: {message}")]
    Yaml { path: PathBuf, message: String },
    #[error("{path}: document {index} is not a Kubernetes object: {reason}")]
    NotAnObject {
        path: PathBuf,
        index: usize,
        reason: String,
    },
    #[error("{path}: no such file or directory")]
    Missing { path: PathBuf },
}

/// One YAML document and where it came from.
#[derive(Clone, Debug)]
pub struct Document {
    pub path: PathBuf,
    pub index: usize,
    pub value: Value,
}

/// Parses every document of a YAML (or JSON) text; empty documents are skipped.
///
/// Numbers are read as kubectl reads them (YAML 1.1): `0755` is octal, 493, as in a volume's
/// `defaultMode`. Read as YAML 1.2 it would be 755, which `convert` would then print for an
/// object it promises to pass through unchanged, and the API server refuses.
pub fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let documents: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|error| {
            ManifestError::Yaml {
                path: path.to_path_buf(),
                message: error.to_string(),
            }
        })?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

pub fn read_file(path: &Path) -> Result<String, ManifestError> {
    std::fs::read_to_string(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ManifestError::Missing {
            path: path.to_path_buf(),
        },
        _ => ManifestError::Read {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Standard input, as a path (`-f -`).
pub const STDIN: &str = "-";

/// Loads Kubernetes objects from files and directories (recursively: `*.yaml`, `*.yml`,
/// `*.json`, skipping `*.test.yaml` harness files), and from standard input for `-`, in a
/// stable order.
pub fn load_objects(paths: &[PathBuf]) -> Result<Vec<Document>, ManifestError> {
    let mut files = Vec::new();
    for path in paths {
        if path.as_os_str() == STDIN {
            files.push(path.clone());
        } else {
            collect_files(path, &mut files, true)?;
        }
    }
    let mut documents = Vec::new();
    for file in files {
        let text = if file.as_os_str() == STDIN {
            std::io::read_to_string(std::io::stdin()).map_err(|source| ManifestError::Read {
                path: file.clone(),
                source,
            })?
        } else {
            read_file(&file)?
        };
        for (index, value) in parse_documents(&file, &text)?.into_iter().enumerate() {
            let problem = if !value.is_object() {
                Some("expected a map".to_string())
            } else if crate::object::kind(&value).is_empty() {
                Some("it has no kind".to_string())
            } else if crate::object::api_version(&value).is_empty() {
                Some("it has no apiVersion".to_string())
            } else {
                None
            };
            if let Some(reason) = problem {
                return Err(ManifestError::NotAnObject {
                    path: file,
                    index,
                    reason,
                });
            }
            documents.push(Document {
                path: file.clone(),
                index,
                value,
            });
        }
    }
    Ok(documents)
}

fn collect_files(
    path: &Path,
    files: &mut Vec<PathBuf>,
    explicit: bool,
) -> Result<(), ManifestError> {
    let metadata = std::fs::metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ManifestError::Missing {
            path: path.to_path_buf(),
        },
        _ => ManifestError::Read {
            path: path.to_path_buf(),
            source,
        },
    })?;
    if metadata.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| ManifestError::Read {
                path: path.to_path_buf(),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .collect();
        entries.sort();
        for entry in entries {
            collect_files(&entry, files, false)?;
        }
    } else if explicit || is_manifest(path) {
        files.push(path.to_path_buf());
    }
    Ok(())
}

fn is_manifest(path: &Path) -> bool {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    (name.ends_with(".yaml") || name.ends_with(".yml") || name.ends_with(".json"))
        && !name.ends_with(".test.yaml")
        && !name.ends_with(".test.yml")
}

/// Writes a value as YAML, as `render` and `test --update` print it.
pub fn to_yaml(value: &impl serde::Serialize) -> String {
    serde_saphyr::to_string(value)
        .unwrap_or_else(|error| format!("# cannot print as YAML: {error}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Metacontroller's update-strategy example mounts its hook with `defaultMode: 0755`:
    /// kubectl reads it as octal, and so must `convert`, which prints the object again.
    #[test]
    fn numbers_are_read_as_kubectl_reads_them() {
        let text = "kind: Deployment\nspec:\n  defaultMode: 0755\n  replicas: 10\n  \
                    mode: 0o644\n  hex: 0x1F\n  quoted: \"0755\"\n  enabled: true\n---\n";
        let documents = parse_documents(Path::new("d.yaml"), text).unwrap();
        assert_eq!(
            documents,
            [json!({"kind": "Deployment", "spec": {
                "defaultMode": 493, "replicas": 10, "mode": 420, "hex": 31,
                "quoted": "0755", "enabled": true
            }})]
        );
        // What is printed reads back the same.
        let printed = to_yaml(&documents[0]);
        assert_eq!(
            parse_documents(Path::new("d.yaml"), &printed).unwrap(),
            documents
        );
    }
}
