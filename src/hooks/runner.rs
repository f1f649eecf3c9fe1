//! What a sync calls its hooks through: the engine, the controller's hooks, the scope every call
//! of the sync shares, and an observer told of each call (metrics, recorded fixtures, `explain`).

use super::{ControllerHooks, HookError, WebhookClient};
use crate::api::HookKind;
use crate::script::{CallCost, CallScope, HookRequest, ScriptEngine};
use serde_json::Value;

/// One hook call as an observer sees it.
pub struct HookCall<'a> {
    pub hook: HookKind,
    /// Wall-clock time of the call: for a webhook, its latency.
    pub took: std::time::Duration,
    /// What a script's call cost (`None`: a webhook).
    pub cost: Option<CallCost>,
    pub request: HookRequest<'a>,
    pub response: Result<&'a Value, &'a HookError>,
}

/// Told of every hook call (metrics, recorded fixtures, `explain`).
pub(crate) type HookObserver<'a> = &'a (dyn Fn(&HookCall) + Sync);

/// What every hook call of a sync shares.
pub struct HookRunner<'a> {
    pub engine: &'a ScriptEngine,
    pub hooks: &'a ControllerHooks,
    /// How webhook hooks are called: the operator's client keeps to `--webhook-allow`.
    pub webhooks: &'a WebhookClient,
    pub observer: Option<HookObserver<'a>>,
    /// Shared by every hook call of the sync: what `get` and `list` read (recording what they
    /// read), and the Events the hooks ask for.
    pub scope: &'a CallScope,
}

impl HookRunner<'_> {
    pub(crate) fn call<'a>(
        &self,
        kind: HookKind,
        request: impl Into<HookRequest<'a>>,
    ) -> Result<Value, HookError> {
        let request = request.into();
        let span = crate::telemetry::span!(
            "hook",
            hook = %kind,
            language = self.hooks.language_of(kind),
            operations = tracing::field::Empty,
            peak_memory_bytes = tracing::field::Empty,
            cpu_micros = tracing::field::Empty,
            reads_untraced = tracing::field::Empty,
        );
        let _traced = span.enter();
        if !span.is_none() {
            crate::telemetry::begin_call();
        }
        let started = std::time::Instant::now();
        let (result, cost) =
            self.hooks
                .call_through(self.engine, self.webhooks, kind, request, self.scope);
        if let Some(cost) = &cost {
            // As i64: OpenTelemetry's integers are signed, and an unsigned field would be sent
            // as its text.
            let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            span.record("operations", signed(cost.operations));
            span.record("peak_memory_bytes", signed(cost.peak_memory));
            let micros = u64::try_from(cost.cpu.as_micros()).unwrap_or(u64::MAX);
            span.record("cpu_micros", signed(micros));
        }
        // A refused read fails the call whatever the script made of its helper's error.
        let refusal = self.scope.reads.as_ref().and_then(|reads| reads.refusal());
        let result = match (result, refusal) {
            (Ok(_), Some(refusal)) | (Err(HookError::Script(_)), Some(refusal)) => {
                Err(HookError::Refused {
                    controller: self.hooks.controller.clone(),
                    hook: kind,
                    refusal,
                })
            }
            (result, _) => result,
        };
        if let Err(error) = &result
            && let Some(body) = error.body_excerpt()
        {
            // Here only: Events and status say what failed, not what the webhook answered.
            tracing::warn!(controller = %self.hooks.controller, hook = %kind, body, "{error}");
        }
        if !span.is_none() {
            let untraced = crate::telemetry::end_call();
            if untraced > 0 {
                span.record("reads_untraced", i64::from(untraced));
            }
            if let Err(error) = &result {
                // What Events and status say: a script's error may quote a secret it read.
                crate::telemetry::fail(&span, &self.scope.secrets.scrub(&error.to_string()));
            }
        }
        if let Some(observe) = self.observer {
            observe(&HookCall {
                hook: kind,
                took: started.elapsed(),
                cost,
                request,
                response: result.as_ref(),
            });
        }
        result
    }
}
