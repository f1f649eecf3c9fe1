//! The scripts of an open manifest: every inline hook and library script of its controllers and
//! every `*.rhai`/`*.lua` key of its ConfigMaps, each with its place in the file and what runs it,
//! and the script an engine's [`ScriptOrigin`] names.

use crate::api::{HookKind, Language};
use crate::kinds;
use crate::object;
use crate::script::ScriptOrigin;
use crate::yaml::{self, Node, Position, YamlIndex};
use serde_json::Value;

/// A manifest as the editor holds it: where everything is, and each document's value.
pub(crate) struct Manifest {
    pub index: YamlIndex,
    /// The documents that hold something: their number in `index.documents()`, and value.
    pub documents: Vec<(usize, Value)>,
}

/// A manifest that does not parse, and where.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub at: Position,
    pub message: String,
}

/// One script of a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Script {
    /// Which of the manifest's `documents` holds it.
    pub document: usize,
    /// The path of its string, e.g. `spec.hooks.sync.script.inline`.
    pub path: String,
    pub language: Language,
    /// The origin the engines name it by.
    pub origin: ScriptOrigin,
    /// The hook it is, for a hook's inline script.
    pub hook: Option<HookKind>,
}

impl Manifest {
    pub(crate) fn parse(text: &str) -> Result<Manifest, Unreadable> {
        let index = YamlIndex::parse(text).map_err(|error| Unreadable {
            at: error.at,
            message: format!("invalid YAML: {}", error.message),
        })?;
        let values = yaml::parse_documents(text).map_err(|error| Unreadable {
            at: Position::default(),
            message: format!("invalid YAML: {}", error.message),
        })?;
        let numbers: Vec<usize> = index
            .documents()
            .iter()
            .enumerate()
            .filter(|(_, document)| !document.is_empty())
            .map(|(number, _)| number)
            .collect();
        // Both parsers read the same text; if they ever disagree on which documents are empty,
        // places are not worth guessing.
        if numbers.len() != values.len() {
            return Err(Unreadable {
                at: Position::default(),
                message: "cannot tell where this file's documents are".into(),
            });
        }
        Ok(Manifest {
            index,
            documents: numbers.into_iter().zip(values).collect(),
        })
    }

    /// The node at a path of one of `documents`.
    pub(crate) fn node(&self, document: usize, path: &str) -> Option<&Node> {
        let (number, _) = self.documents.get(document)?;
        self.index.documents()[*number].node(path)
    }

    /// Every script of every document, in order.
    pub(crate) fn scripts(&self) -> Vec<Script> {
        let mut scripts = Vec::new();
        for (document, (_, value)) in self.documents.iter().enumerate() {
            let mut found = |path: String, language, origin, hook| {
                if self.node(document, &path).is_some() {
                    scripts.push(Script {
                        document,
                        path,
                        language,
                        origin,
                        hook,
                    });
                }
            };
            if let Some(kind) = kinds::of(value) {
                let controller = object::name(value).to_string();
                for hook in kind.name().hooks() {
                    let script = &value["spec"]["hooks"][hook.as_str()]["script"];
                    if let Some(language) = language_of(script) {
                        let origin = ScriptOrigin::Inline {
                            controller: controller.clone(),
                            hook: *hook,
                        };
                        let path = format!("spec.hooks.{hook}.script.inline");
                        found(path, language, origin, Some(*hook));
                    }
                }
                let libraries = value["spec"]["libraries"].as_array();
                for (index, library) in libraries.into_iter().flatten().enumerate() {
                    if let (Some(language), Some(name)) =
                        (language_of(library), library["name"].as_str())
                    {
                        let origin = ScriptOrigin::InlineLibrary {
                            controller: controller.clone(),
                            library: name.to_string(),
                        };
                        let path = format!("spec.libraries[{index}].inline");
                        found(path, language, origin, None);
                    }
                }
            } else if object::kind(value) == "ConfigMap" && object::api_version(value) == "v1" {
                let data = value["data"].as_object();
                for key in data.into_iter().flat_map(|data| data.keys()) {
                    if let Some(language) = Language::from_file_name(key) {
                        let origin = ScriptOrigin::ConfigMap {
                            namespace: object::namespace(value).unwrap_or_default().to_string(),
                            name: object::name(value).to_string(),
                            key: key.clone(),
                        };
                        found(format!("data.{key}"), language, origin, None);
                    }
                }
            }
        }
        scripts
    }

