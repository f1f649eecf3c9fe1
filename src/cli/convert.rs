//! `metascript convert`: Metacontroller DecoratorControllers and CompositeControllers rewritten
//! as metascript.dev ones, offline, keeping their webhook hooks. The output is reviewed,
//! committed and applied like any manifest; from then on the hooks can be rewritten as scripts
//! one at a time (`docs/migrating.md` says why this is a command rather than a mode of the operator).

use super::manifests::{self, Document};
use crate::api::{API_VERSION, CredentialSource};
use crate::hooks::{ControllerHooks, HookError, NoConfigMaps, SourceError, endpoint_host_matches};
use crate::kinds::{self, ControllerKind};
use crate::object;
use crate::script::ScriptEngine;
use serde_json::{Map, Value, json};
use std::path::PathBuf;
use std::process::ExitCode;

/// The Metacontroller API this reads.
pub(super) const METACONTROLLER_API_VERSION: &str = "metacontroller.k8s.io/v1alpha1";

#[derive(Debug, clap::Args)]
pub(crate) struct ConvertArgs {
    /// Manifest files or directories, or `-` for standard input (e.g. the output of `kubectl get
    /// decoratorcontrollers.metacontroller.k8s.io,compositecontrollers.metacontroller.k8s.io
    /// -o yaml`). Objects other than Metacontroller
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
    /// `FROM=TO`: a webhook whose URL starts with FROM (followed by `/`, `?` or nothing)
    /// calls TO in its place, e.g. `http://hooks.metacontroller=http://127.0.0.1:8080` to run
    /// against a hook served locally, or an in-cluster name moved to another. A `service`
    /// reference is matched as its URL in Metacontroller's form (`http://NAME.NAMESPACE:80/PATH`)
    /// and, when rewritten, becomes a `url`. Repeatable; the first match applies.
    #[arg(long = "webhook-url", value_name = "FROM=TO", value_parser = parse_rewrite)]
    pub webhook_urls: Vec<UrlRewrite>,
}

/// `--webhook-url FROM=TO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UrlRewrite {
    pub from: String,
    pub to: String,
}

impl UrlRewrite {
    /// `url` with this rewrite applied, if it matches: FROM is a prefix ending at a boundary
    /// (so `http://hooks.ns` takes neither `http://hooks.ns2/sync` nor `http://hooks.ns:8080/`,
    /// whose port would be kept after TO's).
    fn apply(&self, url: &str) -> Option<String> {
        let rest = url.strip_prefix(&self.from)?;
        let boundary = self.from.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?']);
        boundary.then(|| format!("{}{rest}", self.to))
    }
}

fn parse_rewrite(text: &str) -> Result<UrlRewrite, String> {
    match text.split_once('=') {
        Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(UrlRewrite {
            from: from.to_string(),
            to: to.to_string(),
        }),
        _ => Err(format!(
            "{text:?}: expected FROM=TO, both URLs (or URL prefixes)"
        )),
    }
}

/// What every conversion is given.
#[derive(Debug, Default)]
pub(super) struct Options {
    pub service_account_name: Option<String>,
    pub service_account_namespace: Option<String>,
    pub webhook_urls: Vec<UrlRewrite>,
}

/// A converted controller, and what the conversion changed beyond the API group.
#[derive(Debug)]
pub(super) struct Conversion {
    pub object: Value,
    pub notes: Vec<String>,
}

/// Why an object cannot be converted; each names the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum ConvertError {
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

