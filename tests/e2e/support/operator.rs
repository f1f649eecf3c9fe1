//! One operator for the test binary, running on its own runtime against the shared plane, with
//! the metascript CRDs installed. Tests isolate themselves with uniquely named controllers whose
//! selectors match only their own objects.

use super::{eventually, plane};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use metascript::resources::StaticResolver;
use metascript::runtime::{ControllerId, Operator, OperatorConfig};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

pub struct TestOperator {
    pub operator: Operator,
    /// The operator's `--scripts-dir`.
    pub scripts_dir: PathBuf,
}

/// A controller carrying this label is served by an operator a test started itself (with
/// `--controller-selector`), never by the shared one.
pub const OWN_OPERATOR_LABEL: &str = "metascript.test/own-operator";

static OPERATOR: OnceLock<Result<TestOperator, String>> = OnceLock::new();

/// The operator shared by every test of this binary, started on first use.
pub async fn operator() -> &'static TestOperator {
    let kubeconfig = plane().await.kubeconfig();
    match OPERATOR.get_or_init(|| start(kubeconfig, "")) {
        Ok(operator) => operator,
        Err(message) => panic!("{message}"),
    }
}

/// Starts an operator for the life of the test binary; `name` tells its scripts directory from
/// that of another plane's operator.
pub(super) fn start(
    kubeconfig: kube::config::Kubeconfig,
    name: &'static str,
) -> Result<TestOperator, String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("test-operator".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("operator runtime");
            let started = runtime.block_on(async move {
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let client = kube::Client::try_from(config.clone()).map_err(|e| e.to_string())?;
                install_crds(&client).await?;
                let scripts_dir = std::env::temp_dir().join(format!(
                    "metascript-test-scripts{name}-{}",
                    std::process::id()
                ));
                std::fs::create_dir_all(&scripts_dir).map_err(|e| e.to_string())?;
                let kube = config;
                let config = OperatorConfig {
                    workers: 4,
                    scripts_dir: Some(scripts_dir.clone()),
                    status_interval: Duration::from_millis(200),
                    // Credential rotation tests wait on its effect, not on this.
                    credentials_poll_interval: Duration::from_millis(300),
                    controller_selector: Some(format!("!{OWN_OPERATOR_LABEL}")),
                    // The tests' webhook servers listen on loopback, which only an entry
                    // naming it opens.
                    webhook_allow: vec!["127.0.0.0/8".parse().expect("an entry")],
                    ..OperatorConfig::default()
                };
                let operator = Operator::start(kube, config, &metascript::kinds::runtime())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(TestOperator {
                    operator,
                    scripts_dir,
                })
            });
            let _ = sender.send(started);
            // Keep the operator's tasks running for the life of the test binary.
            runtime.block_on(std::future::pending::<()>());
        })
        .map_err(|e| e.to_string())?;
    receiver.recv().map_err(|e| e.to_string())?
}

/// The CRDs, and the namespace an operator keeps its rollout snapshots in (its own, as
/// outside a pod: `metascript-system`).
pub async fn install_crds(client: &kube::Client) -> Result<(), String> {
    metascript::testing::install_crds(client)
        .await
        .map_err(|e| e.to_string())?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": metascript::runtime::DEFAULT_NAMESPACE}
    }))
    .expect("a namespace");
    match namespaces.create(&Default::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error.to_string()),
    }
}

/// An API for any object of the types the tests use, from its apiVersion and kind.
pub fn api_for(client: &kube::Client, object: &Value) -> Api<DynamicObject> {
    let api_version = metascript::object::api_version(object);
    let kind = metascript::object::kind(object);
    let resource = match metascript::kinds::of(object) {
        Some(controller_kind) => {
            metascript::resources::ResourceType::from(metascript::resources::TypeInfo {
                api_version: api_version.into(),
                kind: kind.into(),
                plural: controller_kind.name().plural().into(),
                namespaced: false,
                has_status: true,
            })
        }
        None => StaticResolver::with_builtins()
            .find_kind(api_version, kind)
            .unwrap_or_else(|| panic!("no API known for {kind}.{api_version}")),
    };
    match metascript::object::namespace(object) {
        Some(namespace) if resource.namespaced => {
            Api::namespaced_with(client.clone(), namespace, &resource.api_resource())
        }
        _ => Api::all_with(client.clone(), &resource.api_resource()),
    }
}

