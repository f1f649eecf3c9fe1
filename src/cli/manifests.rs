//! Reading Kubernetes manifests from YAML files and directories, for `render` and `test`.

use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub(super) enum ManifestError {
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
pub(super) struct Document {
    pub path: PathBuf,
    pub index: usize,
    pub value: Value,
}

/// Parses every document of a YAML (or JSON) text, as [`crate::yaml::parse_documents`]; the
/// error names the file.
pub(super) fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    crate::yaml::parse_documents(text).map_err(|error| ManifestError::Yaml {
        path: path.to_path_buf(),
        message: error.message,
    })
}

pub(super) fn read_file(path: &Path) -> Result<String, ManifestError> {
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
pub(super) const STDIN: &str = "-";

/// Loads Kubernetes objects from files and directories (recursively: `*.yaml`, `*.yml`,
/// `*.json`, skipping `*.test.yaml` harness files), and from standard input for `-`, in a
/// stable order.
/// The files the documents came from, each once, in order.
pub(super) fn paths(documents: &[Document]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for document in documents {
        if paths.last() != Some(&document.path) {
            paths.push(document.path.clone());
        }
    }
    paths
}

pub(super) fn load_objects(paths: &[PathBuf]) -> Result<Vec<Document>, ManifestError> {
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
pub(super) fn to_yaml(value: &impl serde::Serialize) -> String {
    serde_saphyr::to_string(value)
        .unwrap_or_else(|error| format!("# cannot print as YAML: {error}\n"))
}
