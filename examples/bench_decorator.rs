//! How fast the operator converges many targets: the service-per-pod example (its own controller
//! manifest and script, finalize hook included) over N StatefulSets of one replica each, on a
//! fresh local control plane, with the operator running in this process.
//!
//! ```sh
//! hack/control-plane/build.sh    # once; cached afterwards
//! cargo run --release --example bench_decorator -- --targets 1000 --language rhai
//! cargo run --release --example bench_decorator -- --targets 1000 --hook webhook
//! cargo run --release --example bench_decorator -- --targets 1000 --reads
//! cargo run --release --example bench_decorator -- --targets 1000 --account
//! cargo run --release --example bench_decorator -- --targets 1000 --customize
//! ```
//!
//! `--hook webhook` runs the same controller with its hooks as webhooks, answered over loopback
//! by a server in this process (`metascript::testing::service_per_pod`, the example written as a
//! webhook service would write it), so script and webhook compare end to end on the same plane.
//!
//! Phases, each timed from the request that starts it until a watch sees the end state:
//! 1. the yardstick, before the operator starts: a plain client makes exactly the writes the
//!    operator must make (one Service apply and one StatefulSet patch per target, 16 targets in
//!    flight) to N StatefulSets the controller does not select; the convergence of phase 3 is
//!    reported as a multiple of it;
//! 2. the plain client creates the N target StatefulSets (the operator is not running);
//! 3. the operator starts and the controller is applied: until every StatefulSet has its Service
//!    and carries the marker label;
//! 4. a resync of the converged cluster: it must make zero write requests; it skips every
//!    target whose last sync was pure and saw what the cache holds now (all of them, unless
//!    the controller-manager moved a StatefulSet's status since), or with `--full-resync`
//!    syncs every target again;
//! 5. the ConfigMap holding the script is edited to set another label value (with webhooks: the
//!    controller is pointed at a new path answering that value): until every StatefulSet shows it;
//! 6. N more StatefulSets created while the operator runs: until each has its Service and label.
//!
//! `--reads` (scripts only) measures the cost of dependency tracking: the controller also
//! declares `spec.reads: [{apiVersion: v1, resource: namespaces}]`, and the script makes one
//! tracked read per call, `get("v1", "Namespace", "", ns)`, copying the Namespace's
//! `bench.metascript.dev/tier` label (or `none`) into the target's
//! `bench.metascript.dev/namespace-tier` label, so each target holds one dependency. One more
//! phase runs after 5: the bench Namespace is relabelled, until every target shows the new value
//! (a fan-out of N re-syncs through the dependency index); it must take exactly N syncs.
//!
//! `--account` measures the cost of least privilege: the controller names a ServiceAccount
//! (`serviceAccountName`) that a Role in the bench namespace lets do exactly what the example
//! needs, so its writes are impersonated and every object its hooks are handed is checked
//! against what the account may read (SubjectAccessReviews, cached). The number of reviews
//! sent is reported; compare with a run without `--account` at the same load.
//!
//! `--otlp-endpoint URL` (and `--trace-sample-ratio R`) traces the operator's work as `metascript
//! run` does with those flags, to an OTLP/HTTP collector (`hack/tools/build-otlp-receiver.sh`
//! builds the receiver the tests use): compare with a run without them for what tracing costs.
//!
//! `--customize` (scripts only) measures the customize hook and the cache of its answers: the
//! controller also has a `customize` script (in the sync's language) naming one related
//! ConfigMap in the target's namespace, so every sync request carries `related`. The answer is
//! kept per target until the target or the controller changes: each phase reports customize
//! calls beside syncs. Converge needs one call per target; a resync needs none (with
//! `--full-resync` every target syncs again, and each sync's customize answer comes from the
//! cache: without it there would be one call per sync); a script edit changes the controller,
//! so every target's answer is asked again. Compare its rows with a run without `--customize`
//! at the same load for what customizing costs.
//!
//! The control plane runs as separate processes, so the operator's peak RSS is this process's
//! (which also holds the benchmark's own watches); the apiserver's and etcd's are shown for
//! context.

mod common;

use common::apiserver::ApiserverCounts;
use common::stateful_sets::{CREATE_CONCURRENCY, create_stateful_sets};
use common::{
    Counter, CpuClock, PHASE_TIMEOUT, create_namespace, idle_cpu, init_tracing, memory, per_item,
    ready, secs, settle,
};
use std::time::{Duration, Instant};

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::networking::v1::IPAddress;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use metascript::runtime::{ControllerId, Operator, OperatorConfig};
use metascript::testing::{ControlPlane, HookServer, Reply, install_crds, service_per_pod};
use serde_json::{Value, json};

