//! A controller's hooks, ready to call: each one a compiled script (its source resolved, then
//! compiled through the engine's cache) or a webhook endpoint, behind one `call`, whose answer
//! is held to its hook's response fields (`response`); `runner` is what a sync calls them through. The operator,
//! `render` and `metascript test` all go through here, so they run the same engine with the
//! same limits, and call a webhook the same way.

mod credentials;
pub(crate) mod egress;
pub(crate) mod json;
mod response;
mod runner;
mod source;
mod webhook;

pub(crate) use response::{InvalidResponse, check_response_size, check_script_response};
pub(crate) use runner::{HookCall, HookRunner};

pub(crate) use source::{
    ConfigMapLookup, NoConfigMaps, ScriptPart, ScriptsDir, SourceError, config_map_data,
    script_language, script_source,
};
pub(crate) use webhook::{
    DEFAULT_MAX_RESPONSE_BYTES, WebhookClient, WebhookEndpoint, WebhookFailure,
};
pub(crate) use webhook::{endpoint_host_matches, plain_agent};

use crate::api::{
    ControllerSpec, EndpointConfig, Hook, HookKind, HookVersion, Language, Library, Limits,
};
use crate::script::{
    CallContext, CallCost, CallScope, CompiledScript, HookRequest, LibrarySource, ScriptEngine,
    ScriptError, ScriptOrigin, check_library_names,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use webhook::CallFailure;

/// One hook, ready to call.
#[derive(Clone, Debug)]
pub(crate) struct LoadedHook {
    pub kind: HookKind,
    pub code: HookCode,
    /// The shape of the request it gets.
    pub version: HookVersion,
}

/// What answers a hook.
#[derive(Clone, Debug)]
pub(crate) enum HookCode {
    Script {
        script: Arc<CompiledScript>,
        limits: Limits,
    },
    Webhook(Arc<WebhookEndpoint>),
}

impl LoadedHook {
    pub(crate) fn script(
        kind: HookKind,
        script: Arc<CompiledScript>,
        limits: Limits,
    ) -> LoadedHook {
        LoadedHook {
            kind,
            code: HookCode::Script { script, limits },
            version: HookVersion::V1,
        }
    }

    /// Identifies what runs: a change re-syncs everything the hook decides.
    pub(crate) fn digest(&self) -> &str {
        match &self.code {
            HookCode::Script { script, .. } => script.digest(),
            HookCode::Webhook(endpoint) => endpoint.digest(),
        }
    }

    pub(crate) fn origin(&self) -> HookOrigin {
        match &self.code {
            HookCode::Script { script, .. } => HookOrigin::Script(script.origin().clone()),
            HookCode::Webhook(endpoint) => HookOrigin::Webhook {
                url: endpoint.url().to_string(),
            },
        }
    }
}

/// Where a hook's answer comes from, as errors and the controller's status name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookOrigin {
    Script(ScriptOrigin),
    Webhook { url: String },
}

impl fmt::Display for HookOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookOrigin::Script(origin) => origin.fmt(f),
            HookOrigin::Webhook { url } => write!(f, "webhook {url}"),
        }
    }
}

/// Every hook failure, each naming the controller and hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Source(Box<SourceError>),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Webhook(Box<WebhookError>),
    #[error(transparent)]
    Response(Box<RejectedResponse>),
    #[error("{controller} has no {hook} hook")]
    Missing { controller: String, hook: HookKind },
    /// The hook read (`get`, `list`) what the controller's ServiceAccount may not: the call
    /// fails, even when the script caught its helper's error.
    #[error("{controller}: hook {hook}: {refusal}")]
    Refused {
        controller: String,
        hook: HookKind,
        refusal: crate::reads::Refusal,
    },
}

impl From<SourceError> for HookError {
    fn from(error: SourceError) -> Self {
        HookError::Source(Box::new(error))
    }
}

