//! Where a hook's script comes from: its inline field, or a ConfigMap key. (A webhook hook has no
//! script; `webhook` resolves it.)

use crate::api::{ConfigMapKeyRef, HookKind, Language, Library, ScriptSpec};
use crate::script::{ScriptOrigin, ScriptSource};
use std::fmt;
use std::path::{Path, PathBuf};

/// Reads ConfigMap data. The operator answers from its ConfigMap cache; `render` and the test
/// harness from the ConfigMaps in their input files.
pub(crate) trait ConfigMapLookup {
    /// The value of `key` in ConfigMap `namespace/name`: `None` when the ConfigMap is missing,
    /// `Some(None)` when it exists without that key.
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>>;

    /// Why ConfigMap `namespace/name` is not read here, when it is withheld on purpose (the
    /// admission webhook reads none for a caller it cannot authenticate).
    fn withheld(&self, _namespace: &str, _name: &str) -> Option<String> {
        None
    }

    /// A local file that replaces every ConfigMap key of this name (the dev loop's
    /// `--scripts-dir`); scripts read from it name the file in their errors.
    fn local_file(&self, _key: &str) -> Option<PathBuf> {
        None
    }

    /// The value of `key` in Secret `namespace/name`, read for the controller (webhook
    /// credentials): `None` when it cannot be read (missing, or not the controller's to read),
    /// `Some(None)` when it exists without that key.
    fn secret_value(&self, _namespace: &str, _name: &str, _key: &str) -> Option<Option<Vec<u8>>> {
        None
    }

    /// The value of `key` in ConfigMap `namespace/name` for a webhook credential (a
    /// `caBundle.configMapRef`): as [`ConfigMapLookup::value`], except in the operator, which
    /// reads it with the controller's account rather than from its own cache.
    fn credential_config_map_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Option<Option<String>> {
        self.value(namespace, name, key)
    }
}

/// A borrowed lookup looks up the same.
impl<T: ConfigMapLookup + ?Sized> ConfigMapLookup for &T {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        (**self).value(namespace, name, key)
    }

    fn local_file(&self, key: &str) -> Option<PathBuf> {
        (**self).local_file(key)
    }

    fn secret_value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<Vec<u8>>> {
        (**self).secret_value(namespace, name, key)
    }

    fn credential_config_map_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Option<Option<String>> {
        (**self).credential_config_map_value(namespace, name, key)
    }
}

/// ConfigMap keys served from files in a directory first (a file named like the key replaces
/// it in every ConfigMap), then from another lookup.
pub(crate) struct ScriptsDir<'a> {
    pub dir: PathBuf,
    pub fallback: &'a dyn ConfigMapLookup,
}

impl ConfigMapLookup for ScriptsDir<'_> {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        self.fallback.value(namespace, name, key)
    }

    fn secret_value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<Vec<u8>>> {
        self.fallback.secret_value(namespace, name, key)
    }

    // Credentials are never dev-loop files.
    fn credential_config_map_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Option<Option<String>> {
        self.fallback
            .credential_config_map_value(namespace, name, key)
    }

    fn local_file(&self, key: &str) -> Option<PathBuf> {
        let candidate = crate::script::shown_path(&self.dir.join(key));
        // Keys are plain file names; anything with a path in it is not looked up locally.
        (Path::new(key).file_name() == Some(key.as_ref()) && candidate.is_file())
            .then_some(candidate)
    }
}

/// A lookup that knows no ConfigMaps.
pub(crate) struct NoConfigMaps;

impl ConfigMapLookup for NoConfigMaps {
    fn value(&self, _: &str, _: &str, _: &str) -> Option<Option<String>> {
        None
    }
}

/// ConfigMaps and Secrets given as JSON objects (from files, or read from a cluster).
impl ConfigMapLookup for Vec<serde_json::Value> {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        let config_map = find_object(self, "ConfigMap", namespace, name)?;
        Some(config_map_data(config_map, key))
    }

    fn secret_value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<Vec<u8>>> {
        let secret = find_object(self, "Secret", namespace, name)?;
        Some(secret_data(secret, key))
    }
}

fn find_object<'a>(
    objects: &'a [serde_json::Value],
    kind: &str,
    namespace: &str,
    name: &str,
) -> Option<&'a serde_json::Value> {
    objects.iter().find(|object| {
        crate::object::kind(object) == kind
            && crate::object::name(object) == name
            && crate::object::namespace(object).unwrap_or("default") == namespace
    })
}