const MARKER: &str = "metascript.dev/service-per-pod";
/// The label of the yardstick's Services: like the operator's, under another name, so the
/// operator never takes them for its own.
const YARDSTICK_LABEL: &str = "bench.example/decorator";
/// With `--reads`: the Namespace label the script reads, and the target label it copies it to.
const NAMESPACE_LABEL: &str = "bench.metascript.dev/tier";
const TIER_LABEL: &str = "bench.metascript.dev/namespace-tier";
const DECORATOR_LABEL: &str = "metascript.dev/decorator";

struct Args {
    targets: usize,
    /// `script` or `webhook`.
    hook: String,
    language: String,
    workers: usize,
    /// Skip phase 6 (doubles the cluster, so it roughly doubles the run time).
    skip_live: bool,
    /// One tracked `get` of the target's Namespace per call, and the Namespace fan-out phase.
    reads: bool,
    account: bool,
    /// Resyncs run every hook (`metascript run --full-resync`).
    full_resync: bool,
    /// A customize hook naming one related ConfigMap per target.
    customize: bool,
    /// Traces to this OTLP/HTTP collector (`metascript run --otlp-endpoint`).
    otlp_endpoint: Option<String>,
    trace_sample_ratio: f64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        targets: 1000,
        hook: "script".into(),
        language: "rhai".into(),
        workers: 16,
        skip_live: false,
        reads: false,
        account: false,
        full_resync: false,
        customize: false,
        otlp_endpoint: None,
        trace_sample_ratio: 1.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))
        };
        match arg.as_str() {
            "--targets" => args.targets = value("--targets")?.parse()?,
            "--hook" => args.hook = value("--hook")?,
            "--language" => args.language = value("--language")?,
            "--workers" => args.workers = value("--workers")?.parse()?,
            "--skip-live" => args.skip_live = true,
            "--reads" => args.reads = true,
            "--account" => args.account = true,
            "--full-resync" => args.full_resync = true,
            "--customize" => args.customize = true,
            "--otlp-endpoint" => args.otlp_endpoint = Some(value("--otlp-endpoint")?),
            "--trace-sample-ratio" => {
                args.trace_sample_ratio = value("--trace-sample-ratio")?.parse()?
            }
            "-h" | "--help" => {
                println!(
                    "usage: bench_decorator [--targets N] [--hook script|webhook] [--language rhai|lua] [--workers N] [--skip-live] [--reads] [--account] [--full-resync] [--customize] [--otlp-endpoint URL [--trace-sample-ratio R]]"
                );
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other} (try --help)"),
        }
    }
    anyhow::ensure!(
        matches!(args.language.as_str(), "rhai" | "lua"),
        "--language must be rhai or lua"
    );
    anyhow::ensure!(
        matches!(args.hook.as_str(), "script" | "webhook"),
        "--hook must be script or webhook"
    );
    anyhow::ensure!(args.targets > 0, "--targets must be at least 1");
    anyhow::ensure!(
        !(args.reads && args.hook == "webhook"),
        "--reads needs script hooks (a webhook reads nothing through the operator)"
    );
    anyhow::ensure!(
        !(args.customize && args.hook == "webhook"),
        "--customize runs a customize script; it needs script hooks"
    );
    anyhow::ensure!(
        !(args.reads && args.account),
        "--reads and --account measure different costs; give one"
    );
    Ok(args)
}

fn script(language: &str) -> &'static str {
    match language {
        "rhai" => include_str!("../scripts/service-per-pod/sync.rhai"),
        _ => include_str!("../scripts/service-per-pod/sync.lua"),
    }
}

/// `text` with `from`, which must occur exactly once, replaced by `to`.
fn replace_once(text: &str, from: &str, to: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        text.matches(from).count() == 1,
        "the service-per-pod script no longer contains `{from}` exactly once; update the benchmark"
    );
    Ok(text.replace(from, to))
}