/// Creates or updates an object with server-side apply, as a user with kubectl would.
pub async fn apply(client: &kube::Client, object: &Value) {
    let name = metascript::object::name(object);
    api_for(client, object)
        .patch(
            name,
            &PatchParams::apply("test-user").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "applying {}: {e}",
                metascript::object::ObjectKey::of(object)
            )
        });
}

/// [`apply`], returning the API server's refusal (admission's included) instead of panicking.
pub async fn try_apply(client: &kube::Client, object: &Value) -> Result<(), String> {
    api_for(client, object)
        .patch(
            metascript::object::name(object),
            &PatchParams::apply("test-user").force(),
            &Patch::Apply(object),
        )
        .await
        .map(drop)
        .map_err(|error| error.to_string())
}

/// Reads an object back as JSON, `None` when it does not exist.
pub async fn get(client: &kube::Client, like: &Value) -> Option<Value> {
    let name = metascript::object::name(like);
    api_for(client, like)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {}: {e}", metascript::object::ObjectKey::of(like)))
        .map(|o| serde_json::to_value(o).expect("objects serialize"))
}

/// Waits until the read object satisfies `check`, returning it.
pub async fn wait_for(
    client: &kube::Client,
    like: &Value,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, || async {
        get(client, like).await.filter(|o| check(o))
    })
    .await
}

/// Waits until the object has a condition of `kind` with `status`, returning that condition.
pub async fn wait_for_condition(
    client: &kube::Client,
    like: &Value,
    kind: &str,
    status: &str,
) -> Value {
    let condition = |object: &Value| {
        object["status"]["conditions"]
            .as_array()
            .and_then(|conditions| conditions.iter().find(|c| c["type"] == kind))
            .filter(|c| c["status"] == status)
            .cloned()
    };
    let what = format!("a {kind}={status} condition");
    let object = wait_for(client, like, &what, |o| condition(o).is_some()).await;
    condition(&object).expect("the condition just seen")
}

/// Waits for an Event with `reason` (in `namespace`, or anywhere) that `matches`, and returns it.
pub async fn wait_for_event(
    client: &kube::Client,
    namespace: Option<&str>,
    reason: &str,
    matches: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) -> k8s_openapi::api::events::v1::Event {
    let events: Api<k8s_openapi::api::events::v1::Event> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    eventually(&format!("a {reason} Event"), || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason) && matches(e))
    })
    .await
}

/// The name of the object an Event is about.
pub fn regarding_name(event: &k8s_openapi::api::events::v1::Event) -> Option<&str> {
    event.regarding.as_ref()?.name.as_deref()
}

/// Waits until the controller has had nothing to do for two seconds; returns its (writes,
/// syncs). Polled: "nothing happens" has no event to wait for.
pub async fn quiet(controller: &ControllerId) -> (u64, u64) {
    quiet_of(&operator().await.operator, controller).await
}

/// [`quiet`] for a controller of the given operator.
pub async fn quiet_of(operator: &Operator, controller: &ControllerId) -> (u64, u64) {
    let counts = || {
        let metrics = operator.metrics();
        (metrics.writes_of(controller), metrics.syncs_of(controller))
    };
    let mut last = (u64::MAX, u64::MAX);
    let mut still = 0;
    for _ in 0..600 {
        let now = counts();
        if now == last && operator.pending(controller) == 0 {
            still += 1;
            if still == 4 {
                return now;
            }
        } else {
            still = 0;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("{controller} never settled (writes, syncs) = {last:?}");
}
