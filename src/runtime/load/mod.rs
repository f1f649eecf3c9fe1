//! Preparing a controller object to run, whatever its kind: resolving and watching its types,
//! and compiling its hooks, keeping the last good version when a new one fails.

pub(crate) mod credentials;
pub(crate) mod egress;
pub(crate) mod scripts;

use self::credentials::{CredentialValues, WithCredentials};
use self::scripts::CachedConfigMaps;
use crate::api::{ControllerSpec, KindName, ResourceRef, ScriptStatus, ServiceAccountRef};
use crate::cases::Subject;
use crate::cases::inline::{self, Outcome};
use crate::hooks::{ConfigMapLookup, ControllerHooks, HookError, ScriptsDir};
use crate::plan::Planner;
use crate::reads::{ReadScope, ReadVerb};
use crate::reasons;
use crate::runtime::context::Context;
use crate::runtime::keys::ControllerId;
use crate::runtime::report::problem::Problem;
use crate::runtime::report::status::Health;
use crate::runtime::watch::cache::{CacheError, WatchLease};
use crate::runtime::watch::share::Sharer;
use crate::script::EffectiveLimits;
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
    pub(crate) fn of(spec: &ControllerSpec) -> ScriptSources {
        ScriptSources {
            config_maps: spec.config_maps(),
            script_keys: spec.config_map_refs().map(|r| r.key.clone()).collect(),
        }
    }
}

/// A controller's hooks, compiled.
pub(crate) struct Prepared {
    pub hooks: Arc<ControllerHooks>,
    pub health: Health,
    /// True when the newest scripts failed and the previous version keeps running.
    pub stale: bool,
    /// The label-selected watches of the types the spec scopes (`ControllerSpec::label_scoped`);
    /// none when the previous version keeps running (it keeps its own).
    pub watches: Vec<WatchLease>,
}

