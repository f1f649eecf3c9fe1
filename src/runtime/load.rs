//! Preparing a controller object to run, whatever its kind: resolving and watching its types,
//! and compiling its hooks, keeping the last good version when a new one fails.

use super::context::Context;
use super::credentials::{CredentialValues, WithCredentials};
use super::scripts::CachedConfigMaps;
use super::status::{Health, Problem};
use crate::api::{ControllerSpec, ResourceRef, ScriptStatus};
use crate::hooks::{ConfigMapLookup, ControllerHooks, HookError, ScriptsDir};
use crate::reads::{ReadScope, ReadVerb};
use crate::reasons;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a controller's scripts come from: a change there reloads the controller, even one
/// that has not loaded yet.
#[derive(Clone, Debug, Default)]
pub struct ScriptSources {
    /// ConfigMaps (namespace, name) named by `configMapRef`.
    pub config_maps: Vec<(String, String)>,
    /// ConfigMap keys a dev-loop file of the same name replaces.
    pub script_keys: Vec<String>,
}

impl ScriptSources {
    pub fn of(spec: &ControllerSpec) -> ScriptSources {
        ScriptSources {
            config_maps: spec.config_maps(),
            script_keys: spec.config_map_refs().map(|r| r.key.clone()).collect(),
        }
    }
}

/// A controller's hooks, compiled.
pub struct Prepared {
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// True when the newest scripts failed and the previous version keeps running.
    pub stale: bool,
}

/// Resolves and watches every type a controller names, then compiles its hooks, with the
/// webhook `credentials` its account read; scripts come from `pinned` when given (a revision's
/// snapshot), else from the ConfigMaps (or the dev loop's files). When the new hooks do not
/// load but `previous` hooks exist, those keep running and are marked stale.
pub async fn prepare(
    context: &Context,
    name: &str,
    spec: &ControllerSpec,
    previous: Option<Arc<ControllerHooks>>,
    credentials: &CredentialValues,
    pinned: Option<&(dyn ConfigMapLookup + Sync)>,
) -> Result<Prepared, Health> {
    let fail = |reason: &str, message: String| {
        Health::failed(spec.generation, Problem::new(reason, message))
    };
    let mut types = spec.types.clone();
    if !ScriptSources::of(spec).config_maps.is_empty() {
        types.push(ResourceRef {
            api_version: context.config_map_type.api_version.clone(),
            resource: context.config_map_type.plural.clone(),
        });
    }
    for reference in &types {
        let resolved = context
            .discovery
            .resolve(reference)
            .await
            .map_err(|error| fail(reasons::RESOLVE_FAILED, error.to_string()))?;
        context
            .informers
            .ensure(&resolved)
            .await
            .map_err(|error| fail(reasons::WATCH_FAILED, error.to_string()))?;
    }
    if let Some(account) = &spec.service_account {
        for reference in &spec.reads {
            // Resolved and watched above.
            let resolved = context
                .discovery
                .resolve(reference)
                .await
                .map_err(|error| fail(reasons::RESOLVE_FAILED, error.to_string()))?;
            let scope = ReadScope::new(ReadVerb::List, &resolved.resource, None);
            match context.access.allowed(account, &scope).await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(fail(
                        reasons::READ_FORBIDDEN,
                        format!(
                            "spec.reads names {}, but the controller's ServiceAccount {} may not \
                             list it cluster-wide; hooks read only what the account may read",
                            resolved.resource.group_key(),
                            account.username()
                        ),
                    ));
                }
                Err(error) => return Err(fail(reasons::READ_CHECK_FAILED, error.to_string())),
            }
        }
    }
    let cached = CachedConfigMaps {
        informers: &context.informers,
        config_maps: &context.config_map_type,
    };
    let local;
    let lookup: &dyn ConfigMapLookup = match (pinned, &context.config.scripts_dir) {
        (Some(pinned), _) => pinned,
        (None, Some(dir)) => {
            local = ScriptsDir {
                dir: dir.clone(),
                fallback: &cached,
            };
            &local
        }
        (None, None) => &cached,
    };
    let lookup = WithCredentials {
        credentials,
        fallback: lookup,
    };
    let loaded = ControllerHooks::load_spec(&context.engine, name, spec, &lookup);
    if let (Err(error), Some(_)) = (&loaded, &previous) {
        tracing::warn!(controller = name, %error, "script failed to load; the previous version keeps running");
    }
    let Running {
        hooks,
        loaded: scripts_loaded,
        stale,
    } = keep_last_good(loaded, previous)
        .map_err(|problem| Health::failed(spec.generation, problem))?;
    let scripts = hooks
        .iter()
        .map(|hook| {
            (
                hook.kind.to_string(),
                ScriptStatus {
                    digest: hook.digest().to_string(),
                    source: hook.origin().to_string(),
                    stale,
                },
            )
        })
        .collect();
    Ok(Prepared {
        hooks,
        health: Health {
            generation: spec.generation,
            ready: scripts_loaded.clone(),
            scripts_loaded,
            scripts,
        },
        stale,
    })
}

