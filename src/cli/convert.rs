//! `metascript convert`: Metacontroller DecoratorControllers rewritten as metascript.dev ones,
//! offline, keeping their webhook hooks. The output is reviewed, committed and applied like any
//! manifest; from then on the hooks can be rewritten as scripts one at a time
//! (`docs/migrating.md` says why this is a command rather than a mode of the operator).

use super::manifests::{self, Document};
use crate::api::API_VERSION;
use crate::hooks::{ControllerHooks, HookError, NoConfigMaps};
use crate::kinds::{self, ControllerKind};
use crate::object;
use crate::script::ScriptEngine;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

/// The Metacontroller API this reads.
pub const METACONTROLLER_API_VERSION: &str = "metacontroller.k8s.io/v1alpha1";

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// Manifest files or directories, or `-` for standard input (e.g. the output of `kubectl get
    /// decoratorcontrollers.metacontroller.k8s.io -o yaml`). Objects other than Metacontroller
    /// controllers are printed unchanged, so a whole bundle converts in one go.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Sets `spec.serviceAccountName` on every converted controller: its writes then go as that
    /// ServiceAccount (needed when the operator runs with `--allow-unimpersonated=false`).
    #[arg(long)]
    pub service_account_name: Option<String>,
    /// Sets `spec.serviceAccountNamespace` (default metascript-system).
    #[arg(long, requires = "service_account_name")]
    pub service_account_namespace: Option<String>,
}

/// What every conversion is given.
#[derive(Debug, Default)]
pub struct Options {
    pub service_account_name: Option<String>,
    pub service_account_namespace: Option<String>,
}

/// A converted controller, and what the conversion changed beyond the API group.
#[derive(Debug)]
pub struct Conversion {
    pub object: Value,
    pub notes: Vec<String>,
}

/// Why an object cannot be converted; each names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConvertError {
    #[error(
        "{kind} is not supported: metascript implements {supported}; keep this one on \
         Metacontroller"
    )]
    UnsupportedKind { kind: String, supported: String },
    #[error("{path}: {reason}")]
    Field { path: String, reason: String },
    #[error("hooks: {0}")]
    Hook(String),
}

fn field(path: impl Into<String>, reason: impl Into<String>) -> ConvertError {
    ConvertError::Field {
        path: path.into(),
        reason: reason.into(),
    }
}

/// Webhook fields of newer Metacontroller releases that metascript does not implement: a hook
/// using one would fail (or call without credentials), so the conversion refuses it.
const UNSUPPORTED_WEBHOOK_FIELDS: [(&str, &str); 3] = [
    ("authorization", "a token from a Secret"),
    ("basicAuth", "basic authentication"),
    ("clientTLS", "client certificates"),
];

/// Converts one object: `Ok(None)` for anything that is not a Metacontroller controller (it is
/// passed through), every problem at once otherwise.
pub fn convert(object: &Value, options: &Options) -> Result<Option<Conversion>, Vec<ConvertError>> {
    if object::api_version(object) != METACONTROLLER_API_VERSION {
        return Ok(None);
    }
    let Some(kind) = kinds::ALL
        .iter()
        .copied()
        .find(|kind| kind.name().object_kind() == object::kind(object))
    else {
        let supported: Vec<&str> = kinds::ALL.iter().map(|k| k.name().object_kind()).collect();
        return Err(vec![ConvertError::UnsupportedKind {
            kind: object::kind(object).to_string(),
            supported: supported.join(", "),
        }]);
    };
    convert_kind(kind, object, options).map(Some)
}