impl HookError {
    /// The start of what a failed webhook answered, which the message leaves out: the operator
    /// logs it and never writes it to an Event or a status (see [`WebhookFailure`]).
    pub(crate) fn body_excerpt(&self) -> Option<&str> {
        match self {
            HookError::Webhook(error) => match &error.failure {
                WebhookFailure::Status { excerpt, .. } if !excerpt.is_empty() => Some(excerpt),
                _ => None,
            },
            HookError::Response(rejected) => rejected.source.excerpt.as_deref(),
            _ => None,
        }
    }

    /// The message and, when a webhook answered something, the start of it: what the faces an
    /// author runs on their own machine print (`test`, `render`, `diff`).
    pub(crate) fn with_body(&self) -> String {
        match self.body_excerpt() {
            Some(body) => format!("{self}\nthe webhook answered: {body}"),
            None => self.to_string(),
        }
    }
}

/// A webhook call that brought back no response: the webhook's counterpart of a script error.
#[derive(Debug, thiserror::Error)]
#[error("hook {hook} of {controller} (webhook {url}): {failure}")]
pub struct WebhookError {
    pub controller: String,
    pub hook: HookKind,
    pub url: String,
    #[source]
    pub failure: WebhookFailure,
}

/// A hook response that failed validation, with where it came from.
#[derive(Debug, thiserror::Error)]
#[error("hook {hook} of {controller} ({origin}) returned an {source}")]
pub struct RejectedResponse {
    pub controller: String,
    pub hook: HookKind,
    pub origin: HookOrigin,
    #[source]
    pub source: InvalidResponse,
}

/// The compiled hooks of one controller.
#[derive(Clone, Debug)]
pub struct ControllerHooks {
    pub controller: String,
    hooks: BTreeMap<HookKind, LoadedHook>,
}

impl ControllerHooks {
    /// Resolves every hook of a controller's spec, as [`ControllerHooks::load`].
    pub(crate) fn load_spec(
        engine: &ScriptEngine,
        controller: &str,
        spec: &ControllerSpec,
        config_maps: &dyn ConfigMapLookup,
    ) -> Result<ControllerHooks, HookError> {
        ControllerHooks::load(
            engine,
            controller,
            spec.named_hooks(),
            &spec.libraries,
            &spec.endpoint_configs,
            config_maps,
        )
    }

    /// Resolves every hook (compiling scripts, each with the controller's libraries of its
    /// language; checking webhooks and reading their credentials, with `endpoints` for those
    /// that give none of their own); the first failure is returned.
    pub(crate) fn load<'a>(
        engine: &ScriptEngine,
        controller: &str,
        hooks: impl IntoIterator<Item = (HookKind, &'a Hook)>,
        libraries: &[Library],
        endpoints: &[EndpointConfig],
        config_maps: &dyn ConfigMapLookup,
    ) -> Result<ControllerHooks, HookError> {
        let hooks: Vec<(HookKind, &Hook)> = hooks.into_iter().collect();
        let libraries = read_libraries(controller, &hooks, libraries, config_maps)?;
        let mut loaded = BTreeMap::new();
        for (kind, hook) in hooks {
            let code = match (&hook.script, &hook.webhook) {
                (Some(script), None) => {
                    let part = ScriptPart::Hook(kind);
                    let source = script_source(controller, &part, script.into(), config_maps)?;
                    let own: Vec<LibrarySource> = libraries
                        .iter()
                        .filter(|library| library.language == source.language)
                        .map(|library| library.library.clone())
                        .collect();
                    let limits = script.limits.clone().unwrap_or_default();
                    engine
                        .admits(&limits)
                        .map_err(|above| SourceError::AboveCeiling {
                            controller: controller.to_string(),
                            hook: kind,
                            above,
                        })?;
                    HookCode::Script {
                        script: engine.compile(&source.with_libraries(own))?,
                        limits,
                    }
                }
                (None, Some(webhook)) => HookCode::Webhook(Arc::new(WebhookEndpoint::new(
                    controller,
                    kind,
                    webhook,
                    hook.version.unwrap_or_default(),
                    endpoints,
                    config_maps,
                )?)),
                (None, None) => {
                    return Err(SourceError::Empty {
                        controller: controller.to_string(),
                        hook: kind,
                    }
                    .into());
                }
                (Some(_), Some(_)) => {
                    return Err(SourceError::Both {
                        controller: controller.to_string(),
                        hook: kind,
                    }
                    .into());
                }
            };
            let version = hook.version.unwrap_or_default();
            loaded.insert(
                kind,
                LoadedHook {
                    kind,
                    code,
                    version,
                },
            );
        }
        Ok(ControllerHooks {
            controller: controller.to_string(),
            hooks: loaded,
        })
    }