/// The sync script the controller runs: the example's, or with `reads` the example plus one
/// tracked read of the target's Namespace, whose label it copies into the target's labels.
fn sync_script(language: &str, reads: bool) -> anyhow::Result<String> {
    let original = script(language);
    if !reads {
        return Ok(original.to_string());
    }
    let (at, read, from, to) = match language {
        "rhai" => (
            "let ns = namespace(sts);\n",
            format!(
                "// bench --reads: one tracked read per call, so the target depends on its Namespace.\n\
                 let tier = label(get(\"v1\", \"Namespace\", \"\", ns), \"{NAMESPACE_LABEL}\");\n\
                 if tier == () {{ tier = \"none\"; }}\n"
            ),
            format!(r#""{MARKER}": "true""#),
            format!(r#""{MARKER}": "true", "{TIER_LABEL}": tier"#),
        ),
        _ => (
            "local ns = namespace(sts)\n",
            format!(
                "-- bench --reads: one tracked read per call, so the target depends on its Namespace.\n\
                 local tier = label(get(\"v1\", \"Namespace\", \"\", ns), \"{NAMESPACE_LABEL}\") or \"none\"\n"
            ),
            r#"[MARKER] = "true""#.to_string(),
            format!(r#"[MARKER] = "true", ["{TIER_LABEL}"] = tier"#),
        ),
    };
    let with_read = replace_once(original, at, &format!("{at}{read}"))?;
    replace_once(&with_read, &from, &to)
}

/// The script with the marker label's value changed, as an engineer's edit would.
fn edited_script(language: &str, reads: bool, value: &str) -> anyhow::Result<String> {
    let original = sync_script(language, reads)?;
    let (from, to) = match language {
        "rhai" => (
            format!(r#""{MARKER}": "true""#),
            format!(r#""{MARKER}": "{value}""#),
        ),
        _ => (
            r#"[MARKER] = "true""#.to_string(),
            format!(r#"[MARKER] = "{value}""#),
        ),
    };
    replace_once(&original, &from, &to)
}

/// The example's own controller manifest (`scripts/service-per-pod/controller.<lang>.yaml`,
/// finalize hook included), so the figures are for the example as shipped.
struct Example {
    controller: Value,
    name: String,
    /// Where the manifest's configMapRef points: namespace, name, key.
    config_map: (String, String, String),
}

impl Example {
    /// With `reads`, the controller also declares `spec.reads: [{apiVersion: v1, resource:
    /// namespaces}]`.
    fn load(language: &str, reads: bool) -> anyhow::Result<Example> {
        let yaml = match language {
            "rhai" => include_str!("../scripts/service-per-pod/controller.rhai.yaml"),
            _ => include_str!("../scripts/service-per-pod/controller.lua.yaml"),
        };
        let mut controller: Value = serde_saphyr::from_str(yaml)?;
        if reads {
            controller["spec"]["reads"] = json!([{"apiVersion": "v1", "resource": "namespaces"}]);
        }
        let name = controller["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("the example controller has no name"))?
            .to_string();
        let reference = &controller["spec"]["hooks"]["sync"]["script"]["configMapRef"];
        let field = |key: &str| {
            reference[key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("the example's sync hook has no configMapRef.{key}"))
        };
        let config_map = (field("namespace")?, field("name")?, field("key")?);
        Ok(Example {
            controller,
            name,
            config_map,
        })
    }

    fn config_map(&self, code: &str) -> ConfigMap {
        let (namespace, name, key) = &self.config_map;
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {key: code}
        }))
        .expect("a valid ConfigMap")
    }

    fn config_maps(&self, client: &kube::Client) -> Api<ConfigMap> {
        Api::namespaced(client.clone(), &self.config_map.0)
    }

    /// The controller with both hooks (sync and finalize) answered by a webhook instead.
    fn with_webhook(&self, url: &str) -> Value {
        let mut controller = self.controller.clone();
        let hook = json!({"webhook": {"url": url}});
        controller["spec"]["hooks"] = json!({"sync": hook, "finalize": hook});
        controller
    }
}

/// With `--customize`: the ConfigMap each target's customize answer names, in its namespace.
const SETTINGS: &str = "bench-settings";

/// The customize hook of `--customize`: one related ConfigMap by name, in the target's
/// namespace (a rule without `namespace`).
fn customize_hook(language: &str) -> Value {
    let code = match language {
        "rhai" => format!(
            r#"#{{ relatedResources: [#{{ apiVersion: "v1", resource: "configmaps", names: ["{SETTINGS}"] }}] }}"#
        ),
        _ => format!(
            r#"return {{ relatedResources = {{ {{ apiVersion = "v1", resource = "configmaps", names = {{ "{SETTINGS}" }} }} }} }}"#
        ),
    };
    json!({"script": {"language": language, "inline": code}})
}

/// The ServiceAccount of `--account`.
const BENCH_ACCOUNT: &str = "service-per-pod";

/// The account `--account` names, with a Role letting it do what the example does to its
/// targets in `namespace`, and read what its hooks are handed (docs/security.md).
async fn create_account(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let params = PatchParams::apply("bench").force();
    let objects = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": BENCH_ACCOUNT, "namespace": namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": BENCH_ACCOUNT, "namespace": namespace},
        "rules": [
            {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": ["apps"], "resources": ["statefulsets/finalizers"], "verbs": ["update"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": BENCH_ACCOUNT, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": BENCH_ACCOUNT},
               "subjects": [{"kind": "ServiceAccount", "name": BENCH_ACCOUNT, "namespace": namespace}]}),
    ];
    for object in objects {
        let (api_version, kind) = (
            object["apiVersion"].as_str().unwrap_or_default(),
            object["kind"].as_str().unwrap_or_default(),
        );
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let plural = format!("{}s", kind.to_lowercase());
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, kind),
            &plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        api.patch(name, &params, &Patch::Apply(&object)).await?;
    }
    Ok(())
}

/// The example as a webhook service on loopback: `/sync` sets the marker label to `true`, as the
/// script does, and `/v2/sync` to `v2`, as the edited script does.
fn start_webhook() -> anyhow::Result<HookServer> {
    Ok(HookServer::start_unrecorded(|path, request| {
        let marker = if path.starts_with("/v2/") {
            "v2"
        } else {
            "true"
        };
        match service_per_pod(request, marker) {
            Ok(response) => Reply::json(&response),
            Err(message) => Reply::status(500, message),
        }
    })?)
}

fn services_counter(client: &kube::Client, namespace: &str, controller: &str) -> Counter {
    let controller = controller.to_string();
    Counter::start(
        Api::<PartialObjectMeta<Service>>::namespaced(client.clone(), namespace),
        move |s| s.labels().get(DECORATOR_LABEL) == Some(&controller),
    )
}

fn marker_counter(client: &kube::Client, namespace: &str, value: &'static str) -> Counter {
    label_counter(client, namespace, MARKER, value)
}

/// Counts the StatefulSets of a namespace whose label `key` is `value`.
fn label_counter(
    client: &kube::Client,
    namespace: &str,
    key: &'static str,
    value: &'static str,
) -> Counter {
    Counter::start(
        Api::<PartialObjectMeta<StatefulSet>>::namespaced(client.clone(), namespace),
        move |s| s.labels().get(key).map(String::as_str) == Some(value),
    )
}

/// The operator's `metascript_dependencies` gauge, summed over controllers (None if unset).
fn dependencies(operator: &Operator) -> Option<i64> {
    metric_sum(operator, "metascript_dependencies{", "")
}

/// Calls of the customize hook so far (answers taken from the cache are not calls).
fn customize_calls(operator: &Operator) -> i64 {
    metric_sum(
        operator,
        "metascript_hook_duration_seconds_count{",
        r#"hook="customize""#,
    )
    .unwrap_or(0)
}

/// The time the controller's output schema checks took, and its share of the operator's CPU
/// (`docs/performance.md`, "Output schema check").
fn output_check(operator: &Operator, id: &ControllerId, operator_cpu: f64) -> String {
    let seconds = operator.metrics().output_check_seconds_of(id);
    let share = match operator_cpu > 0.0 {
        true => format!(" ({:.1}%)", 100.0 * seconds / operator_cpu),
        false => String::new(),
    };
    format!(", of which output schema checks {seconds:.3} s{share}")
}

/// The sum of the operator's samples whose line starts with `prefix` and contains `label`
/// (None if there are none).
fn metric_sum(operator: &Operator, prefix: &str, label: &str) -> Option<i64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &operator.metrics().registry()).ok()?;
    let values: Vec<i64> = text
        .lines()
        .filter(|line| line.starts_with(prefix) && line.contains(label))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The yardstick: a plain client making exactly the writes the operator must make for the