/// The value of one key of a Secret: its `data` (base64), or its `stringData` as a manifest
/// may give it.
fn secret_data(secret: &serde_json::Value, key: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    if let Some(encoded) = secret
        .get("data")
        .and_then(|data| data.get(key))
        .and_then(|v| v.as_str())
    {
        return base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok();
    }
    secret
        .get("stringData")?
        .get(key)?
        .as_str()
        .map(|text| text.as_bytes().to_vec())
}

/// The value of one key of a ConfigMap's `data`.
pub(crate) fn config_map_data(config_map: &serde_json::Value, key: &str) -> Option<String> {
    config_map
        .get("data")?
        .get(key)?
        .as_str()
        .map(str::to_string)
}

/// The piece of a controller a script is: one of its hooks, or one of its libraries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptPart {
    Hook(HookKind),
    Library(String),
}

impl fmt::Display for ScriptPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptPart::Hook(kind) => write!(f, "hook {kind}"),
            ScriptPart::Library(name) => write!(f, "library {name}"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error(
        "{part} of {controller}: the script ({origin}) is empty (a file still being written?); \
         the previous version, if any, keeps running"
    )]
    EmptyScript {
        controller: String,
        part: ScriptPart,
        origin: ScriptOrigin,
    },
    #[error("hook {hook} of {controller}: {field}: {reason}")]
    Webhook {
        controller: String,
        hook: HookKind,
        /// e.g. `webhook.timeout`
        field: String,
        reason: String,
    },
    /// A webhook credential that cannot be read: a Secret, ConfigMap or key missing, or not the
    /// controller's to read. Checks without the cluster's Secrets only warn of it.
    #[error("hook {hook} of {controller}: {field}: {reason}")]
    MissingCredential {
        controller: String,
        hook: HookKind,
        /// e.g. `webhook.authorization.secretRef`
        field: String,
        reason: String,
    },
    /// A script hook's `limits` ask for more than the operator allows.
    #[error("hook {hook} of {controller}: {above}")]
    AboveCeiling {
        controller: String,
        hook: HookKind,
        above: crate::script::ceilings::AboveCeiling,
    },
    #[error("hook {hook} of {controller} has neither script nor webhook")]
    Empty { controller: String, hook: HookKind },
    #[error("hook {hook} of {controller} has both script and webhook; it needs exactly one")]
    Both { controller: String, hook: HookKind },
    #[error("{part} of {controller}: script needs exactly one of inline or configMapRef")]
    Ambiguous {
        controller: String,
        part: ScriptPart,
    },
    #[error("{part} of {controller}: inline script needs a language (rhai or lua)")]
    InlineLanguage {
        controller: String,
        part: ScriptPart,
    },
    #[error("{part} of {controller}: cannot read {path}: {message}")]
    LocalFile {
        controller: String,
        part: ScriptPart,
        path: PathBuf,
        message: String,
    },
    #[error("{part} of {controller}: ConfigMap {namespace}/{name} not found")]
    MissingConfigMap {
        controller: String,
        part: ScriptPart,
        namespace: String,
        name: String,
        /// The key it was to be read from.
        key: String,
    },
    #[error("{part} of {controller}: ConfigMap {namespace}/{name} not checked: {why}")]
    Withheld {
        controller: String,
        part: ScriptPart,
        namespace: String,
        name: String,
        why: String,
    },
    #[error("{part} of {controller}: ConfigMap {namespace}/{name} has no key {key:?}")]
    MissingKey {
        controller: String,
        part: ScriptPart,
        namespace: String,
        name: String,
        key: String,
    },
    #[error(
        "{part} of {controller}: cannot tell the language of ConfigMap key {key:?}; name it \
         *.rhai or *.lua, or set its language"
    )]
    UnknownLanguage {
        controller: String,
        part: ScriptPart,
        key: String,
    },
    #[error("library {library} of {controller}: {reason}")]
    Library {
        controller: String,
        library: String,
        reason: String,
    },
}

/// Where a script's text is: the fields hooks and libraries share.
pub(crate) struct ScriptText<'a> {
    pub language: Option<Language>,
    pub inline: Option<&'a str>,
    pub config_map_ref: Option<&'a ConfigMapKeyRef>,
}

impl<'a> From<&'a ScriptSpec> for ScriptText<'a> {
    fn from(script: &'a ScriptSpec) -> Self {
        ScriptText {
            language: script.language,
            inline: script.inline.as_deref(),
            config_map_ref: script.config_map_ref.as_ref(),
        }
    }
}

impl<'a> From<&'a Library> for ScriptText<'a> {
    fn from(library: &'a Library) -> Self {
        ScriptText {
            language: library.language,
            inline: library.inline.as_deref(),
            config_map_ref: library.config_map_ref.as_ref(),
        }
    }
}