    /// A controller with exactly one hook, from an already compiled script (the test harness
    /// runs script files this way).
    pub(crate) fn single(controller: &str, hook: LoadedHook) -> ControllerHooks {
        ControllerHooks {
            controller: controller.to_string(),
            hooks: BTreeMap::from([(hook.kind, hook)]),
        }
    }

    pub(crate) fn get(&self, kind: HookKind) -> Option<&LoadedHook> {
        self.hooks.get(&kind)
    }

    /// What runs a hook: `rhai`, `lua` or `webhook` (`none` for a hook that is not loaded).
    pub(crate) fn language_of(&self, kind: HookKind) -> &'static str {
        match self.get(kind).map(|hook| &hook.code) {
            Some(HookCode::Script { script, .. }) => script.language().as_str(),
            Some(HookCode::Webhook(_)) => "webhook",
            None => "none",
        }
    }

    /// The request shape a hook gets (`v1` for a hook that is not loaded).
    pub(crate) fn version(&self, kind: HookKind) -> HookVersion {
        self.get(kind).map_or(HookVersion::V1, |hook| hook.version)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &LoadedHook> {
        self.hooks.values()
    }

    fn loaded(&self, kind: HookKind) -> Result<&LoadedHook, HookError> {
        self.get(kind).ok_or_else(|| HookError::Missing {
            controller: self.controller.clone(),
            hook: kind,
        })
    }

    /// Runs a hook on this thread, for the faces an author runs on their own machine
    /// (`metascript test`, `validate`): a script in the engine, a webhook through
    /// [`WebhookClient::unrestricted`].
    pub(crate) fn call(
        &self,
        engine: &ScriptEngine,
        kind: HookKind,
        request: &Value,
        scope: &CallScope,
    ) -> Result<Value, HookError> {
        self.call_through(
            engine,
            WebhookClient::unrestricted(),
            kind,
            request.into(),
            scope,
        )
        .0
    }

    /// Runs a hook on this thread (the operator's blocking pool, or a face an author runs): a
    /// script in the engine, a webhook through `webhooks`. A script's call comes with what it
    /// cost (`None`: a webhook's).
    pub(crate) fn call_through(
        &self,
        engine: &ScriptEngine,
        webhooks: &WebhookClient,
        kind: HookKind,
        request: HookRequest,
        scope: &CallScope,
    ) -> (Result<Value, HookError>, Option<CallCost>) {
        let hook = match self.loaded(kind) {
            Ok(hook) => hook,
            // No call was made: nothing spent, and no webhook called either.
            Err(error) => return (Err(error), Some(CallCost::default())),
        };
        match &hook.code {
            HookCode::Script { script, limits } => {
                let context = CallContext {
                    controller: self.controller.clone(),
                    hook: kind,
                    limits: limits.clone(),
                    scope: scope.clone(),
                };
                let (result, cost) = engine.call_measured(script, request, &context);
                let result = result.map_err(HookError::from).and_then(|response| {
                    check_script_response(kind, &response, script.empty_response_hint())
                        .and_then(|()| check_response_size(kind, &response, engine.max_children()))
                        .map_err(|error| self.invalid_response(kind, error))?;
                    Ok(response)
                });
                (result, Some(cost))
            }
            HookCode::Webhook(endpoint) => {
                let max_children = engine.max_children();
                let result =
                    self.call_webhook(endpoint, webhooks, kind, request, scope, max_children);
                (result, None)
            }
        }
    }

    /// Calls a webhook hook. It is opaque: its answer may depend on anything it can see.
    fn call_webhook(
        &self,
        endpoint: &WebhookEndpoint,
        webhooks: &WebhookClient,
        kind: HookKind,
        request: HookRequest,
        scope: &CallScope,
        max_children: usize,
    ) -> Result<Value, HookError> {
        scope.purity.taint("webhook");
        // Its errors may quote what it was sent (the engine notes a script's request).
        request.note_secrets(&scope.secrets);
        let response = endpoint
            .call(webhooks, kind, request)
            .map_err(|failure| match failure {
                CallFailure::Failed(failure) => HookError::Webhook(Box::new(WebhookError {
                    controller: self.controller.clone(),
                    hook: kind,
                    url: endpoint.url().to_string(),
                    failure,
                })),
                CallFailure::Invalid(error) => self.invalid_response(kind, error),
            })?;
        check_response_size(kind, &response, max_children)
            .map_err(|error| self.invalid_response(kind, error))?;
        Ok(response)
    }

    /// Attaches the controller, hook and origin to a response validation failure.
    pub(crate) fn invalid_response(&self, kind: HookKind, error: InvalidResponse) -> HookError {
        HookError::Response(Box::new(RejectedResponse {
            controller: self.controller.clone(),
            hook: kind,
            origin: self.get(kind).map(LoadedHook::origin).unwrap_or_else(|| {
                HookOrigin::Script(ScriptOrigin::Inline {
                    controller: self.controller.clone(),
                    hook: kind,
                })
            }),
            source: error,
        }))
    }
}

