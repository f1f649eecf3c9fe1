//! Checking a controller, or a ConfigMap of scripts, before it runs: its scripts compile, its
//! types resolve and its `spec.tests` pass. The admission webhook (against the cluster) and
//! `metascript validate` (against files) share it, so both judge alike.

use crate::api::{KindName, Language, ResourceRef};
use crate::cases::Subject;
use crate::cases::inline::{self, Outcome};
use crate::hooks::{
    ConfigMapLookup, ControllerHooks, HookError, HookOrigin, SourceError, unused_libraries,
};
use crate::kinds::{self, ParsedController};
use crate::object;
use crate::plan::Planner;
use crate::resources::{ResolveError, ResourceResolver};
use crate::schema::SchemaSource;
use crate::script::{ScriptEngine, ScriptError, ScriptOrigin, ScriptSource};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// A ConfigMap with this label set to `true` holds scripts: each key named `*.rhai` or `*.lua`
/// must compile before the ConfigMap is admitted.
pub(crate) const SCRIPTS_LABEL: &str = "metascript.dev/scripts";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Severity {
    /// The object must not be admitted.
    Error,
    /// Worth saying, but the object may still work (e.g. a CRD applied after the controller).
    Warning,
}

/// One problem, and where in the object it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finding {
    pub severity: Severity,
    /// A field path, e.g. `spec.hooks.sync` or `spec.tests[1] (adds a label)`.
    pub path: String,
    pub message: String,
    /// Where in a script the problem is, when it is about one (a compile error, a test that
    /// failed with a script error or a response the hook may not give): what an editor marks.
    pub script: Option<ScriptSpot>,
    /// What a warning leaves unchecked, so that a summary does not claim it.
    pub unchecked: Option<Unchecked>,
}

/// A check a warning says could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Unchecked {
    /// A hook whose script (or webhook credential) is not at hand.
    Hook,
    /// A controller whose types do not resolve.
    Types,
    /// A `spec.tests` case not run.
    Test,
}

/// A place in a script: its origin, and a line and column there or a name it uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSpot {
    pub origin: ScriptOrigin,
    /// 1-based, as the engine reported it.
    pub line: Option<u32>,
    pub column: Option<u32>,
    /// A name in the script the problem is about when no line is known: the response field a
    /// rejected response got wrong (`lables`), which the script spells where it sets it.
    pub name: Option<String>,
}

impl ScriptSpot {
    pub(crate) fn of_script_error(error: &ScriptError) -> ScriptSpot {
        ScriptSpot {
            origin: (*error.origin).clone(),
            line: error.line,
            column: error.column,
            name: None,
        }
    }

    /// The place in a script a sync failure is about, when it is about one.
    pub(crate) fn of_sync(error: &crate::plan::SyncError) -> Option<ScriptSpot> {
        match error {
            crate::plan::SyncError::Hook(error) => ScriptSpot::of(error),
            _ => None,
        }
    }

