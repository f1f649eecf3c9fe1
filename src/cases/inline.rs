//! A controller's own `spec.tests`: the cases run before a new revision of it serves, by the
//! admission webhook, by `metascript validate`, and by the operator when any of its code
//! changes (a ConfigMap or library edit never passes admission).

use super::{Case, Subject, judge, published};
use crate::api::{ControllerSpec, HookKind, InlineTest, KindName};
use crate::hooks::HookError;
use crate::script::{CallScope, ScriptEngine};
use std::time::Instant;

/// How one case came out.
#[derive(Debug)]
pub(crate) enum Outcome {
    Passed,
    /// Why it failed, and the hook's error when it failed with one (where in the script).
    Failed(String, Option<HookError>),
    /// Not run, and why: its hook is a webhook (never called from here) or has no script at
    /// hand.
    NotRun(String),
    /// It cannot run as written (an unknown hook, a bad clock).
    Invalid(String),
}

/// The hook a case calls: its `hook`, or the kind's first.
pub(crate) fn hook_of(test: &InlineTest, kind: KindName) -> Result<HookKind, String> {
    match &test.hook {
        None => Ok(kind.hooks()[0]),
        Some(name) => kind
            .hook(name)
            .ok_or_else(|| format!("unknown hook {name:?} (a {kind} has {})", kind.hook_names())),
    }
}

/// Runs every case of `spec.tests` against `subject` (the controller's hooks and planner), in
/// order, with the hooks' own limits (within the engine's ceiling). No case starts after
/// `deadline`: each left is `Invalid`, since it was not checked.
pub(crate) fn run_all(
    engine: &ScriptEngine,
    kind: KindName,
    spec: &ControllerSpec,
    subject: &mut Subject,
    deadline: Option<Instant>,
) -> Vec<(usize, String, Outcome)> {
    spec.tests
        .iter()
        .enumerate()
        .map(|(index, test)| {
            let outcome = match hook_of(test, kind) {
                _ if deadline.is_some_and(|deadline| Instant::now() >= deadline) => {
                    Outcome::Invalid(
                        "not run: the time for checking spec.tests ran out (keep the cases few \
                         and fast)"
                            .into(),
                    )
                }
                Err(problem) => Outcome::Invalid(problem),
                // Calling a webhook from here would let anyone who may create a controller make
                // the operator POST a request they wrote to a URL they chose and read the answer
                // in the refusal; `metascript test` calls it from their machine.
                Ok(hook) if is_webhook(spec, hook) => Outcome::NotRun(
                    "its hook is a webhook, which is never called to check a controller (run \
                     the case with `metascript test`)"
                        .into(),
                ),
                Ok(hook) if !spec.hooks.iter().any(|(named, _)| *named == hook) => {
                    Outcome::Invalid(format!("the controller has no {hook} hook"))
                }
                Ok(hook) if subject.hooks.get(hook).is_none() => Outcome::NotRun(format!(
                    "the controller's {hook} hook did not load here (see above)"
                )),
                Ok(hook) => run_one(engine, subject, test, hook),
            };
            (index, test.name.clone(), outcome)
        })
        .collect()
}

fn is_webhook(spec: &ControllerSpec, hook: HookKind) -> bool {
    spec.hooks
        .iter()
        .any(|(named, declared)| *named == hook && declared.webhook.is_some())
}

fn run_one(
    engine: &ScriptEngine,
    subject: &mut Subject,
    test: &InlineTest,
    hook: HookKind,
) -> Outcome {
    let clock = match test.clock.as_deref().map(|clock| {
        clock
            .parse::<jiff::Timestamp>()
            .map_err(|e| format!("clock {clock:?}: {e}"))
    }) {
        Some(Err(problem)) => return Outcome::Invalid(problem),
        Some(Ok(clock)) => Some(clock),
        None => None,
    };
    let case = Case {
        name: test.name.clone(),
        request: Some(test.request.clone()),
        request_file: None,
        expect: test.expect.clone(),
        exact: test.exact,
        expect_error: test.expect_error.clone(),
        clock,
        cluster: test.cluster.clone(),
        expect_reads: test.expect_reads.clone(),
        expect_events: test.expect_events.clone(),
    };
    subject.hook = hook;
    let reads = subject.reads(test.cluster.clone());
    let scope = CallScope {
        clock,
        reads: Some(reads.clone()),
        ..CallScope::default()
    };
    let result = subject.call(engine, &test.request, &scope, &test.cluster);
    let events = published(&result, &scope.events);
    match judge(&case, &result, &reads.dependencies(), &events) {
        None => Outcome::Passed,
        Some(why) => Outcome::Failed(why, result.err()),
    }
}