/// The libraries no script hook of the controller can load, being in another language, with
/// why: most likely a mistake, but harmless (`metascript validate` and admission warn).
pub(crate) fn unused_libraries(
    controller: &str,
    hooks: &[(HookKind, &Hook)],
    libraries: &[Library],
) -> Vec<(usize, String)> {
    let hook_languages = script_languages(controller, hooks);
    libraries
        .iter()
        .enumerate()
        .filter_map(|(index, library)| {
            let part = ScriptPart::Library(library.name.clone());
            let language = script_language(controller, &part, &library.into()).ok()?;
            (!hook_languages.contains(&language)).then(|| {
                (
                    index,
                    format!(
                        "library {} is written in {language}, but no hook of the controller is \
                         a {language} script: no hook loads it",
                        library.name
                    ),
                )
            })
        })
        .collect()
}

struct ReadLibrary {
    language: Language,
    library: LibrarySource,
}

/// The languages of a controller's script hooks, as their specs say (`None`: unknown yet; the
/// hook's own load reports why).
fn script_languages(controller: &str, hooks: &[(HookKind, &Hook)]) -> BTreeSet<Language> {
    hooks
        .iter()
        .filter_map(|(kind, hook)| {
            let script = hook.script.as_ref()?;
            script_language(controller, &ScriptPart::Hook(*kind), &script.into()).ok()
        })
        .collect()
}

/// Reads the libraries some script hook of `hooks` loads, checking every library's name
/// (unique, usable as a Lua global) and language. A library in another language is not read:
/// a missing ConfigMap of a library nothing loads must not stop the hooks.
fn read_libraries(
    controller: &str,
    hooks: &[(HookKind, &Hook)],
    libraries: &[Library],
    config_maps: &dyn ConfigMapLookup,
) -> Result<Vec<ReadLibrary>, SourceError> {
    check_library_names(libraries.iter().map(|l| l.name.as_str())).map_err(
        |(library, reason)| SourceError::Library {
            controller: controller.to_string(),
            library,
            reason,
        },
    )?;
    let languages = script_languages(controller, hooks);
    let mut read = Vec::with_capacity(libraries.len());
    for library in libraries {
        let name = &library.name;
        let part = ScriptPart::Library(name.clone());
        if !languages.contains(&script_language(controller, &part, &library.into())?) {
            continue;
        }
        let source = script_source(controller, &part, library.into(), config_maps)?;
        read.push(ReadLibrary {
            language: source.language,
            library: LibrarySource {
                name: name.clone(),
                code: source.code,
                origin: source.origin,
            },
        });
    }
    Ok(read)
}

#[cfg(test)]
pub(crate) mod tests;