/// Converts one object: `Ok(None)` for anything that is not a Metacontroller controller (it is
/// passed through), every problem at once otherwise.
pub(super) fn convert(
    object: &Value,
    options: &Options,
) -> Result<Option<Conversion>, Vec<ConvertError>> {
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
    let mut rewritten = Vec::new();
    match spec.get_mut("hooks").and_then(Value::as_object_mut) {
        Some(hooks) => {
            for (name, hook) in hooks.iter_mut() {
                let path = format!("spec.hooks.{name}");
                if kind.name().hook(name).is_none() {
                    errors.push(field(path, format!("not a {} hook", kind.name())));
                    continue;
                }
                match convert_hook(
                    &path,
                    hook,
                    &options.webhook_urls,
                    &mut rewritten,
                    &mut notes,
                ) {
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
    rewrite_endpoint_hosts(&mut spec, &rewritten, &mut notes);
    if let Some(name) = &options.service_account_name {
        spec.insert("serviceAccountName".into(), json!(name));
        if let Some(namespace) = &options.service_account_namespace {
            spec.insert("serviceAccountNamespace".into(), json!(namespace));
        }
    }
    // Alerts and scripts written for Metacontroller wait for its `SyncError` Events
    // (docs/migrating.md says how to move to metascript's reasons).
    spec.insert(
        "compatibility".into(),
        json!({"eventReasons": "Metacontroller"}),
    );
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
    let credentials = typed.spec().credential_sources();
    if !credentials.is_empty() {
        // Metacontroller read them with its own account; here the controller's reads them.
        let objects: Vec<String> = credentials
            .iter()
            .map(|source| match source {
                CredentialSource::Secret { namespace, name } => {
                    format!("Secret {namespace}/{name}")
                }
                CredentialSource::ConfigMap { namespace, name } => {
                    format!("ConfigMap {namespace}/{name}")
                }
            })
            .collect();
        notes.push(format!(
            "webhook credentials kept: the operator reads {} with the controller's \
             ServiceAccount (spec.serviceAccountName; the operator's own account without one), \
             which needs get on each",
            objects.join(", ")
        ));
    }
    let mut dropped = Vec::new();
    dropped_fields("spec", &converted["spec"], &written["spec"], &mut dropped);
    if !dropped.is_empty() {
        return Err(dropped
            .into_iter()
            .map(|path| field(path, "not a field metascript knows (it would be lost)"))
            .collect());
    }
    // The same checks the operator makes when it loads the hooks (URL, timeout, CA bundle,
    // credentials), but for the Secrets and ConfigMaps credentials are read from: the operator
    // reads those with the controller's account when it loads.
    match ControllerHooks::load_spec(
        &ScriptEngine::new(),
        object::name(object),
        &typed.spec(),
        &NoConfigMaps,
    ) {
        Ok(_) => {}
        Err(HookError::Source(error))
            if matches!(*error, SourceError::MissingCredential { .. }) => {}
        Err(error) => return Err(vec![ConvertError::Hook(error.to_string())]),
    }
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
    rewrites: &[UrlRewrite],
    rewritten_urls: &mut Vec<(String, String)>,
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
    if webhook.contains_key("url") {
        for ignored in ["service", "path"] {
            if webhook.remove(ignored).is_some() {
                notes.push(format!(
                    "{webhook_path}.{ignored} dropped: url overrides it (as in Metacontroller)"
                ));
            }
        }
    }
    if let Some(url) = webhook_url(&webhook)
        && let Some(rewritten) = rewrites.iter().find_map(|rewrite| rewrite.apply(&url))
    {
        notes.push(format!("{webhook_path}: {url} rewritten to {rewritten}"));
        webhook.remove("service");
        webhook.remove("path");
        webhook.insert("url".into(), json!(rewritten));
        rewritten_urls.push((url, rewritten));
    }
    // Anything else left in the hook is caught when the result is read back.
    hook.insert("webhook".into(), Value::Object(webhook));
    if errors.is_empty() {
        Ok(Value::Object(hook))
    } else {
        Err(errors)
    }
}

/// `--webhook-url` moved some hooks (`rewritten`: each URL before and after) to another host: a
/// `spec.endpointConfigs` entry for the old host would then apply to none of them, and they would
/// be called without its CA bundle and credentials. Such an entry is given the new host instead
/// (or copied to it, when hooks still call the old host too), unless an entry for the new host
/// is already there.
fn rewrite_endpoint_hosts(
    spec: &mut Map<String, Value>,
    rewritten: &[(String, String)],
    notes: &mut Vec<String>,
) {
    if rewritten.is_empty() {
        return;
    }
    let called: Vec<String> = spec
        .get("hooks")
        .and_then(Value::as_object)
        .map(|hooks| {
            hooks
                .values()
                .filter_map(|hook| webhook_url(hook.get("webhook")?.as_object()?))
                .collect()
        })
        .unwrap_or_default();
    let Some(Value::Array(entries)) = spec.get_mut("endpointConfigs") else {
        return;
    };
    let hosts: Vec<String> = entries
        .iter()
        .filter_map(|entry| Some(entry.get("host")?.as_str()?.to_string()))
        .collect();
    let mut result = Vec::with_capacity(entries.len());
    for (index, entry) in std::mem::take(entries).into_iter().enumerate() {
        let Some(host) = entry
            .get("host")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            result.push(entry);
            continue;
        };
        let mut moved_to: Vec<String> = Vec::new();
        for (from, to) in rewritten {
            if !endpoint_host_matches(from, &host)
                || hosts.iter().any(|other| endpoint_host_matches(to, other))
            {
                continue;
            }
            if let Some(authority) = to
                .parse::<ureq::http::Uri>()
                .ok()
                .and_then(|uri| uri.authority().map(|a| a.as_str().to_string()))
                && !moved_to.contains(&authority)
            {
                moved_to.push(authority);
            }
        }
        let kept =
            moved_to.is_empty() || called.iter().any(|url| endpoint_host_matches(url, &host));
        if kept {
            result.push(entry.clone());
        }
        for new_host in &moved_to {
            let mut copy = entry.clone();
            copy["host"] = json!(new_host);
            result.push(copy);
        }
        if !moved_to.is_empty() {
            notes.push(format!(
                "spec.endpointConfigs[{index}].host: {host} {} {} (--webhook-url moved its hooks \
                 there)",
                if kept { "copied to" } else { "rewritten to" },
                moved_to.join(", ")
            ));
        }
    }
    *entries = result;
}

/// The URL a Metacontroller webhook calls: its `url`, or its `service` and `path` in
/// Metacontroller's form (`protocol://name.namespace:port/path`, port 80 and http by default).
/// `None` when it has neither (the checks after the conversion say so).
fn webhook_url(webhook: &Map<String, Value>) -> Option<String> {
    if let Some(url) = webhook.get("url").and_then(Value::as_str) {
        return Some(url.to_string());
    }
    let service = webhook.get("service")?;
    let text = |field: &str| service.get(field).and_then(Value::as_str);
    Some(format!(
        "{}://{}.{}:{}{}",
        text("protocol").unwrap_or("http"),
        text("name")?,
        text("namespace")?,
        service.get("port").and_then(Value::as_i64).unwrap_or(80),
        webhook.get("path").and_then(Value::as_str).unwrap_or("")
    ))
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
pub(super) fn run(args: ConvertArgs) -> ExitCode {
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
        webhook_urls: args.webhook_urls,
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
                ..Options::default()
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
        expected["compatibility"] = json!({"eventReasons": "Metacontroller"});
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
        let mut expected = catset()["spec"].clone();
        expected["compatibility"] = json!({"eventReasons": "Metacontroller"});
        assert_eq!(conversion.object["spec"], expected);
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

    /// Metacontroller's `examples/webhook-auth` controller (a DecoratorController here, as in
    /// its `decorator_with_auth` test): every credential field comes over as it is.
    #[test]
    fn webhook_credentials_and_endpoint_configs_are_kept() {
        let endpoint_configs = json!([{
            "host": "webhook-auth-controller.metacontroller",
            "caBundle": {"configMapRef": {"name": "webhook-auth-ca", "namespace": "metacontroller", "key": "ca.crt"}},
            "authorization": {"type": "Bearer", "secretRef": {"name": "webhook-auth-token", "namespace": "metacontroller", "key": "token"}},
            "clientTLS": {"secretRef": {"name": "webhook-auth-client", "namespace": "metacontroller"}, "certKey": "tls.crt", "privateKeyKey": "tls.key"}
        }]);
        let mut object = service_per_pod();
        object["spec"]["endpointConfigs"] = endpoint_configs.clone();
        object["spec"]["hooks"] = json!({
            "sync": {"webhook": {"url": "https://webhook-auth-controller.metacontroller/sync"}},
            "finalize": {"webhook": {
                "url": "https://hooks.other/finalize",
                "caBundle": {"secretRef": {"name": "other-ca", "namespace": "metacontroller"}},
                "basicAuth": {"secretRef": {"name": "other-basic", "namespace": "metacontroller"}, "usernameKey": "user"}
            }}
        });
        let conversion = convert(&object, &Options::default()).unwrap().unwrap();
        let spec = &conversion.object["spec"];
        assert_eq!(spec["endpointConfigs"], endpoint_configs);
        assert_eq!(spec["hooks"], object["spec"]["hooks"]);
        assert_eq!(
            conversion.notes,
            [
                "webhook credentials kept: the operator reads Secret metacontroller/other-basic, \
              Secret metacontroller/other-ca, Secret metacontroller/webhook-auth-client, Secret \
              metacontroller/webhook-auth-token, ConfigMap metacontroller/webhook-auth-ca with \
              the controller's ServiceAccount (spec.serviceAccountName; the operator's own \
              account without one), which needs get on each"
            ]
        );
    }

    /// `examples/webhook-auth` served on loopback: its `endpointConfigs` entry must follow its
    /// hooks to the new host, or they are called without its CA bundle, token and client
    /// certificate (and the TLS handshake fails).
    #[test]
    fn an_endpoint_config_follows_its_hooks_to_the_rewritten_host() {
        let entry = json!({
            "host": "webhook-auth-controller.metacontroller",
            "authorization": {"secretRef": {"name": "token", "namespace": "metacontroller", "key": "token"}}
        });
        let mut object = catset();
        object["spec"]["endpointConfigs"] = json!([entry.clone()]);
        object["spec"]["hooks"] = json!({
            "sync": {"webhook": {"url": "https://webhook-auth-controller.metacontroller/sync"}},
            "customize": {"webhook": {"url": "https://webhook-auth-controller.metacontroller/customize"}}
        });
        let options = |rewrite: &str| Options {
            webhook_urls: vec![parse_rewrite(rewrite).unwrap()],
            ..Options::default()
        };
        let moved = convert(
            &object,
            &options("https://webhook-auth-controller.metacontroller=https://127.0.0.1:8443"),
        )
        .unwrap()
        .unwrap();
        let mut expected = entry.clone();
        expected["host"] = json!("127.0.0.1:8443");
        assert_eq!(moved.object["spec"]["endpointConfigs"], json!([expected]));
        assert!(
            moved.notes.contains(
                &"spec.endpointConfigs[0].host: webhook-auth-controller.metacontroller rewritten \
                  to 127.0.0.1:8443 (--webhook-url moved its hooks there)"
                    .to_string()
            ),
            "{:?}",
            moved.notes
        );

        // Only sync moved: customize still needs the entry for the old host.
        let one = convert(
            &object,
            &options(
                "https://webhook-auth-controller.metacontroller/sync=https://localhost:8443/sync",
            ),
        )
        .unwrap()
        .unwrap();
        expected["host"] = json!("localhost:8443");
        assert_eq!(
            one.object["spec"]["endpointConfigs"],
            json!([entry.clone(), expected])
        );

        // Moved to a host that has an entry of its own: that one applies, nothing is copied.
        let own = json!({"host": "127.0.0.1:8443"});
        object["spec"]["endpointConfigs"] = json!([entry.clone(), own.clone()]);
        let kept = convert(
            &object,
            &options("https://webhook-auth-controller.metacontroller=https://127.0.0.1:8443"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(kept.object["spec"]["endpointConfigs"], json!([entry, own]));
    }

    /// Metacontroller's examples call `http://<name>.metacontroller/...`; run beside a local
    /// plane, the same hooks are served on loopback.
    #[test]
    fn webhook_urls_are_rewritten_by_prefix_and_services_become_urls() {
        let rewrites = vec![
            parse_rewrite("http://service-per-pod.metacontroller=http://127.0.0.1:8080").unwrap(),
            parse_rewrite("http://service-per-pod.metacontroller:8080/=https://hooks.example/")
                .unwrap(),
        ];
        let options = Options {
            webhook_urls: rewrites,
            ..Options::default()
        };
        let conversion = convert(&service_per_pod(), &options).unwrap().unwrap();
        let hooks = &conversion.object["spec"]["hooks"];
        assert_eq!(
            hooks["sync"]["webhook"],
            json!({"url": "http://127.0.0.1:8080/sync-service-per-pod", "timeout": "10s", "etag": {"enabled": true}})
        );
        // The service reference, in Metacontroller's form with its port, matched the second.
        assert_eq!(
            hooks["finalize"]["webhook"],
            json!({"url": "https://hooks.example/finalize"})
        );
        assert_eq!(
            conversion.notes,
            [
                "spec.hooks.finalize.webhook: http://service-per-pod.metacontroller:8080/finalize rewritten to https://hooks.example/finalize",
                "spec.hooks.sync.webhook: http://service-per-pod.metacontroller/sync-service-per-pod rewritten to http://127.0.0.1:8080/sync-service-per-pod",
            ]
        );

        // A prefix matches up to a boundary only, and what matches nothing is kept as it is.
        let rewrite = parse_rewrite("http://hooks.ns=http://127.0.0.1:1").unwrap();
        assert_eq!(rewrite.apply("http://hooks.ns2/sync"), None);
        assert_eq!(
            rewrite.apply("http://hooks.ns:80/sync"),
            None,
            "say the port in FROM"
        );
        assert_eq!(
            rewrite.apply("http://hooks.ns").as_deref(),
            Some("http://127.0.0.1:1")
        );
        let untouched = convert(
            &service_per_pod(),
            &Options {
                webhook_urls: vec![rewrite],
                ..Options::default()
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            untouched.object["spec"]["hooks"]["finalize"]["webhook"]["service"]["name"],
            "service-per-pod"
        );
        assert!(untouched.notes.is_empty());
        for bad in ["no-equals", "=http://x", "http://x="] {
            assert!(parse_rewrite(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn what_metascript_cannot_run_is_refused_with_the_field() {
        let mut object = service_per_pod();
        object["spec"]["hooks"]["sync"]["version"] = json!("v3");
        object["spec"]["hooks"]["preUpdate"] = json!({"webhook": {"url": "http://x/y"}});
        let errors: Vec<String> = convert(&object, &Options::default())
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "spec.hooks.preUpdate: not a DecoratorController hook",
                "spec.hooks.sync.version: \"v3\" is not a hook version (v1 or v2)",
            ]
        );

        // Credentials are kept, but a mistake in them is still a mistake.
        let mut object = service_per_pod();
        object["spec"]["hooks"]["sync"]["webhook"]["authorization"] =
            json!({"type": "Basic", "secretRef": {"name": "t", "namespace": "n", "key": "k"}});
        let errors = convert(&object, &Options::default()).unwrap_err();
        assert!(
            errors[0]
                .to_string()
                .ends_with("webhook.authorization.type: Basic authentication goes in basicAuth"),
            "{errors:?}"
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
