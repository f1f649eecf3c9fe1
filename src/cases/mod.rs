//! Hook test cases: the `*.test.yaml` format (also accepted inline in a controller's
//! `spec.tests`), running a case against a loaded hook, and judging the response. `metascript
//! test`, `metascript validate` and the admission webhook all run cases through here.

mod compare;
pub(crate) mod inline;
pub mod record;
mod spec;

pub(crate) use spec::{Case, LibraryFile, OneOrMany, TestFile};

use crate::api::{HookKind, ScriptEvent};
use crate::hooks::{ControllerHooks, HookError, InvalidResponse};
use crate::plan::{Planner, outputs};
use crate::schema::SchemaSource;
use crate::script::{CallScope, EventSink, ScriptEngine};
use serde_json::Value;

/// The hook cases run against: from a script file, or a controller's hook (with the planner
/// that checks its responses as the operator would).
pub(crate) struct Subject {
    /// What the subject is called in reports (a file name, a controller).
    pub label: String,
    pub hook: HookKind,
    /// Shared: the operator tests the very hooks a version will serve.
    pub hooks: std::sync::Arc<ControllerHooks>,
    /// The controller's planner; a script file has none.
    pub planner: Option<std::sync::Arc<dyn Planner>>,
    /// What the objects a response writes are checked against.
    pub schemas: std::sync::Arc<dyn SchemaSource>,
}

impl Subject {
    /// A controller's hooks, first its kind's first hook (`spec.tests` name the others).
    pub(crate) fn controller(
        name: &str,
        kind: crate::api::KindName,
        hooks: std::sync::Arc<ControllerHooks>,
        planner: std::sync::Arc<dyn Planner>,
        schemas: std::sync::Arc<dyn SchemaSource>,
    ) -> Subject {
        Subject {
            label: name.to_string(),
            hook: kind.hooks()[0],
            hooks,
            planner: Some(planner),
            schemas,
        }
    }

    /// Read access for one case: its `cluster` objects, limited to the types the controller
    /// declares in `spec.reads`, or (a script file, which declares nothing) to the types of
    /// the objects given.
    pub(crate) fn reads(&self, cluster: Vec<Value>) -> crate::reads::ReadAccess {
        use crate::resources::{ResourceType, TypeInfo};
        let declared: std::sync::Arc<[ResourceType]> = match &self.planner {
            Some(planner) => planner.reads(),
            None => {
                let builtins = crate::resources::StaticResolver::with_builtins();
                let mut types: Vec<ResourceType> = Vec::new();
                for object in &cluster {
                    let (api_version, kind) = (
                        crate::object::api_version(object),
                        crate::object::kind(object),
                    );
                    if types
                        .iter()
                        .any(|t| t.api_version == api_version && t.kind == kind)
                    {
                        continue;
                    }
                    types.push(builtins.find_kind(api_version, kind).unwrap_or_else(|| {
                        ResourceType::from(TypeInfo {
                            api_version: api_version.to_string(),
                            kind: kind.to_string(),
                            plural: format!("{}s", kind.to_lowercase()),
                            namespaced: crate::object::namespace(object).is_some(),
                            has_status: false,
                        })
                    }));
                }
                types.into()
            }
        };
        let store = crate::store::MemoryStore::new(cluster);
        crate::reads::ReadAccess::new(std::sync::Arc::new(store), declared)
    }

    /// Calls the hook on a request and checks the response as the operator would: its shape,
    /// then what it writes against their schemas, with the objects of `cluster` as they are
    /// now (`oldSelf` to transition rules).
    pub(crate) fn call(
        &self,
        engine: &ScriptEngine,
        request: &Value,
        scope: &CallScope,
        cluster: &[Value],
    ) -> Result<Value, HookError> {
        let response = self.hooks.call(engine, self.hook, request, scope)?;
        let invalid = |error| self.hooks.invalid_response(self.hook, error);
        let plan = match &self.planner {
            Some(planner) => planner
                .plan_response(self.hook, request, &response)
                .map_err(invalid)?,
            None => Some(outputs::loose_plan(&response)),
        };
        if let Some(plan) = plan {
            let target = request
                .get("object")
                .or_else(|| request.get("parent"))
                .unwrap_or(&Value::Null);
            let store = crate::store::MemoryStore::new(cluster.iter().cloned());
            let observed = |desired: &Value| crate::plan::observed_in(&store, desired);
            outputs::check(&plan, target, &observed, &*self.schemas).map_err(|violations| {
                let place = outputs::where_in(&response, &violations);
                invalid(InvalidResponse::new(place, violations.to_string()))
            })?;
        }
        Ok(response)
    }
}