    /// The place in a script a hook failure is about, when it is about one.
    pub(crate) fn of(error: &HookError) -> Option<ScriptSpot> {
        match error {
            HookError::Script(error) => Some(ScriptSpot::of_script_error(error)),
            HookError::Response(rejected) => {
                let HookOrigin::Script(origin) = &rejected.origin else {
                    return None;
                };
                // `labels.app`, `attachments[2]`: the response field is the first step;
                // `(response)` is the response as a whole.
                let field = rejected.source.path.split(['.', '[']).next()?;
                Some(ScriptSpot {
                    origin: origin.clone(),
                    line: None,
                    column: None,
                    name: (!field.is_empty() && !field.starts_with('(')).then(|| field.to_string()),
                })
            }
            _ => None,
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl Finding {
    fn error(path: impl Into<String>, message: impl ToString) -> Finding {
        Finding {
            severity: Severity::Error,
            path: path.into(),
            message: message.to_string(),
            script: None,
            unchecked: None,
        }
    }

    fn warning(path: impl Into<String>, message: impl ToString) -> Finding {
        Finding {
            severity: Severity::Warning,
            path: path.into(),
            message: message.to_string(),
            script: None,
            unchecked: None,
        }
    }

    fn in_script(mut self, spot: Option<ScriptSpot>) -> Finding {
        self.script = spot;
        self
    }

    fn leaving(mut self, unchecked: Unchecked) -> Finding {
        self.unchecked = Some(unchecked);
        self
    }
}

/// What validating an object reads besides the object: the types it names and the ConfigMaps
/// its hooks reference, so a caller can fetch them first.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct References {
    pub types: Vec<ResourceRef>,
    /// (namespace, name)
    pub config_maps: Vec<(String, String)>,
}

/// The types and ConfigMaps a controller object names (none for anything else, or for an
/// object that cannot be read; validating it says why).
pub(crate) fn references(object: &Value) -> References {
    let Some(Ok(controller)) = kinds::of(object).map(|kind| kind.parse(object)) else {
        return References::default();
    };
    let spec = controller.spec();
    References {
        config_maps: spec.config_maps(),
        types: spec.types,
    }
}

/// Validates one object; anything that is neither a controller nor a labelled ConfigMap of
/// scripts has nothing to check.
pub(crate) fn validate(
    engine: &ScriptEngine,
    resolver: &dyn ResourceResolver,
    schemas: &Arc<dyn SchemaSource>,
    config_maps: &dyn ConfigMapLookup,
    object: &Value,
) -> Vec<Finding> {
    validate_until(engine, resolver, schemas, config_maps, object, None)
}

/// [`validate`], running no `spec.tests` case once `deadline` has passed (each such case is an
/// error: it was not checked). What `spec.tests` cases write is checked against `schemas`.
pub(crate) fn validate_until(
    engine: &ScriptEngine,
    resolver: &dyn ResourceResolver,
    schemas: &Arc<dyn SchemaSource>,
    config_maps: &dyn ConfigMapLookup,
    object: &Value,
    deadline: Option<std::time::Instant>,
) -> Vec<Finding> {
    if object::kind(object) == "ConfigMap" && object::api_version(object) == "v1" {
        return validate_scripts(engine, object);
    }
    let Some(kind) = kinds::of(object) else {
        return Vec::new();
    };
    match kind.parse(object) {
        Err(error) => vec![Finding::error("spec", error)],
        Ok(controller) => check_controller(
            engine,
            schemas,
            config_maps,
            kind.name(),
            &*controller,
            controller.planner(resolver),
            deadline,
        ),
    }
}

/// Said of a child rule without `updateStrategy` (by `validate` and `render`).
pub(crate) const ON_DELETE_BY_DEFAULT: &str = "updateStrategy is not set, so it is OnDelete (as in \
    Metacontroller): a child that exists is never updated when the hook's output for it changes; \
    set `updateStrategy: {method: InPlace}` to keep children in line, or `{method: OnDelete}` to \
    say that is meant";

/// The checks every kind shares: hooks compile, types resolve, tests pass.
fn check_controller(
    engine: &ScriptEngine,
    schemas: &Arc<dyn SchemaSource>,
    config_maps: &dyn ConfigMapLookup,
    kind: KindName,
    controller: &dyn ParsedController,
    planner: Result<Box<dyn Planner>, ResolveError>,
    deadline: Option<std::time::Instant>,
) -> Vec<Finding> {
    let name = &controller.name();
    let spec = controller.spec();
    let (hooks, libraries, tests) = (spec.named_hooks(), &spec.libraries, &spec.tests);
    let mut findings: Vec<Finding> = unused_libraries(name, &hooks, libraries)
        .into_iter()
        .map(|(index, why)| Finding::warning(format!("spec.libraries[{index}]"), why))
        .collect();
    if let Err(invalid) = &spec.service_account {
        findings.push(Finding::error("spec.serviceAccountName", invalid));
    }
    findings.extend(
        spec.on_delete_by_default
            .iter()
            .map(|path| Finding::warning(path.clone(), ON_DELETE_BY_DEFAULT)),
    );
    findings.extend(
        spec.rollout
            .problems()
            .into_iter()
            .map(|(path, problem)| Finding::error(path, problem)),
    );
    let mut loaded = Vec::new();
    for (hook_kind, hook) in hooks {
        let path = format!("spec.hooks.{hook_kind}");
        match ControllerHooks::load(
            engine,
            name,
            [(hook_kind, hook)],
            libraries,
            &spec.endpoint_configs,
            config_maps,
        ) {
            Ok(_) => loaded.push((hook_kind, hook)),
            // A ConfigMap applied after its controller is fine: the operator waits for it (and
            // the ConfigMap itself is checked when it is applied, if it is labelled). Webhook
            // credentials are read by the operator with the controller's own account, so a
            // check without them (admission never reads Secrets) cannot tell more.
            Err(HookError::Source(error))
                if matches!(
                    *error,
                    SourceError::MissingConfigMap { .. }
                        | SourceError::Withheld { .. }
                        | SourceError::MissingKey { .. }
                        | SourceError::MissingCredential { .. }
                ) =>
            {
                findings.push(Finding::warning(path, error).leaving(Unchecked::Hook))
            }
            Err(error) => {
                let spot = ScriptSpot::of(&error);
                findings.push(Finding::error(path, error).in_script(spot))
            }
        }
    }
    let planner = match planner {
        Ok(planner) => Some(planner),
        // Likewise a CustomResourceDefinition applied after the controller.
        Err(error) => {
            findings.push(
                Finding::warning(
                    "spec",
                    format!("{error}; the controller waits until the type exists"),
                )
                .leaving(Unchecked::Types),
            );
            None
        }
    };
    if tests.is_empty() {
        return findings;
    }
    let (Some(planner), Ok(hooks)) = (
        planner,
        ControllerHooks::load(
            engine,
            name,
            loaded,
            libraries,
            &spec.endpoint_configs,
            config_maps,
        ),
    ) else {
        findings.push(Finding::error(
            "spec.tests",
            "cannot run: the controller's types or hooks did not load (see above)",
        ));
        return findings;
    };
    let mut subject =
        Subject::controller(name, kind, hooks.into(), planner.into(), schemas.clone());
    for (index, test, outcome) in inline::run_all(engine, kind, &spec, &mut subject, deadline) {
        let path = format!("spec.tests[{index}] ({test})");
        match outcome {
            Outcome::Passed => {}
            Outcome::Failed(why, error) => {
                let spot = error.as_ref().and_then(ScriptSpot::of);
                findings.push(Finding::error(path, why).in_script(spot))
            }
            Outcome::NotRun(why) => findings
                .push(Finding::warning(path, format!("not run: {why}")).leaving(Unchecked::Test)),
            Outcome::Invalid(problem) => findings.push(Finding::error(path, problem)),
        }
    }
    findings
}

/// A labelled ConfigMap: every `*.rhai` and `*.lua` key compiles.
fn validate_scripts(engine: &ScriptEngine, config_map: &Value) -> Vec<Finding> {
    if object::label(config_map, SCRIPTS_LABEL) != Some("true") {
        return Vec::new();
    }
    let (namespace, name) = (
        object::namespace(config_map).unwrap_or_default(),
        object::name(config_map),
    );
    let Some(data) = config_map.get("data").and_then(Value::as_object) else {
        return Vec::new();
    };
    data.iter()
        .filter_map(|(key, code)| {
            let language = Language::from_file_name(key)?;
            let source = ScriptSource::new(
                language,
                code.as_str().unwrap_or_default(),
                ScriptOrigin::ConfigMap {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    key: key.clone(),
                },
            );
            let error = engine.compile(&source).err()?;
            let spot = ScriptSpot::of_script_error(&error);
            Some(Finding::error(format!("data.{key}"), error).in_script(Some(spot)))
        })
        .collect()
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::StaticResolver;
    use serde_json::json;

    fn decorator(sync: Value, tests: Value) -> Value {
        json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": "labeller"},
            "spec": {
                "resources": [{"apiVersion": "v1", "resource": "configmaps"}],
                "hooks": {"sync": sync},
                "tests": tests
            }
        })
    }