/// The hooks a controller runs after a load.
struct Running {
    hooks: Arc<ControllerHooks>,
    /// Whether the newest scripts loaded, and why not.
    loaded: Result<(), Problem>,
    /// The hooks are the previous version's: the newest did not load.
    stale: bool,
}

/// The new hooks when they loaded, else the previous version's, marked stale; `Err` when there
/// is no previous version: the controller cannot run.
fn keep_last_good(
    loaded: Result<ControllerHooks, HookError>,
    previous: Option<Arc<ControllerHooks>>,
) -> Result<Running, Problem> {
    match (loaded, previous) {
        (Ok(hooks), _) => Ok(Running {
            hooks: Arc::new(hooks),
            loaded: Ok(()),
            stale: false,
        }),
        (Err(error), Some(previous)) => Ok(Running {
            hooks: previous,
            loaded: Err(Problem::new(reasons::SCRIPT_ERROR, error)),
            stale: true,
        }),
        (Err(error), None) => Err(Problem::new(reasons::SCRIPT_ERROR, error)),
    }
}

/// The digests of the hooks running, to tell whether a reload changed anything.
pub fn digests(hooks: &ControllerHooks) -> BTreeMap<String, String> {
    hooks
        .iter()
        .map(|hook| (hook.kind.to_string(), hook.digest().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::LoadedHook;
    use crate::kinds::decorator::SYNC;
    use crate::script::{ScriptEngine, ScriptOrigin, ScriptSource};

    fn hooks(code: &str) -> ControllerHooks {
        let engine = ScriptEngine::new();
        let origin = ScriptOrigin::Inline {
            controller: "c".into(),
            hook: SYNC,
        };
        let script = engine
            .compile(&ScriptSource::new(crate::api::Language::Rhai, code, origin))
            .expect("compiles");
        ControllerHooks::single("c", LoadedHook::script(SYNC, script, Default::default()))
    }

    fn broken() -> HookError {
        HookError::Missing {
            controller: "c".into(),
            hook: SYNC,
        }
    }

    #[test]
    fn new_hooks_replace_the_old_ones_when_they_load() {
        let previous = Arc::new(hooks("#{}"));
        let running =
            keep_last_good(Ok(hooks("#{ labels: #{} }")), Some(previous.clone())).unwrap();
        assert!(!Arc::ptr_eq(&running.hooks, &previous));
        assert_eq!(running.loaded, Ok(()));
        assert!(!running.stale);
    }

    #[test]
    fn a_failed_load_keeps_the_last_good_version_running_and_says_why() {
        let previous = Arc::new(hooks("#{}"));
        let running = keep_last_good(Err(broken()), Some(previous.clone())).unwrap();
        assert!(
            Arc::ptr_eq(&running.hooks, &previous),
            "the previous hooks keep running"
        );
        assert!(running.stale);
        let problem = running.loaded.unwrap_err();
        assert_eq!(problem.reason, reasons::SCRIPT_ERROR);
        assert!(
            problem.message.contains("has no sync hook"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn a_failed_first_load_runs_nothing() {
        let problem = keep_last_good(Err(broken()), None).map(|_| ()).unwrap_err();
        assert_eq!(problem.reason, reasons::SCRIPT_ERROR);
    }
}