/// The script a hook or library names, read from wherever it lives. An empty script is
/// refused: it is a file caught while being written, or a mistake, never a hook.
pub(crate) fn script_source(
    controller: &str,
    part: &ScriptPart,
    text: ScriptText,
    config_maps: &dyn ConfigMapLookup,
) -> Result<ScriptSource, SourceError> {
    let source = read_source(controller, part, text, config_maps)?;
    if source.code.trim().is_empty() {
        return Err(SourceError::EmptyScript {
            controller: controller.to_string(),
            part: part.clone(),
            origin: source.origin,
        });
    }
    Ok(source)
}

/// The language a script is in: its `language`, else its ConfigMap key's suffix.
pub(crate) fn script_language(
    controller: &str,
    part: &ScriptPart,
    text: &ScriptText,
) -> Result<Language, SourceError> {
    if let Some(language) = text.language {
        return Ok(language);
    }
    match (text.inline, text.config_map_ref) {
        (None, Some(reference)) => {
            Language::from_file_name(&reference.key).ok_or_else(|| SourceError::UnknownLanguage {
                controller: controller.to_string(),
                part: part.clone(),
                key: reference.key.clone(),
            })
        }
        (Some(_), None) => Err(SourceError::InlineLanguage {
            controller: controller.to_string(),
            part: part.clone(),
        }),
        _ => Err(SourceError::Ambiguous {
            controller: controller.to_string(),
            part: part.clone(),
        }),
    }
}

fn read_source(
    controller: &str,
    part: &ScriptPart,
    text: ScriptText,
    config_maps: &dyn ConfigMapLookup,
) -> Result<ScriptSource, SourceError> {
    let language = script_language(controller, part, &text)?;
    let controller_name = controller.to_string();
    match (text.inline, text.config_map_ref) {
        (Some(code), None) => {
            let origin = match part {
                ScriptPart::Hook(hook) => ScriptOrigin::Inline {
                    controller: controller_name,
                    hook: *hook,
                },
                ScriptPart::Library(name) => ScriptOrigin::InlineLibrary {
                    controller: controller_name,
                    library: name.clone(),
                },
            };
            Ok(ScriptSource::new(language, code, origin))
        }
        (None, Some(reference)) => {
            if let Some(path) = config_maps.local_file(&reference.key) {
                let code =
                    std::fs::read_to_string(&path).map_err(|error| SourceError::LocalFile {
                        controller: controller_name.clone(),
                        part: part.clone(),
                        path: path.clone(),
                        message: error.to_string(),
                    })?;
                return Ok(ScriptSource::new(
                    language,
                    code,
                    ScriptOrigin::File { path },
                ));
            }
            let code =
                match config_maps.value(&reference.namespace, &reference.name, &reference.key) {
                    None => {
                        if let Some(why) =
                            config_maps.withheld(&reference.namespace, &reference.name)
                        {
                            return Err(SourceError::Withheld {
                                controller: controller_name,
                                part: part.clone(),
                                namespace: reference.namespace.clone(),
                                name: reference.name.clone(),
                                why,
                            });
                        }
                        return Err(SourceError::MissingConfigMap {
                            controller: controller_name,
                            part: part.clone(),
                            namespace: reference.namespace.clone(),
                            name: reference.name.clone(),
                            key: reference.key.clone(),
                        });
                    }
                    Some(None) => {
                        return Err(SourceError::MissingKey {
                            controller: controller_name,
                            part: part.clone(),
                            namespace: reference.namespace.clone(),
                            name: reference.name.clone(),
                            key: reference.key.clone(),
                        });
                    }
                    Some(Some(code)) => code,
                };
            Ok(ScriptSource::new(
                language,
                code,
                ScriptOrigin::ConfigMap {
                    namespace: reference.namespace.clone(),
                    name: reference.name.clone(),
                    key: reference.key.clone(),
                },
            ))
        }
        _ => Err(SourceError::Ambiguous {
            controller: controller_name,
            part: part.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripts_dir_names_its_files_without_dot_steps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("sync.rhai"), "#{}").unwrap();
        let local = ScriptsDir {
            dir: dir.path().join(".").join("./"),
            fallback: &NoConfigMaps,
        };
        assert_eq!(
            local.local_file("sync.rhai"),
            Some(dir.path().join("sync.rhai"))
        );
        assert_eq!(local.local_file("missing.rhai"), None);
        assert_eq!(local.local_file("../sync.rhai"), None);
    }
}