    fn inline(code: &str) -> Value {
        json!({"script": {"language": "rhai", "inline": code}})
    }

    fn check(object: &Value, config_maps: Vec<Value>) -> Vec<Finding> {
        validate(
            &ScriptEngine::new(),
            &StaticResolver::with_builtins(),
            &(Arc::new(crate::schema::Schemas::with_builtins()) as _),
            &config_maps,
            object,
        )
    }

    const LABELLER: &str = r#"#{ labels: #{ seen: "yes" } }"#;

    fn request() -> Value {
        json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}})
    }

    #[test]
    fn a_script_that_does_not_compile_is_an_error_naming_the_hook_and_line() {
        let findings = check(&decorator(inline("let x = ;\n#{}"), json!([])), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].severity, Severity::Error);
        assert_eq!(findings[0].path, "spec.hooks.sync");
        assert!(findings[0].message.contains("line 1"), "{}", findings[0]);
        assert!(check(&decorator(inline(LABELLER), json!([])), vec![]).is_empty());
    }

    #[test]
    fn findings_about_a_script_say_where_in_it() {
        let origin = ScriptOrigin::Inline {
            controller: "labeller".into(),
            hook: crate::kinds::decorator::SYNC,
        };
        let findings = check(
            &decorator(inline("let x = 1;\nlet y = ;"), json!([])),
            vec![],
        );
        let spot = findings[0]
            .script
            .as_ref()
            .expect("a compile error's place");
        assert_eq!((&spot.origin, spot.line), (&origin, Some(2)));
        // A test that fails on a runtime error: its line; a misspelled response field: its name.
        let tests = json!([{"name": "runs", "request": request(), "expect": {}}]);
        let findings = check(
            &decorator(inline("let x = 1;\nlabl(x)"), tests.clone()),
            vec![],
        );
        let spot = findings[0]
            .script
            .as_ref()
            .expect("a runtime error's place");
        assert_eq!(spot.line, Some(2), "{findings:?}");
        let findings = check(&decorator(inline("#{ lables: #{} }"), tests), vec![]);
        let spot = findings[0]
            .script
            .as_ref()
            .expect("a rejected field's place");
        assert_eq!(spot.name.as_deref(), Some("lables"), "{findings:?}");
        assert_eq!(spot.line, None);
        // A finding that is not about a script has no place in one.
        let failing = json!([{"name": "labels it", "request": request(), "expect": {"labels": {"seen": "no"}}}]);
        assert_eq!(
            check(&decorator(inline(LABELLER), failing), vec![])[0].script,
            None
        );
    }

    #[test]
    fn tests_run_against_the_hook_and_a_failing_one_is_an_error() {
        let passing = json!([{"name": "labels it", "request": request(), "expect": {"labels": {"seen": "yes"}}}]);
        assert!(check(&decorator(inline(LABELLER), passing), vec![]).is_empty());
        let failing = json!([
            {"name": "labels it", "request": request(), "expect": {"labels": {"seen": "no"}}},
            {"name": "no such hook", "hook": "finalize", "request": request(), "expect": {}}
        ]);
        let findings = check(&decorator(inline(LABELLER), failing), vec![]);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert_eq!(findings[0].path, "spec.tests[0] (labels it)");
        assert!(
            findings[0].message.contains("labels.seen"),
            "{}",
            findings[0]
        );
        assert!(
            findings[1].message.contains("no finalize hook"),
            "{}",
            findings[1]
        );
        // The response is checked as the operator would check it, too.
        let bad_response = json!([{"name": "bad", "request": request(), "expect": {}}]);
        let findings = check(&decorator(inline("#{ labels: 5 }"), bad_response), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert!(findings[0].message.contains("labels"), "{}", findings[0]);
    }

    #[test]
    fn tests_of_a_webhook_hook_are_never_called_only_reported_as_not_run() {
        // Nothing listens on this port: a call would fail the case with a connection error.
        let webhook = json!({"webhook": {"url": "http://127.0.0.1:9/sync"}});
        let tests = json!([{"name": "labels it", "request": request(), "expect": {"labels": {"seen": "yes"}}}]);
        let findings = check(&decorator(webhook, tests), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].severity, Severity::Warning, "{}", findings[0]);
        assert!(findings[0].message.contains("not run"), "{}", findings[0]);
    }

    #[test]
    fn tests_can_state_the_events_a_call_asks_for() {
        let sync = inline(r#"event("Normal", "Seen", name(request.object)); #{}"#);
        let expecting = |message: &str| {
            json!([{"name": "says so", "request": request(),
                    "expectEvents": [{"type": "Normal", "reason": "Seen", "message": message}]}])
        };
        assert!(check(&decorator(sync.clone(), expecting("a")), vec![]).is_empty());
        let findings = check(&decorator(sync, expecting("b")), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert!(
            findings[0].message.contains("expected the events"),
            "{}",
            findings[0]
        );
    }

    #[test]
    fn an_attachment_left_on_delete_by_default_is_a_warning_naming_it() {
        let mut object = decorator(inline("#{}"), json!([]));
        object["spec"]["attachments"] = json!([
            {"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}},
            {"apiVersion": "v1", "resource": "secrets"},
        ]);
        let findings = check(&object, vec![]);
        let defaulted: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.message.contains("OnDelete"))
            .collect();
        assert_eq!(defaulted.len(), 1, "{findings:?}");
        assert_eq!(defaulted[0].severity, Severity::Warning);
        assert_eq!(defaulted[0].path, "spec.attachments[1]");
    }

    #[test]
    fn an_account_must_name_its_namespace() {
        let mut object = decorator(inline(LABELLER), json!([]));
        object["spec"]["serviceAccountName"] = "bot".into();
        let findings = check(&object, vec![]);
        let finding = findings
            .iter()
            .find(|f| f.path == "spec.serviceAccountName")
            .expect("a finding about the account");
        assert_eq!(finding.severity, Severity::Error);
        assert!(
            finding
                .message
                .contains("serviceAccountNamespace is required"),
            "{finding}"
        );
        object["spec"]["serviceAccountNamespace"] = "team-a".into();
        assert!(check(&object, vec![]).is_empty());
    }

    /// `NAMESPACE/NAME` in `serviceAccountName` is refused by every kind, saying how to split
    /// it, whether or not `serviceAccountNamespace` is set too (the operator would otherwise
    /// impersonate `ns/ns/name` and report a permissions error).
    #[test]
    fn a_qualified_account_name_is_refused_by_every_kind() {
        let hooks = |hook: &str| json!({hook: inline(LABELLER)});
        let kinds = [
            decorator(inline(LABELLER), json!([])),
            json!({
                "apiVersion": "metascript.dev/v1alpha1", "kind": "MapController",
                "metadata": {"name": "m"},
                "spec": {
                    "parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                    "inputResources": [{"apiVersion": "v1", "resource": "pods"}],
                    "outputResources": [{"apiVersion": "v1", "resource": "secrets",
                                         "updateStrategy": {"method": "InPlace"}}],
                    "hooks": hooks("map")
                }
            }),
            json!({
                "apiVersion": "metascript.dev/v1alpha1", "kind": "CompositeController",
                "metadata": {"name": "c"},
                "spec": {
                    "parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                    "childResources": [{"apiVersion": "v1", "resource": "secrets",
                                        "updateStrategy": {"method": "InPlace"}}],
                    "hooks": hooks("sync")
                }
            }),
        ];
        for mut object in kinds {
            let kind = object["kind"].clone();
            assert!(
                check(&object, vec![]).is_empty(),
                "{kind}: {:?}",
                check(&object, vec![])
            );
            object["spec"]["serviceAccountName"] = "team-a/bot".into();
            for namespace in [None, Some("team-a")] {
                if let Some(namespace) = namespace {
                    object["spec"]["serviceAccountNamespace"] = namespace.into();
                }
                let findings = check(&object, vec![]);
                let [finding] = findings.as_slice() else {
                    panic!("{kind} {namespace:?}: {findings:?}");
                };
                assert_eq!(
                    (finding.severity, finding.path.as_str()),
                    (Severity::Error, "spec.serviceAccountName"),
                    "{kind}"
                );
                assert!(
                    finding.message.contains(
                        r#"set serviceAccountName: "bot" and serviceAccountNamespace: "team-a""#
                    ),
                    "{kind}: {finding}"
                );
            }
        }
    }

    /// Admission refuses a selector past a cap, naming the field and the cap; the operator's
    /// load reads the spec the same way, so it refuses it too.
    #[test]
    fn a_selector_past_its_cap_is_refused_where_it_is() {
        let mut object = decorator(inline(LABELLER), json!([]));
        let labels: serde_json::Map<String, Value> = (0..=crate::selector::MAX_REQUIREMENTS)
            .map(|i| (format!("l{i}"), Value::from("x")))
            .collect();
        object["spec"]["resources"][0]["labelSelector"] = json!({"matchLabels": labels});
        let findings = check(&object, vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].severity, Severity::Error);
        assert_eq!(findings[0].path, "spec");
        let message = &findings[0].message;
        assert!(
            message.starts_with(
                "spec.resources[0].labelSelector: selector too large: 65 requirements"
            ),
            "{message}"
        );
        assert!(message.contains("at most 64"), "{message}");
        object["spec"]["resources"][0]["labelSelector"]["matchLabels"]
            .as_object_mut()
            .expect("labels")
            .remove("l0");
        assert!(check(&object, vec![]).is_empty());
    }

    #[test]
    fn tests_of_a_hook_whose_script_is_not_at_hand_are_not_run() {
        let object = decorator(
            json!({"script": {"configMapRef": {"namespace": "hooks", "name": "scripts", "key": "sync.rhai"}}}),
            json!([{"name": "labels", "request": request(), "expect": {"labels": {"seen": "yes"}}}]),
        );
        let findings = check(&object, vec![]);
        assert!(
            findings.iter().all(|f| f.severity == Severity::Warning),
            "{findings:?}"
        );
        assert!(
            findings
                .iter()
                .any(|f| f.path == "spec.tests[0] (labels)" && f.message.starts_with("not run")),
            "{findings:?}"
        );
    }

    #[test]
    fn types_and_config_maps_that_do_not_exist_yet_are_only_warnings() {
        let mut object = decorator(
            json!({"script": {"configMapRef": {"namespace": "hooks", "name": "scripts", "key": "sync.rhai"}}}),
            json!([]),
        );
        object["spec"]["resources"] =
            json!([{"apiVersion": "example.com/v1", "resource": "widgets"}]);
        let findings = check(&object, vec![]);
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert!(findings.iter().all(|f| f.severity == Severity::Warning));
        assert_eq!(
            references(&object),
            References {
                types: vec![ResourceRef {
                    api_version: "example.com/v1".into(),
                    resource: "widgets".into()
                }],
                config_maps: vec![("hooks".into(), "scripts".into())],
            }
        );
        // Once the ConfigMap exists, its script is compiled like an inline one.
        let scripts = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scripts", "namespace": "hooks"}, "data": {"sync.rhai": "let = 1;"}});
        let findings = check(&object, vec![scripts]);
        assert!(
            findings
                .iter()
                .any(|f| f.severity == Severity::Error && f.path == "spec.hooks.sync"),
            "{findings:?}"
        );
    }

    /// Validation never reads Secrets: a credential it cannot read is a warning, a mistake in
    /// the credential fields an error.
    #[test]
    fn webhook_credentials_not_at_hand_are_only_warnings() {
        let token = json!({"secretRef": {"name": "token", "namespace": "hooks", "key": "token"}});
        let hook = |authorization: Value| json!({"webhook": {"url": "http://hooks/sync", "authorization": authorization}});
        let findings = check(&decorator(hook(token.clone()), json!([])), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].severity, Severity::Warning);
        assert!(
            findings[0].message.contains("Secret hooks/token"),
            "{findings:?}"
        );
        let mut basic = token;
        basic["type"] = json!("Basic");
        let findings = check(&decorator(hook(basic), json!([])), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].severity, Severity::Error);
    }

    #[test]
    fn a_labelled_config_map_of_scripts_must_compile() {
        let config_map = |labelled: bool| {
            json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "scripts", "namespace": "hooks", "labels": if labelled { json!({SCRIPTS_LABEL: "true"}) } else { json!({}) }},
                "data": {"good.rhai": LABELLER, "bad.lua": "return {", "notes.txt": "not a script"}
            })
        };
        let findings = check(&config_map(true), vec![]);
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].path, "data.bad.lua");
        assert!(check(&config_map(false), vec![]).is_empty());
    }
}