/// example, per target one Service applied (owned by its StatefulSet) and one patch of the
/// StatefulSet setting the marker label and the finalizer, {CREATE_CONCURRENCY} targets in flight.
/// Returns when the first write was sent: the caller times until its watches see them all.
async fn minimal_writes(
    client: &kube::Client,
    namespace: &str,
    prefix: &str,
    n: usize,
    controller: &str,
) -> anyhow::Result<Instant> {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let names: Vec<(String, String)> = statefulsets
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|s| s.name_any().starts_with(prefix))
        .map(|s| (s.name_any(), s.uid().unwrap_or_default()))
        .collect();
    anyhow::ensure!(
        names.len() == n,
        "expected {n} yardstick StatefulSets, found {}",
        names.len()
    );
    let manager = PatchParams::apply("yardstick").force();
    let started = Instant::now();
    futures::stream::iter(names)
        .map(|(name, uid)| {
            let (statefulsets, services, manager) = (statefulsets.clone(), services.clone(), manager.clone());
            async move {
                let service = json!({
                    "apiVersion": "v1", "kind": "Service",
                    "metadata": {
                        "name": format!("{name}-0"), "namespace": namespace,
                        "labels": {YARDSTICK_LABEL: controller},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
                    },
                    "spec": {"selector": {"statefulset.kubernetes.io/pod-name": format!("{name}-0")}, "ports": [{"port": 80, "targetPort": 8080}]}
                });
                services.patch(&format!("{name}-0"), &manager, &Patch::Apply(&service)).await?;
                let target = json!({"metadata": {"labels": {MARKER: "true"}, "finalizers": [format!("bench.example/decorator-{controller}")]}});
                statefulsets
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&target))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(started)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    // Traced as `metascript run --otlp-endpoint` traces (kept until the end: dropping it sends
    // what is still batched).
    let _exporter = match &args.otlp_endpoint {
        Some(endpoint) => {
            let traces = metascript::cli::logging::Traces {
                endpoint: endpoint.clone(),
                sample_ratio: args.trace_sample_ratio,
                instance: None,
            };
            metascript::cli::logging::init(common::LOG_FILTER, false, Some(traces))?
        }
        None => {
            init_tracing();
            None
        }
    };
    let n = args.targets;
    let language = args.language.as_str();
    let example = Example::load(language, args.reads)?;
    let webhook = match args.hook.as_str() {
        "webhook" => Some(start_webhook()?),
        _ => None,
    };
    // What answers the hooks, as the figures are labelled.
    let hooks = match &webhook {
        Some(_) => "webhook".to_string(),
        None if args.reads => format!("{language} + 1 tracked get per call (--reads)"),
        None => language.to_string(),
    };
    let hooks = match args.account {
        true => format!(
            "{hooks}, as ServiceAccount {namespace}/{BENCH_ACCOUNT} (--account)",
            namespace = "bench"
        ),
        false => hooks,
    };
    let mut controller = match &webhook {
        Some(server) => example.with_webhook(&server.url("/sync")),
        None => example.controller.clone(),
    };
    if args.account {
        controller["spec"]["serviceAccountName"] = BENCH_ACCOUNT.into();
        controller["spec"]["serviceAccountNamespace"] = "bench".into();
    }
    if args.customize {
        controller["spec"]["hooks"]["customize"] = customize_hook(language);
    }
    let mut rows: Vec<(String, String, String)> = Vec::new();
    let mut row = |what: &str, value: String, note: String| {
        println!("  {what}: {value} {note}");
        rows.push((what.to_string(), value, note));
    };

    // Other work on the machine skews every figure; the load average says how much there was.
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "bench_decorator: {n} targets, {hooks}, {} workers; load average {}",
        args.workers,
        load().trim()
    );
    // Awaited on the main thread (not spawned): the plane's processes die with the thread that
    // started them.
    let started = Instant::now();
    let plane = ControlPlane::start().await?;
    println!("control plane up in {}", secs(started.elapsed()));
    let client = plane.client().await?;
    install_crds(&client).await?;
    let namespace = "bench";
    create_namespace(&client, namespace).await?;
    if args.account {
        create_account(&client, namespace).await?;
    }
    if args.customize {
        Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": SETTINGS, "namespace": namespace},
                    "data": {"tier": "gold"}
                }))?,
            )
            .await?;
    }
    if webhook.is_none() {
        create_namespace(&client, &example.config_map.0).await?;
        example
            .config_maps(&client)
            .create(
                &PostParams::default(),
                &example.config_map(&sync_script(language, args.reads)?),
            )
            .await?;
    }

    let cpu = CpuClock::new(&plane);

    // 1. The yardstick, before the operator exists (so neither its watches nor its caches cost
    // the API server anything): the writes the operator will make, made by a plain client to
    // N StatefulSets the controller does not select, on a plane as fresh as the operator's.
    let yardstick_namespace = "bench-yardstick";
    create_namespace(&client, yardstick_namespace).await?;
    create_stateful_sets(&client, yardstick_namespace, "plain", n, 1, false).await?;
    let cpu_before = cpu.now();
    let api_before = ApiserverCounts::scrape(&client).await?;
    // Timed like the operator: until the benchmark's metadata watches have seen every Service
    // and every label, so both sides pay for the same two watches.
    let mut yardstick_services = Counter::start(
        Api::<PartialObjectMeta<Service>>::namespaced(client.clone(), yardstick_namespace),
        {
            let controller = example.name.clone();
            move |s| s.labels().get(YARDSTICK_LABEL) == Some(&controller)
        },
    );
    let mut yardstick_marked = marker_counter(&client, yardstick_namespace, "true");
    let addresses_before = Api::<IPAddress>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let started = minimal_writes(&client, yardstick_namespace, "plain", n, &example.name).await?;
    let services_seen = yardstick_services
        .reached(n, "the yardstick's Services")
        .await?;
    let labels_seen = yardstick_marked
        .reached(n, "the yardstick's labels")
        .await?;
    let yardstick = services_seen.max(labels_seen) - started;
    let yardstick_cpu = cpu.now();
    let yardstick_apiserver = cpu.of("apiserver", &cpu_before, &yardstick_cpu);
    drop(yardstick_marked);
    row(
        "yardstick: plain client makes the minimal writes",
        secs(yardstick),
        format!(
            "({}, {} writes, {CREATE_CONCURRENCY} targets in flight; {}; {})",
            per_item(yardstick, n, "target"),
            2 * n,
            cpu.between(&cpu_before, &yardstick_cpu),
            ApiserverCounts::scrape(&client).await?.since(&api_before)
        ),
    );

    // The apiserver's ClusterIP allocator lists every allocated address on each allocation and
    // release (for a metric), so a Service costs more the more Services exist: the yardstick's
    // Services go before the operator's are made, and both phases start from the same count.
    Api::<Service>::namespaced(client.clone(), yardstick_namespace)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    yardstick_services
        .fell_to(0, "the yardstick's Services, deleted")
        .await?;
    let mut addresses = Counter::start(
        Api::<PartialObjectMeta<IPAddress>>::all(client.clone()),
        |_| true,
    );
    addresses
        .fell_to(addresses_before, "the yardstick's ClusterIPs, released")
        .await?;
    drop((yardstick_services, addresses));

    // 2. The plain client creates the targets.
    let cpu_before = cpu.now();
    let created = create_stateful_sets(&client, namespace, "sts", n, 1, true).await?;
    row(
        "plain client creates the StatefulSets",
        secs(created),
        format!(
            "({}, {CREATE_CONCURRENCY} in flight; {})",
            per_item(created, n, "target"),
            cpu.since(&cpu_before)
        ),
    );

    // 3. Convergence from scratch. The operator gets its own client (its own connections), as
    // it would in its own process.
    let mut services = services_counter(&client, namespace, &example.name);
    let mut marked = marker_counter(&client, namespace, "true");
    let operator_config = plane.config().await?;
    // The controller first, so start-up (operator start until every controller is loaded and
    // its types' caches are filled) and sync (from then until converged) are timed apart.
    let controllers = common::controllers(&client, "metascript.dev", "DecoratorController");
    controllers
        .patch(
            &example.name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&controller),
        )
        .await?;
    let ready_flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let api_before = ApiserverCounts::scrape(&client).await?;
    let cpu_before = cpu.now();
    let cpu_before_converge = cpu_before.clone();
    let started = Instant::now();
    let operator = Operator::start(
        operator_config,
        OperatorConfig {
            workers: args.workers,
            full_resync: args.full_resync,
            ready: ready_flag.clone(),
            // The webhook server (`--hook webhook`) listens on loopback, which only an entry
            // naming it opens.
            webhook_allow: vec!["127.0.0.0/8".parse()?],
            ..OperatorConfig::default()
        },
        &metascript::kinds::runtime(),
    )
    .await?;
    let up = ready(&ready_flag).await?;
    let cpu_up = cpu.now();
    let api_up = ApiserverCounts::scrape(&client).await?;
    let start_up = format!(
        "(operator CPU {:.2} s; {}; {})",
        cpu_up[0] - cpu_before[0],
        cpu.between(&cpu_before, &cpu_up),
        api_up.since(&api_before)
    );
    let all_services = services.reached(n, "the Services").await?;
    let all_marked = marked.reached(n, "the marker labels").await?;
    let converged = all_services.max(all_marked) - started;
    let converged_cpu = cpu.now();
    let api_converged = ApiserverCounts::scrape(&client).await?;
    let writes_to_converge = operator.writes();
    let id = ControllerId::new(metascript::kinds::decorator::KIND, &example.name);
    let customize_calls = || customize_calls(&operator);
    let customized = |calls: i64| match args.customize {
        true => format!("; {calls} customize calls"),
        false => String::new(),
    };
    let customized_to_converge = customized(customize_calls());
    let cpu_converge = cpu.since(&cpu_before);
    let operator_cpu_converge = cpu.operator_since(&cpu_before);
    let checked = output_check(&operator, &id, operator_cpu_converge);
    let dependencies_held = match dependencies(&operator) {
        Some(count) if args.reads => format!("; metascript_dependencies {count}"),
        _ => String::new(),
    };
    let dependencies_held = match args.account {
        true => format!(
            "{dependencies_held}; {} SubjectAccessReviews",
            operator.access_reviews()
        ),
        false => dependencies_held,
    };
    row(
        "converge (operator start to all Services + labels)",
        secs(converged),
        format!(
            "({}; Services done at {}, labels at {}; {writes_to_converge} writes, {:.2} per target; operator CPU {operator_cpu_converge:.2} s{checked}; {cpu_converge}{dependencies_held}{customized_to_converge})",
            per_item(converged, n, "target"),
            secs(all_services - started),
            secs(all_marked - started),
            writes_to_converge as f64 / n as f64,
        ),
    );
    row(
        "  start-up (operator start to every controller loaded, caches filled)",
        secs(up - started),
        start_up,
    );
    let synced = all_services.max(all_marked) - up;
    row(
        "  sync (loaded to all Services + labels)",
        secs(synced),
        format!(
            "(operator CPU {:.2} s; {}; {})",
            cpu.operator_since(&cpu_up),
            cpu.since(&cpu_up),
            api_converged.since(&api_up)
        ),
    );

    // 4. A resync of the converged cluster must write nothing. Status writes come every
    // status interval, so wait two of them before taking the baseline.
    let quiet = OperatorConfig::default().status_interval * 2;
    settle(&operator, quiet, PHASE_TIMEOUT).await?;
    let idle = idle_cpu(&cpu, Duration::from_secs(1)).await;
    let skipped_before = operator.metrics().resync_skipped_of(&id);
    let (before, syncs_before) = (operator.writes(), operator.syncs());
    let customize_before = customize_calls();
    let cpu_before = cpu.now();
    let started = Instant::now();
    operator.resync_all();
    let drained = settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
    let resync_writes = operator.writes() - before;
    row(
        "resync of the converged cluster",
        format!("{resync_writes} writes"),
        format!(
            "({} syncs, {} targets skipped{}; queue drained in {}; operator CPU {:.2} s incl. the 1 s quiet wait, which alone costs {idle:.2} s idle; {})",
            operator.syncs() - syncs_before,
            operator.metrics().resync_skipped_of(&id) - skipped_before,
            customized(customize_calls() - customize_before),
            secs(drained - started),
            cpu.operator_since(&cpu_before),
            cpu.since(&cpu_before)
        ),
    );

    // 5. A script edit reaching every target; with webhooks, the controller pointed at the new
    // version's path (a changed webhook answer alone re-runs nothing, as in Metacontroller).
    let mut relabelled = marker_counter(&client, namespace, "v2");
    let before = operator.writes();
    let customize_before = customize_calls();
    let cpu_before = cpu.now();
    let started = Instant::now();
    match &webhook {
        Some(server) => {
            controllers
                .patch(
                    &example.name,
                    &PatchParams::apply("bench").force(),
                    &Patch::Apply(&{
                        let mut edited = example.with_webhook(&server.url("/v2/sync"));
                        edited["spec"]["serviceAccountName"] =
                            controller["spec"]["serviceAccountName"].clone();
                        edited["spec"]["serviceAccountNamespace"] =
                            controller["spec"]["serviceAccountNamespace"].clone();
                        if edited["spec"]["serviceAccountName"].is_null() {
                            let spec = edited["spec"].as_object_mut().expect("a spec");
                            spec.remove("serviceAccountName");
                            spec.remove("serviceAccountNamespace");
                        }
                        edited
                    }),
                )
                .await?;
        }
        None => {
            example
                .config_maps(&client)
                .replace(
                    &example.config_map.1,
                    &PostParams::default(),
                    &example.config_map(&edited_script(language, args.reads, "v2")?),
                )
                .await?;
        }
    }
    let all_relabelled = relabelled.reached(n, "the edited label").await?;
    let edit = all_relabelled - started;
    row(
        match webhook {
            Some(_) => {
                "hook edit (controller pointed at the new webhook path) reaches every target"
            }
            None => "script edit reaches every target",
        },
        secs(edit),
        format!(
            "({}; {} writes{}; {})",
            per_item(edit, n, "target"),
            operator.writes() - before,
            customized(customize_calls() - customize_before),
            cpu.since(&cpu_before)
        ),
    );

    // With --reads: the bench Namespace relabelled, a fan-out of N re-syncs through the
    // dependency index (every target read that Namespace), and nothing else.
    let mut fanout_syncs = None;
    if args.reads {
        settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
        let mut tiered = label_counter(&client, namespace, TIER_LABEL, "gold");
        let syncs_before = operator.syncs();
        let before = operator.writes();
        let cpu_before = cpu.now();
        let started = Instant::now();
        Api::<Namespace>::all(client.clone())
            .patch(
                namespace,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_LABEL: "gold"}}})),
            )
            .await?;
        let all_tiered = tiered.reached(n, "the Namespace's new label").await?;
        let fanout = all_tiered - started;
        let cpu_fanout = cpu.since(&cpu_before);
        let operator_cpu = cpu.operator_since(&cpu_before);
        let writes = operator.writes() - before;
        // Late extra syncs would show here, so count only once the operator is quiet again.
        settle(&operator, Duration::from_secs(1), PHASE_TIMEOUT).await?;
        let syncs = operator.syncs() - syncs_before;
        fanout_syncs = Some(syncs);
        row(
            "Namespace relabelled: fan-out reaches every target",
            secs(fanout),
            format!(
                "({}; {syncs} syncs, {writes} writes; operator CPU {operator_cpu:.2} s; {cpu_fanout})",
                per_item(fanout, n, "target"),
            ),
        );
    }

    // 6. Objects created while the operator runs.
    if !args.skip_live {
        let live = "bench-live";
        create_namespace(&client, live).await?;
        let mut live_services = services_counter(&client, live, &example.name);
        let mut live_marked = marker_counter(&client, live, "v2");
        let cpu_before = cpu.now();
        let started = Instant::now();
        let created = create_stateful_sets(&client, live, "live", n, 1, true).await?;
        let done_services = live_services.reached(n, "the live Services").await?;
        let done_marked = live_marked.reached(n, "the live labels").await?;
        let done = done_services.max(done_marked) - started;
        row(
            "N more created while running: first create to all converged",
            secs(done),
            format!(
                "(creating them took {}; {})",
                secs(created),
                cpu.since(&cpu_before)
            ),
        );
    }

    let final_dependencies = dependencies(&operator).filter(|_| args.reads);
    let operator_memory = memory("self");
    let plane_memory: Vec<(&str, Option<(f64, f64)>)> = plane
        .pids()
        .into_iter()
        .map(|(name, pid)| (name, memory(&pid.to_string())))
        .collect();
    operator.shutdown().await;

    row(
        "converge / yardstick",
        format!("{:.2}x", converged.as_secs_f64() / yardstick.as_secs_f64()),
        "(operator start to converged)".to_string(),
    );
    row(
        "sync / yardstick",
        format!("{:.2}x", synced.as_secs_f64() / yardstick.as_secs_f64()),
        "(controller loaded to converged: start-up left out)".to_string(),
    );
    row(
        "apiserver CPU, converge / yardstick",
        format!(
            "{:.2}x",
            cpu.of("apiserver", &cpu_before_converge, &converged_cpu) / yardstick_apiserver
        ),
        "(start-up included)".to_string(),
    );
    println!("load average at the end: {}", load().trim());

    println!();
    println!(
        "| {n} targets, {hooks}, {} workers | value | note |",
        args.workers
    );
    println!("|---|---|---|");
    for (what, value, note) in &rows {
        println!("| {what} | {value} | {note} |");
    }
    if let Some((peak, _)) = operator_memory {
        println!(
            "| operator process peak RSS (VmHWM; includes the bench's watches) | {peak:.0} MiB | |"
        );
    }
    for (name, memory) in plane_memory {
        if let Some((peak, now)) = memory {
            println!(
                "| {name} RSS (peak / at end) | {peak:.0} / {now:.0} MiB | separate process |"
            );
        }
    }
    if let Some(count) = final_dependencies {
        let note = match args.skip_live {
            true => "one per target",
            false => "one per target, the live ones included",
        };
        println!("| metascript_dependencies at the end | {count} | {note} |");
    }
    anyhow::ensure!(
        resync_writes == 0,
        "a resync of the converged cluster made {resync_writes} write requests; expected none"
    );
    if let Some(syncs) = fanout_syncs {
        anyhow::ensure!(
            syncs == n as u64,
            "relabelling the Namespace ran {syncs} syncs; expected exactly {n} (one per target)"
        );
    }
    Ok(())
}