    /// The script of this manifest an origin names. A ConfigMap without a namespace in the
    /// file matches a reference from any namespace (it is applied with `-n`).
    pub(crate) fn script_of<'a>(
        &self,
        scripts: &'a [Script],
        origin: &ScriptOrigin,
    ) -> Option<&'a Script> {
        scripts
            .iter()
            .find(|script| match (&script.origin, origin) {
                (
                    ScriptOrigin::ConfigMap {
                        namespace,
                        name,
                        key,
                    },
                    ScriptOrigin::ConfigMap {
                        namespace: wanted_namespace,
                        name: wanted_name,
                        key: wanted_key,
                    },
                ) => {
                    name == wanted_name
                        && key == wanted_key
                        && (namespace.is_empty() || namespace == wanted_namespace)
                }
                (found, wanted) => found == wanted,
            })
    }

    /// The script whose string holds `at`, and the offset of `at` in its text.
    pub(crate) fn script_at<'a>(
        &self,
        scripts: &'a [Script],
        at: Position,
    ) -> Option<(&'a Script, usize)> {
        scripts.iter().find_map(|script| {
            let node = self.node(script.document, &script.path)?;
            let offset = self.index.string_offset(node, at)?;
            Some((script, offset))
        })
    }

    /// A script's text.
    pub(crate) fn text(&self, script: &Script) -> &str {
        self.node(script.document, &script.path)
            .and_then(Node::scalar)
            .unwrap_or_default()
    }

    /// The value of the document a script is in.
    pub(crate) fn value(&self, script: &Script) -> &Value {
        &self.documents[script.document].1
    }
}

/// The language of an inline script or library: its `language`, when it has inline code.
fn language_of(script: &Value) -> Option<Language> {
    script["inline"].as_str()?;
    match script["language"].as_str()? {
        "rhai" => Some(Language::Rhai),
        "lua" => Some(Language::Lua),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "\
apiVersion: v1
kind: ConfigMap
metadata: {name: scripts}
data:
  finalize.lua: |
    return {finalized = true}
  notes.txt: not a script
---
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: labeller}
spec:
  libraries:
  - name: util
    language: rhai
    inline: |
      fn tag() { \"x\" }
  hooks:
    sync:
      script:
        language: rhai
        inline: |
          #{ labels: #{ a: tag() } }
    finalize:
      script: {configMapRef: {namespace: hooks, name: scripts, key: finalize.lua}}
";

    #[test]
    fn every_inline_script_and_script_key_is_found_with_its_origin() {
        let manifest = Manifest::parse(FILE).unwrap();
        let scripts = manifest.scripts();
        let paths: Vec<&str> = scripts.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "data.finalize.lua",
                "spec.hooks.sync.script.inline",
                "spec.libraries[0].inline"
            ]
        );
        assert_eq!(scripts[1].hook, Some(kinds::decorator::SYNC));
        assert_eq!(manifest.text(&scripts[2]), "fn tag() { \"x\" }\n");
        // The hook's ConfigMap reference finds the key, whatever its namespace.
        let referenced = ScriptOrigin::ConfigMap {
            namespace: "hooks".into(),
            name: "scripts".into(),
            key: "finalize.lua".into(),
        };
        let found = manifest.script_of(&scripts, &referenced).unwrap();
        assert_eq!(found.language, Language::Lua);
        // The cursor inside the sync script.
        let (script, offset) = manifest
            .script_at(
                &scripts,
                Position {
                    line: 22,
                    column: 30,
                },
            )
            .unwrap();
        assert_eq!(script.path, "spec.hooks.sync.script.inline");
        assert!(manifest.text(script)[..offset].ends_with("tag"));
    }

    #[test]
    fn a_file_that_does_not_parse_says_where() {
        let error = Manifest::parse("a: [\nb: 1").err().unwrap();
        assert!(error.message.starts_with("invalid YAML"), "{error:?}");
        assert!(error.at.line <= 1);
    }
}
