//! Hooks as runnable scripts: resolve each hook's source, compile it (through the engine's
//! cache), and call it. The operator, `render` and `metascript test` all go through here, so
//! they run the same engine with the same limits.

mod source;

pub use source::{
    ConfigMapLookup, NoConfigMaps, ScriptsDir, SourceError, config_map_data, script_source,
};

use crate::api::{Hook, HookKind, Limits};
use crate::controllers::InvalidResponse;
use crate::script::{
    CallContext, CompiledScript, LogSink, ScriptEngine, ScriptError, ScriptOrigin,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One compiled hook with its limits.
#[derive(Clone, Debug)]
pub struct LoadedHook {
    pub kind: HookKind,
    pub script: Arc<CompiledScript>,
    pub limits: Limits,
}

/// Every hook failure, each naming the controller and hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Script(#[from] ScriptError),
    #[error(transparent)]
    Response(Box<RejectedResponse>),
    #[error("{controller} has no {hook} hook")]
    Missing { controller: String, hook: HookKind },
}

/// A hook response that failed validation, with where it came from.
#[derive(Debug, thiserror::Error)]
#[error("hook {hook} of {controller} ({origin}) returned an {source}")]
pub struct RejectedResponse {
    pub controller: String,
    pub hook: HookKind,
    pub origin: ScriptOrigin,
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
    /// Resolves and compiles every hook; the first failure is returned.
    pub fn load<'a>(
        engine: &ScriptEngine,
        controller: &str,
        hooks: impl IntoIterator<Item = (HookKind, &'a Hook)>,
        config_maps: &dyn ConfigMapLookup,
    ) -> Result<ControllerHooks, HookError> {
        let mut loaded = BTreeMap::new();
        for (kind, hook) in hooks {
            let source = script_source(controller, kind, hook, config_maps)?;
            let script = engine.compile(&source)?;
            let limits = hook
                .script
                .as_ref()
                .and_then(|script| script.limits.clone())
                .unwrap_or_default();
            loaded.insert(
                kind,
                LoadedHook {
                    kind,
                    script,
                    limits,
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
    pub fn single(controller: &str, hook: LoadedHook) -> ControllerHooks {
        ControllerHooks {
            controller: controller.to_string(),
            hooks: BTreeMap::from([(hook.kind, hook)]),
        }
    }

    pub fn get(&self, kind: HookKind) -> Option<&LoadedHook> {
        self.hooks.get(&kind)
    }

    pub fn iter(&self) -> impl Iterator<Item = &LoadedHook> {
        self.hooks.values()
    }

    fn context(
        &self,
        hook: &LoadedHook,
        clock: Option<jiff::Timestamp>,
        logs: Option<LogSink>,
    ) -> CallContext {
        let mut context =
            CallContext::new(self.controller.clone(), hook.kind).with_limits(hook.limits.clone());
        context.clock = clock;
        context.logs = logs;
        context
    }

    fn loaded(&self, kind: HookKind) -> Result<&LoadedHook, HookError> {
        self.get(kind).ok_or_else(|| HookError::Missing {
            controller: self.controller.clone(),
            hook: kind,
        })
    }

    /// Runs a hook on this thread (`render`, tests, and the operator's blocking pool).
    pub fn call(
        &self,
        engine: &ScriptEngine,
        kind: HookKind,
        request: &Value,
        clock: Option<jiff::Timestamp>,
        logs: Option<LogSink>,
    ) -> Result<Value, HookError> {
        let hook = self.loaded(kind)?;
        Ok(engine.call(&hook.script, request, &self.context(hook, clock, logs))?)
    }

    /// Attaches the controller, hook and script origin to a response validation failure.
    pub fn invalid_response(&self, kind: HookKind, error: InvalidResponse) -> HookError {
        HookError::Response(Box::new(RejectedResponse {
            controller: self.controller.clone(),
            hook: kind,
            origin: self
                .get(kind)
                .map(|hook| hook.script.origin().clone())
                .unwrap_or(ScriptOrigin::Inline {
                    controller: self.controller.clone(),
                    hook: kind,
                }),
            source: error,
        }))
    }
}