/// Converts a Metacontroller controller of a kind metascript has.
fn convert_kind(
    kind: &dyn ControllerKind,
    object: &Value,
    options: &Options,
) -> Result<Conversion, Vec<ConvertError>> {
    let kind_name = kind.name();
    let mut notes = Vec::new();
    let mut errors = Vec::new();
    let mut spec = object["spec"].as_object().cloned().unwrap_or_default();
    if spec.remove("endpointConfigs").is_some() {
        errors.push(field(
            "spec.endpointConfigs",
            "per-host credentials and CAs are not supported; put the CA in each hook's \
             webhook.caBundle.inline",
        ));
    }
    match spec.get_mut("hooks").and_then(Value::as_object_mut) {
        Some(hooks) => {
            for (name, hook) in hooks.iter_mut() {
                let path = format!("spec.hooks.{name}");
                if kind.name().hook(name).is_none() {
                    errors.push(field(path, format!("not a {} hook", kind.name())));
                    continue;
                }
                match convert_hook(&path, hook, &mut notes) {
                    Ok(converted) => *hook = converted,
                    Err(problems) => errors.extend(problems),
                }
            }
            let required = kind_name.hooks()[0];
            if !hooks.contains_key(required.as_str()) {
                errors.push(field(
                    format!("spec.hooks.{required}"),
                    format!("metascript needs a {required} hook"),
                ));
            }
        }
        None => errors.push(field(
            "spec.hooks",
            format!("metascript needs at least a {} hook", kind_name.hooks()[0]),
        )),
    }
    if let Some(name) = &options.service_account_name {
        spec.insert("serviceAccountName".into(), json!(name));
        if let Some(namespace) = &options.service_account_namespace {
            spec.insert("serviceAccountNamespace".into(), json!(namespace));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let converted = json!({
        "apiVersion": API_VERSION,
        "kind": kind_name.object_kind(),
        "metadata": metadata(object),
        "spec": spec,
    });
    let typed = kind
        .parse(&converted)
        .map_err(|error| vec![field(error.path, error.message)])?;
    let written = typed.to_json();
    let mut dropped = Vec::new();
    dropped_fields("spec", &converted["spec"], &written["spec"], &mut dropped);
    if !dropped.is_empty() {
        return Err(dropped
            .into_iter()
            .map(|path| field(path, "not a field metascript knows (it would be lost)"))
            .collect());
    }
    // The same checks the operator makes when it loads the hooks (URL, timeout, CA bundle).
    ControllerHooks::load(
        &ScriptEngine::new(),
        object::name(object),
        typed.spec().named_hooks(),
        &[],
        &NoConfigMaps,
    )
    .map_err(|error: HookError| vec![ConvertError::Hook(error.to_string())])?;
    Ok(Conversion {
        object: written,
        notes,
    })
}

/// The parts of the metadata that describe the controller (not the server's bookkeeping).
fn metadata(object: &Value) -> Value {
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(object::name(object)));
    if let Some(labels) = object["metadata"].get("labels") {
        metadata.insert("labels".into(), labels.clone());
    }
    let mut annotations = object["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    Value::Object(metadata)
}

/// A Metacontroller hook (`{version, webhook}`) as a metascript one (the same fields).
fn convert_hook(
    path: &str,
    hook: &Value,
    notes: &mut Vec<String>,
) -> Result<Value, Vec<ConvertError>> {
    let mut errors = Vec::new();
    let mut hook = hook.as_object().cloned().unwrap_or_default();
    match hook.get("version") {
        None => {}
        Some(version) if version == "v1" || version == "v2" => {}
        Some(version) => errors.push(field(
            format!("{path}.version"),
            format!("{version} is not a hook version (v1 or v2)"),
        )),
    }
    let Some(Value::Object(mut webhook)) = hook.remove("webhook") else {
        errors.push(field(path, "has no webhook"));
        return Err(errors);
    };
    let webhook_path = format!("{path}.webhook");
    for (name, what) in UNSUPPORTED_WEBHOOK_FIELDS {
        if webhook.remove(name).is_some() {
            errors.push(field(
                format!("{webhook_path}.{name}"),
                format!("{what} is not supported by metascript's webhooks"),
            ));
        }
    }
    if let Some(Value::Object(bundle)) = webhook.get("caBundle") {
        for source in ["secretRef", "configMapRef"] {
            if bundle.contains_key(source) {
                errors.push(field(
                    format!("{webhook_path}.caBundle.{source}"),
                    "only caBundle.inline (the PEM itself) is supported",
                ));
            }
        }
    }
    if webhook.contains_key("url") {
        for ignored in ["service", "path"] {
            if webhook.remove(ignored).is_some() {
                notes.push(format!(
                    "{webhook_path}.{ignored} dropped: url overrides it (as in Metacontroller)"
                ));
            }
        }
    }
    // Anything else left in the hook is caught when the result is read back.
    hook.insert("webhook".into(), Value::Object(webhook));
    if errors.is_empty() {
        Ok(Value::Object(hook))
    } else {
        Err(errors)
    }
}

/// Paths of the fields of `given` that `kept` does not have: what reading the object as a
/// metascript controller would silently lose.
fn dropped_fields(path: &str, given: &Value, kept: &Value, out: &mut Vec<String>) {
    match (given, kept) {
        (Value::Object(given), Value::Object(kept)) => {
            for (key, value) in given {
                let child = format!("{path}.{key}");
                match kept.get(key) {
                    // An explicit null is the same as leaving the field out.
                    None if value.is_null() => {}
                    None => out.push(child),
                    Some(kept) => dropped_fields(&child, value, kept, out),
                }
            }
        }
        (Value::Array(given), Value::Array(kept)) => {
            for (index, (value, kept)) in given.iter().zip(kept).enumerate() {
                dropped_fields(&format!("{path}[{index}]"), value, kept, out);
            }
        }
        _ => {}
    }
}

/// The objects of the documents, with `kind: List` (as `kubectl get -o yaml` prints) unpacked.
fn objects(documents: Vec<Document>) -> Vec<(String, Value)> {
    let mut objects = Vec::new();
    for document in documents {
        let place = format!("{} (document {})", document.path.display(), document.index);
        match document.value.get("items").and_then(Value::as_array) {
            Some(items) if object::kind(&document.value) == "List" => {
                objects.extend(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| (format!("{place} item {i}"), item.clone())),
                );
            }
            _ => objects.push((place, document.value)),
        }
    }
    objects
}

/// Prints the converted manifests, or nothing when any object cannot be converted (so a pipe
/// into `kubectl apply` applies all of it or none). Exit code 0, 1 when something cannot be
/// converted, 2 when the files cannot be read.
pub fn run(args: ConvertArgs) -> ExitCode {
    let documents = match manifests::load_objects(&args.files) {
        Ok(documents) => documents,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let options = Options {
        service_account_name: args.service_account_name,
        service_account_namespace: args.service_account_namespace,
    };
    let (mut output, mut converted, mut passed, mut failed) = (String::new(), 0, 0, false);
    for (place, value) in objects(documents) {
        let subject = format!("{place}: {} {}", object::kind(&value), object::name(&value));
        let written = match convert(&value, &options) {
            Ok(Some(conversion)) => {
                for note in conversion.notes {
                    eprintln!("{subject}: note: {note}");
                }
                converted += 1;
                conversion.object
            }
            Ok(None) => {
                passed += 1;
                value
            }
            Err(errors) => {
                for error in errors {
                    eprintln!("{subject}: error: {error}");
                }
                failed = true;
                continue;
            }
        };
        output.push_str("---\n");
        output.push_str(&manifests::to_yaml(&written));
    }
    if failed {
        eprintln!("nothing printed: fix the errors above, or leave those objects out");
        return ExitCode::FAILURE;
    }
    print!("{output}");
    eprintln!("converted {converted} controller(s); {passed} other object(s) unchanged");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's example, as Metacontroller's documentation writes it.
    fn service_per_pod() -> Value {
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "DecoratorController",
            "metadata": {
                "name": "service-per-pod",
                "uid": "1234", "resourceVersion": "99", "generation": 3,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "web"}
            },
            "spec": {
                "resources": [{
                    "apiVersion": "apps/v1", "resource": "statefulsets",
                    "annotationSelector": {"matchExpressions": [
                        {"key": "service-per-pod-label", "operator": "Exists"},
                        {"key": "service-per-pod-ports", "operator": "Exists"}
                    ]}
                }],
                "attachments": [{"apiVersion": "v1", "resource": "services", "updateStrategy": {"method": "InPlace"}}],
                "resyncPeriodSeconds": 30,
                "hooks": {
                    "sync": {"version": "v1", "webhook": {"url": "http://service-per-pod.metacontroller/sync-service-per-pod", "timeout": "10s", "etag": {"enabled": true}}},
                    "finalize": {"webhook": {"service": {"name": "service-per-pod", "namespace": "metacontroller", "port": 8080}, "path": "/finalize"}}
                }
            },
            "status": {}
        })
    }

    #[test]
    fn a_decorator_controller_keeps_its_spec_and_webhooks_under_metascript_dev() {
        let conversion = convert(
            &service_per_pod(),
            &Options {
                service_account_name: Some("service-per-pod".into()),
                service_account_namespace: None,
            },
        )
        .unwrap()
        .unwrap();
        let object = &conversion.object;
        assert_eq!(object["apiVersion"], "metascript.dev/v1alpha1");
        assert_eq!(
            object["metadata"],
            json!({"name": "service-per-pod", "annotations": {"team": "web"}})
        );
        let mut expected = service_per_pod()["spec"].clone();
        expected["hooks"]["sync"] = json!({"version": "v1", "webhook": {"url": "http://service-per-pod.metacontroller/sync-service-per-pod", "timeout": "10s", "etag": {"enabled": true}}});
        expected["serviceAccountName"] = json!("service-per-pod");
        assert_eq!(object["spec"], expected);
        assert!(object.get("status").is_none());
        assert!(conversion.notes.is_empty(), "{:?}", conversion.notes);
        // Anything else is not Metacontroller's and passes through.
        assert!(convert(object, &Options::default()).unwrap().is_none());

        // A v2 hook stays v2: the operator sends it v2 requests.
        let mut v2 = service_per_pod();
        v2["spec"]["hooks"]["sync"]["version"] = json!("v2");
        let converted = convert(&v2, &Options::default()).unwrap().unwrap();
        assert_eq!(converted.object["spec"]["hooks"]["sync"]["version"], "v2");
    }

    /// Metacontroller's examples/catset controller (v4.17.2), every field of its API in use.
    fn catset() -> Value {
        json!({
            "apiVersion": "metacontroller.k8s.io/v1alpha1",
            "kind": "CompositeController",
            "metadata": {"name": "catset-controller"},
            "spec": {
                "generateSelector": false,
                "resyncPeriodSeconds": 60,
                "parentResource": {
                    "apiVersion": "ctl.enisoc.com/v1", "resource": "catsets",
                    "revisionHistory": {"fieldPaths": ["spec.template"]},
                    "labelSelector": {"matchLabels": {"team": "web"}},
                    "ignoreStatusChanges": true
                },
                "childResources": [
                    {"apiVersion": "v1", "resource": "pods", "updateStrategy": {
                        "method": "RollingRecreate",
                        "statusChecks": {"conditions": [{"type": "Ready", "status": "True", "reason": "Up"}]}
                    }},
                    {"apiVersion": "v1", "resource": "persistentvolumeclaims"}
                ],
                "hooks": {
                    "sync": {"webhook": {"url": "http://catset-controller.metacontroller/sync"}},
                    "finalize": {"webhook": {"url": "http://catset-controller.metacontroller/sync"}},
                    "customize": {"webhook": {"url": "http://catset-controller.metacontroller/customize"}}
                }
            }
        })
    }

    #[test]
    fn a_composite_controller_keeps_its_spec_and_webhooks_under_metascript_dev() {
        let conversion = convert(&catset(), &Options::default()).unwrap().unwrap();
        assert_eq!(conversion.object["kind"], "CompositeController");
        assert_eq!(conversion.object["apiVersion"], "metascript.dev/v1alpha1");
        assert_eq!(conversion.object["spec"], catset()["spec"]);
        assert!(conversion.notes.is_empty(), "{:?}", conversion.notes);

        let mut object = catset();
        object["spec"]["hooks"]["preUpdateChild"] = json!({"webhook": {"url": "http://x/pre"}});
        object["spec"]["childResources"][0]["updateStrategy"]["method"] = json!("Rolling");
        let errors: Vec<String> = convert(&object, &Options::default())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            ["spec.hooks.preUpdateChild: not a CompositeController hook"],
            "hooks are checked before the spec is read"
        );
        object["spec"]["hooks"]
            .as_object_mut()
            .unwrap()
            .remove("preUpdateChild");
        let errors = convert(&object, &Options::default()).unwrap_err();
        assert!(
            errors[0].to_string().starts_with(
                "spec.childResources[0].updateStrategy.method: unknown variant `Rolling`"
            ),
            "{errors:?}"
        );
    }

    #[test]
    fn what_metascript_cannot_run_is_refused_with_the_field() {
        let mut object = service_per_pod();
        object["spec"]["hooks"]["sync"]["version"] = json!("v3");
        object["spec"]["hooks"]["sync"]["webhook"]["authorization"] =
            json!({"secretRef": {"name": "t", "namespace": "n", "key": "k"}});
        object["spec"]["hooks"]["finalize"]["webhook"]["caBundle"] =
            json!({"secretRef": {"name": "ca", "namespace": "n"}});
        object["spec"]["hooks"]["preUpdate"] = json!({"webhook": {"url": "http://x/y"}});
        let errors: Vec<String> = convert(&object, &Options::default())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "spec.hooks.finalize.webhook.caBundle.secretRef: only caBundle.inline (the PEM itself) is supported",
                "spec.hooks.preUpdate: not a DecoratorController hook",
                "spec.hooks.sync.version: \"v3\" is not a hook version (v1 or v2)",
                "spec.hooks.sync.webhook.authorization: a token from a Secret is not supported by metascript's webhooks",
            ]
        );

        let mut object = service_per_pod();
        object["spec"]["attachments"][0]["updateStrategy"]["method"] = json!("RollingInPlace");
        let errors = convert(&object, &Options::default()).unwrap_err();
        assert!(
            errors[0].to_string().starts_with(
                "spec.attachments[0].updateStrategy.method: unknown variant `RollingInPlace`"
            ),
            "{errors:?}"
        );

        let mut object = service_per_pod();
        object["spec"]["resources"][0]["selector"] = json!({"matchLabels": {"a": "b"}});
        let errors = convert(&object, &Options::default()).unwrap_err();
        assert_eq!(
            errors,
            [field(
                "spec.resources[0].selector",
                "not a field metascript knows (it would be lost)"
            )]
        );

        let mut object = service_per_pod();
        object["spec"]["hooks"]["sync"]["webhook"]["timeout"] = json!("ten seconds");
        let errors = convert(&object, &Options::default()).unwrap_err();
        assert!(
            errors[0].to_string().starts_with("hooks: hook sync of service-per-pod: webhook.timeout: \"ten seconds\" is not a duration"),
            "{errors:?}"
        );

        let controller = json!({"apiVersion": METACONTROLLER_API_VERSION, "kind": "ControllerRevision", "metadata": {"name": "c"}, "spec": {}});
        assert!(matches!(
            &convert(&controller, &Options::default()).unwrap_err()[..],
            [ConvertError::UnsupportedKind { kind, .. }] if kind == "ControllerRevision"
        ));
    }
}