/// Resolves and watches every type a controller names, then compiles its hooks, with the
/// webhook `credentials` its account read; scripts come from `pinned` when given (a revision's
/// snapshot), else from the ConfigMaps (or the dev loop's files). When the new hooks do not
/// load but `previous` hooks exist, those keep running and are marked stale.
pub(crate) async fn prepare(
    context: &Context,
    id: &ControllerId,
    spec: &ControllerSpec,
    previous: Option<Arc<ControllerHooks>>,
    credentials: &CredentialValues,
    pinned: Option<&(dyn ConfigMapLookup + Sync)>,
) -> Result<Prepared, Health> {
    let name = id.name.as_str();
    let fail = |reason: &'static str, message: String| {
        Health::failed(spec.generation, Problem::new(reason, message))
    };
    let mut resolved = Vec::with_capacity(spec.types.len() + 1);
    for reference in &spec.types {
        resolved.push(
            context
                .discovery
                .resolve(reference)
                .await
                .map_err(|error| fail(reasons::RESOLVE_FAILED, error.to_string()))?,
        );
    }
    // Checked before anything is watched: a type starts being watched only once an account
    // that uses it was found allowed to list it, and scripts are read as the account.
    if let Ok(Some(account)) = &spec.service_account {
        may_read(context, account, spec, &resolved)
            .await
            .map_err(|problem| Health::failed(spec.generation, problem))?;
    }
    if !ScriptSources::of(spec).config_maps.is_empty() {
        resolved.push(
            context
                .discovery
                .resolve(&ResourceRef {
                    api_version: context.config_map_type.api_version.clone(),
                    resource: context.config_map_type.plural.clone(),
                })
                .await
                .map_err(|error| fail(reasons::RESOLVE_FAILED, error.to_string()))?,
        );
    }
    let mut watches = Vec::new();
    for (index, resolved) in resolved.iter().enumerate() {
        // The ConfigMap type added last names no type of the spec: it is watched and kept
        // whole.
        let reference = spec.types.get(index);
        let selectors: Vec<&str> = reference
            .map(|reference| {
                spec.label_scoped
                    .iter()
                    .filter(|(scoped, _)| scoped == reference)
                    .map(|(_, selector)| selector.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let share = reference.and_then(|reference| {
            let (_, selections) = spec.shard_scoped.iter().find(|(r, _)| r == reference)?;
            Some(Sharer {
                controller: id.clone(),
                selections: selections.clone(),
            })
        });
        let failed = |error: CacheError| fail(reasons::WATCH_FAILED, error.to_string());
        match (share, selectors.as_slice()) {
            (None, []) => context.informers.ensure(resolved).await.map_err(failed)?,
            (None, selectors) => {
                for selector in selectors {
                    let lease = context.informers.select(resolved, selector).await;
                    watches.push(lease.map_err(failed)?);
                }
            }
            (Some(share), []) => {
                let lease = context.informers.share(resolved, None, share).await;
                watches.push(lease.map_err(failed)?);
            }
            (Some(share), selectors) => {
                for selector in selectors {
                    let lease = context
                        .informers
                        .share(resolved, Some(selector), share.clone())
                        .await;
                    watches.push(lease.map_err(failed)?);
                }
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
    let running = keep_last_good(loaded, previous)
        .map_err(|problem| Health::failed(spec.generation, problem))?;
    let watches = if running.stale { Vec::new() } else { watches };
    Ok(Prepared {
        watches,
        ..Prepared::from_running(spec.generation, running)
    })
}

impl Prepared {
    fn from_running(generation: Option<i64>, running: Running) -> Prepared {
        let Running {
            hooks,
            loaded: scripts_loaded,
            stale,
        } = running;
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
        Prepared {
            hooks,
            health: Health {
                generation,
                ready: scripts_loaded.clone(),
                scripts_loaded,
                scripts,
            },
            stale,
            watches: Vec::new(),
        }
    }

    /// The previous version's hooks kept running, marked stale, because the newest failed
    /// after they compiled (their `spec.tests`).
    pub(crate) fn kept(
        generation: Option<i64>,
        previous: Arc<ControllerHooks>,
        problem: Problem,
    ) -> Prepared {
        Prepared::from_running(
            generation,
            Running {
                hooks: previous,
                loaded: Err(problem),
                stale: true,
            },
        )
    }
}

/// The most one revision's `spec.tests` may take in the operator: a case not started by then
/// fails (it was not checked), so the revision does not serve.
pub(crate) const GATE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The most one `spec.tests` call may use in the operator, whatever its hook's `limits` ask:
/// room for a heavy production hook, but not for a case that would hold a blocking thread and
/// the script pool for minutes.
pub(crate) const GATE_CEILING: EffectiveLimits = EffectiveLimits {
    max_operations: 100_000_000,
    timeout_millis: 5_000,
    max_memory_bytes: 256 * 1024 * 1024,
    max_string_size: crate::script::DEFAULT_MAX_STRING_SIZE,
    max_array_size: crate::script::DEFAULT_MAX_ARRAY_SIZE,
    max_map_size: crate::script::DEFAULT_MAX_MAP_SIZE,
};

/// Runs a new version's `spec.tests` against the hooks and planner it would serve with, on
/// the blocking pool (they run scripts, with the hooks' own limits under [`GATE_CEILING`],
/// within [`GATE_DEADLINE`]): `Err` names every case that failed. Cases of webhook hooks are
/// not run, as at admission.
pub(crate) async fn run_spec_tests(
    context: &Context,
    kind: KindName,
    name: &str,
    spec: &ControllerSpec,
    hooks: Arc<ControllerHooks>,
    planner: Arc<dyn Planner>,
) -> Result<(), Problem> {
    // What the cases write is checked against the schemas of the controller's types: follow
    // their CRDs first, or the gate would check only the types written since the operator
    // started.
    let types: Vec<_> = spec
        .types
        .iter()
        .filter_map(|reference| context.discovery.cached(reference))
        .map(|resolved| resolved.resource)
        .collect();
    context
        .schemas
        .follow(&types, crate::runtime::watch::schemas::FIRST_READ)
        .await;
    let engine = context.engine.clone().with_ceiling(GATE_CEILING);
    let spec = spec.clone();
    let total = spec.tests.len();
    let deadline = std::time::Instant::now() + GATE_DEADLINE;
    let mut subject = Subject::controller(name, kind, hooks, planner, context.schemas.shared());
    let failed = tokio::task::spawn_blocking(move || {
        inline::run_all(&engine, kind, &spec, &mut subject, Some(deadline))
            .into_iter()
            .filter_map(|(index, test, outcome)| match outcome {
                Outcome::Passed | Outcome::NotRun(_) => None,
                Outcome::Failed(why, _) | Outcome::Invalid(why) => {
                    Some(format!("spec.tests[{index}] ({test}): {why}"))
                }
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|error| {
        Problem::new(
            reasons::TESTS_FAILED,
            format!("spec.tests did not run: {error}"),
        )
    })?;
    if failed.is_empty() {
        return Ok(());
    }
    Err(Problem::new(
        reasons::TESTS_FAILED,
        format!(
            "{} of {} spec.tests failed, so this revision does not serve: {}",
            failed.len(),
            total,
            failed.join("; ")
        ),
    ))
}

/// What a controller with an account must be allowed before it loads: to `get` the
/// ConfigMaps its scripts and libraries come from (they are read as the account, not with the
/// operator's rights), to `list` every type of `spec.reads` cluster-wide, and to `list` every
/// other type it names in its own namespace or cluster-wide (a type is watched only once an
/// account that uses it may list it).
async fn may_read(
    context: &Context,
    account: &ServiceAccountRef,
    spec: &ControllerSpec,
    types: &[crate::runtime::watch::discovery::ResolvedType],
) -> Result<(), Problem> {
    let config_maps = &context.config_map_type;
    for reference in spec.config_map_refs() {
        let scope = ReadScope::new(ReadVerb::Get, config_maps, Some(&reference.namespace));
        context
            .access
            .check(account, &scope)
            .await
            .map_err(|refusal| {
                Problem::new(
                    refusal.reason(),
                    format!(
                        "scripts are read as the controller's account, and ConfigMap {}/{} is not \
                     its to read: {refusal}",
                        reference.namespace, reference.name
                    ),
                )
                .refusing(None)
            })?;
    }
    for resolved in types {
        let resource = &resolved.resource;
        let declared_read = spec.reads.iter().any(|read| {
            read.api_version == resource.api_version && read.resource == resource.plural
        });
        may_watch(context, account, resource, declared_read).await?;
    }
    Ok(())
}

/// Whether a type may be watched for a controller running as `account`: the account may list
/// it cluster-wide, or (a namespaced type the hooks do not `list` through `spec.reads`) in its
/// own namespace. `Err` says which and what to grant.
pub(crate) async fn may_watch(
    context: &Context,
    account: &ServiceAccountRef,
    resource: &crate::resources::ResourceType,
    declared_read: bool,
) -> Result<(), Problem> {
    let everywhere = ReadScope::new(ReadVerb::List, resource, None);
    let allowed = match context.access.allowed(account, &everywhere).await {
        Ok(true) => true,
        Ok(false) if resource.namespaced && !declared_read => {
            let own = ReadScope::new(ReadVerb::List, resource, Some(&account.namespace));
            context
                .access
                .allowed(account, &own)
                .await
                .map_err(|error| Problem::new(reasons::READ_CHECK_FAILED, error).refusing(None))?
        }
        Ok(false) => false,
        Err(error) => {
            return Err(Problem::new(reasons::READ_CHECK_FAILED, error).refusing(None));
        }
    };
    if allowed {
        return Ok(());
    }
    let message = if declared_read {
        format!(
            "spec.reads names {}, but the controller's ServiceAccount {} may not list it \
             cluster-wide; hooks read only what the account may read",
            resource.group_key(),
            account.username()
        )
    } else {
        format!(
            "the controller acts on {}, but its ServiceAccount {} may list it neither in its \
             own namespace nor cluster-wide; the operator watches a type only for a controller \
             whose account may list it",
            resource.group_key(),
            account.username()
        )
    };
    Err(Problem::new(reasons::READ_FORBIDDEN, message).refusing(None))
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
pub(crate) fn digests(hooks: &ControllerHooks) -> BTreeMap<String, String> {
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