/// Why a case failed, or `None` when it passed; `reads` are the dependencies the call
/// recorded, checked against `expectReads`, and `events` the Events it asked for, checked
/// against `expectEvents`.
pub(crate) fn judge(
    case: &Case,
    result: &Result<Value, HookError>,
    reads: &[crate::reads::Dependency],
    events: &[ScriptEvent],
) -> Option<String> {
    if let Some(expected) = &case.expect_reads {
        let actual = crate::reads::describe(reads);
        if *expected != actual {
            return Some(format!(
                "expected the reads {expected:?}, the call recorded {actual:?}"
            ));
        }
    }
    if let Some(expected) = &case.expect_events
        && expected != events
    {
        return Some(format!(
            "expected the events {}, the call asked for {}",
            describe_events(expected),
            describe_events(events)
        ));
    }
    match (result, &case.expect_error) {
        // What a webhook answered counts too: the author runs the case, and reads it.
        (Err(error), Some(wanted)) if error.with_body().contains(wanted.as_str()) => None,
        (Err(error), Some(wanted)) => Some(format!(
            "expected an error containing {wanted:?}, got this error:\n{}",
            error.with_body()
        )),
        (Ok(actual), Some(wanted)) => Some(format!(
            "expected an error containing {wanted:?}, but the hook succeeded with:\n{}",
            yaml(actual)
        )),
        (Err(error), None) => Some(format!("the hook failed:\n{}", error.with_body())),
        (Ok(actual), None) => {
            let expected = case.expect.as_ref()?;
            let found = compare::mismatches(expected, actual, case.exact);
            if found.is_empty() {
                return None;
            }
            let shown = if case.exact {
                actual.clone()
            } else {
                compare::project(expected, actual)
            };
            let mut details = found.join("\n");
            details.push('\n');
            details.push_str(&compare::diff(expected, &shown));
            Some(details)
        }
    }
}

/// The Events a call would publish: as in the operator, none when it failed (an error or a
/// response the operator rejects).
pub(crate) fn published(result: &Result<Value, HookError>, events: &EventSink) -> Vec<ScriptEvent> {
    match result {
        Ok(_) => events.events(),
        Err(_) => Vec::new(),
    }
}

/// Events as `[Warning Reason: message, ...]`, the way `kubectl get events` lists them.
pub(crate) fn describe_events(events: &[ScriptEvent]) -> String {
    let listed: Vec<String> = events
        .iter()
        .map(|e| format!("{} {}: {:?}", e.type_, e.reason, e.message))
        .collect();
    format!("[{}]", listed.join(", "))
}

fn yaml(value: &Value) -> String {
    serde_saphyr::to_string(value)
        .unwrap_or_else(|error| format!("# cannot print as YAML: {error}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reads::Dependency;
    use serde_json::json;

    #[test]
    fn expected_reads_must_match_exactly() {
        let namespaces = crate::resources::StaticResolver::with_builtins()
            .find_kind("v1", "Namespace")
            .unwrap();
        let read = |name: &str| Dependency::Object {
            resource: namespaces.clone(),
            namespace: None,
            name: name.into(),
        };
        let case = Case {
            name: "reads".into(),
            expect_reads: Some(vec!["get Namespace.v1 shop".into()]),
            ..Case::default()
        };
        let ok: Result<Value, HookError> = Ok(json!({}));
        assert_eq!(judge(&case, &ok, &[read("shop")], &[]), None);
        let failure = judge(&case, &ok, &[read("shop"), read("lab")], &[]).expect("a failure");
        assert!(failure.contains("get Namespace.v1 lab"), "{failure}");
        assert!(judge(&case, &ok, &[], &[]).is_some());
    }

    #[test]
    fn expected_events_must_match_exactly_and_in_order() {
        let event = |reason: &str| ScriptEvent::new("Normal", reason, "m").unwrap();
        let case = Case {
            name: "events".into(),
            expect_events: Some(vec![event("First"), event("Second")]),
            ..Case::default()
        };
        let ok: Result<Value, HookError> = Ok(json!({}));
        assert_eq!(
            judge(&case, &ok, &[], &[event("First"), event("Second")]),
            None
        );
        let failure =
            judge(&case, &ok, &[], &[event("Second"), event("First")]).expect("a failure");
        assert!(
            failure.contains(r#"the call asked for [Normal Second: "m", Normal First: "m"]"#),
            "{failure}"
        );
        assert!(judge(&case, &ok, &[], &[event("First")]).is_some());
    }

    /// The author runs the case: what the webhook answered is shown, and may be expected.
    #[test]
    fn a_webhook_failure_shows_its_body_to_the_author() {
        let failed: Result<Value, HookError> =
            Err(HookError::Webhook(Box::new(crate::hooks::WebhookError {
                controller: "echo".into(),
                hook: crate::kinds::decorator::SYNC,
                url: "http://hooks/sync".into(),
                failure: crate::hooks::WebhookFailure::Status {
                    status: 500,
                    excerpt: "no such template".into(),
                },
            })));
        let expecting = |wanted: Option<&str>| Case {
            name: "fails".into(),
            expect_error: wanted.map(str::to_string),
            ..Case::default()
        };
        assert_eq!(
            judge(&expecting(Some("no such template")), &failed, &[], &[]),
            None
        );
        let failure = judge(&expecting(None), &failed, &[], &[]).expect("a failure");
        assert_eq!(
            failure,
            "the hook failed:\nhook sync of echo (webhook http://hooks/sync): answered HTTP \
             500\nthe webhook answered: no such template"
        );
    }
}
