//! Reading YAML text: its documents as JSON values (as kubectl reads them), and where each value
//! is in the text ([`positions`]), so a place inside an inline script (an error's line and
//! column, an editor's cursor) can be told as the file's own line and column.

pub(crate) mod positions;

pub(crate) use positions::{Node, Position, Range, YamlIndex};

use serde_json::Value;

/// YAML text that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct YamlError {
    pub message: String,
}

/// Parses every document of a YAML (or JSON) text; empty documents are skipped.
///
/// Numbers are read as kubectl reads them (YAML 1.1): `0755` is octal, 493, as in a volume's
/// `defaultMode`. Read as YAML 1.2 it would be 755, which `convert` would then print for an
/// object it promises to pass through unchanged, and the API server refuses.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, YamlError> {
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let documents: Vec<Value> =
        serde_saphyr::from_multiple_with_options(text, options).map_err(|error| YamlError {
            message: error.to_string(),
        })?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
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
        let documents = parse_documents(text).unwrap();
        assert_eq!(
            documents,
            [json!({"kind": "Deployment", "spec": {
                "defaultMode": 493, "replicas": 10, "mode": 420, "hex": 31,
                "quoted": "0755", "enabled": true
            }})]
        );
        // What is printed reads back the same.
        let printed = serde_saphyr::to_string(&documents[0]).unwrap();
        assert_eq!(parse_documents(&printed).unwrap(), documents);
    }
}
