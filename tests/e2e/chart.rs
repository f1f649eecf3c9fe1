//! The Helm chart, `charts/metascript`: its default render is the install `deploy/` makes (so
//! the two cannot drift), the API server accepts what it renders, and each value changes what it
//! says and keeps the operator's flags, names and RBAC consistent.
//!
//! helm is built from the Go module proxy by `hack/tools/build-helm.sh` (the version is read
//! from there); `METASCRIPT_HELM` names the binary, else the script's cache path is used. Like
//! the control plane, a missing helm fails these tests rather than skipping them.

use crate::install::{Kubectl, find, kind, kubectl_name, name, namespace_of, render, strings, the};
use crate::support::{client, plane, test_namespace};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const RELEASE: &str = "metascript";
const NAMESPACE: &str = "metascript-system";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    root().join("charts/metascript")
}

/// The helm binary: `METASCRIPT_HELM`, else where `hack/tools/build-helm.sh` caches it.
fn helm() -> PathBuf {
    if let Some(path) = std::env::var_os("METASCRIPT_HELM") {
        return PathBuf::from(path);
    }
    let script = std::fs::read_to_string(root().join("hack/tools/build-helm.sh"))
        .expect("hack/tools/build-helm.sh");
    let version = script
        .lines()
        .find_map(|line| line.strip_prefix("HELM_VERSION="))
        .expect("HELM_VERSION= in build-helm.sh");
    let dir = std::env::var_os("METASCRIPT_HELM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(format!(".cache/metascript/tools/helm-{version}"))
        });
    let helm = dir.join("helm");
    assert!(
        helm.is_file(),
        "helm not found at {}: build it with hack/tools/build-helm.sh (a few minutes, once), \
         or set METASCRIPT_HELM to a helm binary",
        helm.display()
    );
    helm
}

/// `helm template RELEASE charts/metascript -n NAMESPACE --set …`: the YAML and its objects, or
/// helm's error.
fn template(release: &str, namespace: &str, sets: &[&str]) -> Result<(String, Vec<Value>), String> {
    let mut command = Command::new(helm());
    command
        .args(["template", release])
        .arg(chart())
        .args(["--namespace", namespace]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let yaml = String::from_utf8(output.stdout).expect("UTF-8");
    let objects: Vec<Value> = serde_saphyr::from_multiple(&yaml)
        .unwrap_or_else(|e| panic!("helm rendered YAML that does not parse: {e}\n{yaml}"));
    let objects: Vec<Value> = objects.into_iter().filter(|o| !o.is_null()).collect();
    Ok((yaml, objects))
}

fn rendered(release: &str, namespace: &str, sets: &[&str]) -> Vec<Value> {
    template(release, namespace, sets)
        .unwrap_or_else(|error| panic!("helm template {sets:?} failed:\n{error}"))
        .1
}

/// Objects by `<kind>/<namespace>/<name>`.
fn by_key(objects: &[Value]) -> BTreeMap<String, &Value> {
    objects
        .iter()
        .map(|o| {
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default();
            (format!("{}/{namespace}/{}", kind(o), name(o)), o)
        })
        .collect()
}

/// The object without its metadata: what the API server acts on.
fn body(object: &Value) -> Value {
    let mut body = object.clone();
    body.as_object_mut().unwrap().remove("metadata");
    body
}

/// Whether every entry of the map `part` is in the map `whole`.
fn contains_all(whole: &Value, part: &Value) -> bool {
    part.as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| &whole[key] == value)
}

fn deployment_args(objects: &[Value]) -> Vec<String> {
    strings(&the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])
}

fn env_value(objects: &[Value], variable: &str) -> Value {
    the(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == variable)
        .map(|e| e["value"].clone())
        .unwrap_or(Value::Null)
}

/// The value of `--flag=VALUE` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("{flag}=")))
}

/// The chart's defaults render the objects of `kubectl kustomize deploy/`, field for field (the
/// chart adds labels, and the CRDs' keep annotation), except the Namespace, which Helm users
/// create with `--create-namespace` and `namespace.create=true` renders the same.
#[test]
fn the_default_chart_renders_what_deploy_installs() {
    let (_, deploy) = render();
    let chart = rendered(RELEASE, NAMESPACE, &[]);
    let deploy_keys = by_key(&deploy);
    let chart_keys = by_key(&chart);
    let without_namespace: BTreeSet<&String> = deploy_keys
        .keys()
        .filter(|k| !k.starts_with("Namespace/"))
        .collect();
    assert_eq!(
        chart_keys.keys().collect::<BTreeSet<_>>(),
        without_namespace,
        "the chart renders other objects than deploy/"
    );
    for (key, installed) in &deploy_keys {
        let Some(templated) = chart_keys.get(key) else {
            continue;
        };
        assert_eq!(
            body(templated),
            body(installed),
            "{key}: the chart and deploy/ disagree (left: chart)"
        );
        for field in ["labels", "annotations"] {
            assert!(
                contains_all(&templated["metadata"][field], &installed["metadata"][field]),
                "{key}: deploy/'s {field} {} are not all in the chart's {}",
                installed["metadata"][field],
                templated["metadata"][field]
            );
        }
    }
    for crd in find(&chart, "CustomResourceDefinition") {
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "uninstalling the release must not delete every controller with the CRDs"
        );
    }

    let with_namespace = rendered(RELEASE, NAMESPACE, &["namespace.create=true"]);
    let namespace = the(&with_namespace, "Namespace");
    let installed = the(&deploy, "Namespace");
    assert_eq!(name(namespace), name(installed));
    assert!(
        contains_all(
            &namespace["metadata"]["labels"],
            &installed["metadata"]["labels"]
        ),
        "the Pod Security labels: {}",
        namespace["metadata"]["labels"]
    );
}

/// The chart's copy of the CRDs is the generated one (a chart cannot read files outside itself).
#[test]
fn the_charts_crds_are_current() {
    let path = chart().join("files/metascript.dev.yaml");
    let generated = metascript::kinds::crds_yaml().expect("CRDs serialize");
    if std::env::var_os("METASCRIPT_UPDATE_CRDS").is_some() {
        std::fs::write(&path, &generated).expect("write the chart's CRDs");
    }
    let copy = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        copy == generated,
        "{} is stale: cp crds/metascript.dev.yaml {0} (or METASCRIPT_UPDATE_CRDS=1 cargo test --test e2e chart)",
        path.display()
    );
}

/// The chart's monitoring values ship what `deploy/components/monitoring` does: the same alert
/// groups, the same dashboard (in the namespace Grafana's sidecar watches, if given), and a
/// ServiceMonitor of the metrics Service.
#[test]
fn the_charts_monitoring_is_deploys() {
    let objects = rendered(
        RELEASE,
        NAMESPACE,
        &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.labels.release=prometheus",
            "metrics.dashboard.enabled=true",
            "metrics.dashboard.namespace=grafana",
        ],
    );
    let rule = the(&objects, "PrometheusRule");
    assert_eq!(rule["spec"], crate::monitoring::rule_groups());
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let dashboard = find(&objects, "ConfigMap")
        .into_iter()
        .find(|c| name(c) == "metascript-dashboard")
        .expect("the dashboard ConfigMap");
    assert_eq!(dashboard["metadata"]["namespace"], "grafana");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let deploys = std::fs::read_to_string(
        root().join("deploy/components/monitoring/metascript-dashboard.json"),
    )
    .unwrap();
    assert_eq!(
        dashboard["data"]["metascript-dashboard.json"]
            .as_str()
            .map(str::trim_end),
        Some(deploys.trim_end()),
        "charts/metascript/files/metascript-dashboard.json is deploy's"
    );
    let monitor = the(&objects, "ServiceMonitor");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");

    // Off by default: they need the Prometheus Operator's CRDs and a Grafana.
    let defaults = rendered(RELEASE, NAMESPACE, &[]);
    for kind in ["PrometheusRule", "ServiceMonitor"] {
        assert!(find(&defaults, kind).is_empty(), "{kind} by default");
    }
    assert!(!defaults.iter().any(|o| name(o) == "metascript-dashboard"));
}

/// The chart is released with the operator: its version and appVersion are the crate's.
#[test]
fn the_chart_is_versioned_with_the_crate() {
    let text = std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml");
    let chart: Value = serde_saphyr::from_str(&text).expect("Chart.yaml parses");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

/// What the API server accepts, for the default render and for the values that add or remove
/// objects: every object accepted by a server-side dry run, with no warning (the namespace's Pod
/// Security "restricted" level included).
#[tokio::test]
async fn the_api_server_accepts_the_rendered_chart() {
    let kubectl = Kubectl::new().await;
    let client = client().await;
    let other = test_namespace(&client, "chart").await;
    for (release, namespace, sets) in [
        (RELEASE, NAMESPACE, &["namespace.create=true"][..]),
        (
            "shard-b",
            other.as_str(),
            &[
                "impersonation.allowUnimpersonated=true",
                "controllerSelector=shard=b",
                "sharding.leaseDuration=30s",
                "replicas=3",
                "metrics.port=9091",
                "crds.install=false",
                "webhooks.allow={10.96.0.0/12,hooks.example.com}",
                "networkPolicy.metricsNamespaceSelector.matchLabels.team=monitoring",
                "networkPolicy.webhookEgress[0].to[0].namespaceSelector.matchLabels.team=hooks",
                "networkPolicy.webhookEgress[0].ports[0].port=8080",
            ][..],
        ),
        (
            "metascript-dev",
            other.as_str(),
            &[
                "replicas=1",
                "sharding.enabled=false",
                "admission.enabled=false",
                "metrics.service.enabled=false",
                "crds.install=false",
            ][..],
        ),
    ] {
        let (yaml, objects) = template(release, namespace, sets)
            .unwrap_or_else(|error| panic!("helm template {sets:?}:\n{error}"));
        // A dry run of a namespaced object is refused while its namespace does not exist, so a
        // rendered Namespace is applied for real first (the plane is thrown away afterwards).
        if let Some(ns) = find(&objects, "Namespace").first() {
            kubectl.run(&["apply", "--server-side", "-f", "-"], &ns.to_string());
        }
        let (stdout, stderr) = kubectl.run(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-o",
                "name",
                "-f",
                "-",
            ],
            &yaml,
        );
        let accepted: BTreeSet<String> = stdout.lines().map(str::to_owned).collect();
        let expected: BTreeSet<String> = objects.iter().map(kubectl_name).collect();
        assert_eq!(accepted, expected, "helm template {release} {sets:?}");
        let warnings: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            warnings.is_empty(),
            "helm template {release} {sets:?} warned:\n{}",
            warnings.join("\n")
        );
    }
}

/// On a cluster whose CRDs were installed another way (here as the tests install them: applied
/// from `metascript crds`, no Helm metadata), `helm install` leaves them alone and says so,
/// instead of failing on objects Helm did not create. A server-side dry run makes every check a
/// real install makes, ownership included, and creates nothing.
#[tokio::test]
async fn helm_installs_over_crds_installed_another_way() {
    let client = client().await;
    crate::support::operator::install_crds(&client)
        .await
        .expect("the CRDs installed");
    let namespace = test_namespace(&client, "chart-crds").await;
    let kubeconfig = plane().await.kubeconfig_path().to_path_buf();
    let output = Command::new(helm())
        .args(["install", "over-crds"])
        .arg(chart())
        .args([
            "--namespace",
            &namespace,
            "--dry-run=server",
            "--kubeconfig",
        ])
        .arg(&kubeconfig)
        .output()
        .expect("running helm install");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "helm install over existing CRDs failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !stdout.contains("kind: CustomResourceDefinition"),
        "the release would take the CRDs over:\n{stdout}"
    );
    let notes = stdout
        .split_once("NOTES:")
        .map(|(_, notes)| notes)
        .unwrap_or_else(|| panic!("no NOTES in:\n{stdout}"));
    for crd in metascript::kinds::all_crds() {
        let name = crd.metadata.name.unwrap_or_default();
        assert!(notes.contains(&name), "NOTES do not name {name}:\n{notes}");
    }
    assert!(
        notes.contains("meta.helm.sh/release-name=over-crds"),
        "NOTES do not say how to hand them to the release:\n{notes}"
    );
}

/// A release not named `metascript` renames every object and tells the operator the names its
/// defaults would otherwise assume (Lease, webhook Secret, configuration, certificate names), and
/// its RBAC grants exactly those.
#[test]
fn another_release_name_renames_everything_consistently() {
    let objects = rendered("shard-b", "team-b", &["controllerSelector=shard=b"]);
    let base = "shard-b-metascript";
    for object in &objects {
        let object_name = name(object);
        if kind(object) == "CustomResourceDefinition" {
            continue;
        }
        assert!(
            object_name.starts_with(base),
            "{} is not named after the release",
            kubectl_name(object)
        );
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, "team-b", "{}", kubectl_name(object));
        }
    }
    let args = deployment_args(&objects);
    assert_eq!(flag(&args, "--controller-selector"), Some("shard=b"));
    assert_eq!(flag(&args, "--shard-group"), Some(base));
    let secret = format!("{base}-webhook-tls");
    assert_eq!(
        flag(&args, "--webhook-secret"),
        Some(format!("team-b/{secret}").as_str())
    );
    assert_eq!(flag(&args, "--webhook-configuration"), Some(base));
    let service = format!("{base}-webhook");
    assert_eq!(
        flag(&args, "--webhook-names"),
        Some(format!("{service}.team-b.svc,{service}.team-b.svc.cluster.local").as_str())
    );
    let secret_rule = find(&objects, "Role")
        .into_iter()
        .flat_map(|role| role["rules"].as_array().unwrap().iter())
        .any(|rule| strings(&rule["resourceNames"]) == [secret.clone()]);
    assert!(secret_rule, "the webhook Role grants the renamed Secret");
    let configuration = the(&objects, "ValidatingWebhookConfiguration");
    assert_eq!(name(configuration), base);
    let granted = find(&objects, "ClusterRole")
        .into_iter()
        .flat_map(|role| role["rules"].as_array().unwrap().iter())
        .any(|rule| {
            strings(&rule["resources"]) == ["validatingwebhookconfigurations"]
                && strings(&rule["resourceNames"]) == [base]
        });
    assert!(
        granted,
        "the webhook ClusterRole grants the renamed configuration"
    );
    for webhook in configuration["webhooks"].as_array().unwrap() {
        assert_eq!(webhook["clientConfig"]["service"]["name"], service.as_str());
        assert_eq!(webhook["clientConfig"]["service"]["namespace"], "team-b");
    }
    // The pods are this release's alone.
    let deployment = the(&objects, "Deployment");
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(selector, &json!({"app.kubernetes.io/name": base}));
    for service in find(&objects, "Service") {
        assert_eq!(&service["spec"]["selector"], selector);
    }
    assert_eq!(
        &the(&objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        selector
    );
}

/// The values named in values.yaml do what they say; the defaults' own flags stay out of the way.
#[test]
fn values_change_what_they_say() {
    let defaults = rendered(RELEASE, NAMESPACE, &[]);
    let args = deployment_args(&defaults);
    for absent in [
        "--leader-election-id",
        "--shard-group",
        "--webhook-secret",
        "--controller-selector",
        "--lease-duration",
    ] {
        assert_eq!(flag(&args, absent), None, "{absent} in {args:?}");
    }

    assert!(args.contains(&"--shards=auto".to_owned()), "{args:?}");

    // Leader election instead of sharding: its flag, its lease duration, the same Lease role.
    let elected = rendered(
        RELEASE,
        NAMESPACE,
        &[
            "sharding.enabled=false",
            "leaderElection.enabled=true",
            "leaderElection.leaseDuration=30s",
        ],
    );
    let elected_args = deployment_args(&elected);
    assert!(elected_args.contains(&"--leader-election".to_owned()));
    assert!(!elected_args.contains(&"--shards=auto".to_owned()));
    assert_eq!(flag(&elected_args, "--lease-duration"), Some("30s"));
    assert!(
        find(&elected, "Role")
            .iter()
            .any(|r| name(r) == "metascript-leader-election")
    );

    // One replica alone: no Lease role, no disruption budget (it would block every drain), no
    // sharding or election flag.
    let single = rendered(
        RELEASE,
        NAMESPACE,
        &["replicas=1", "sharding.enabled=false"],
    );
    assert_eq!(the(&single, "Deployment")["spec"]["replicas"], 1);
    let single_args = deployment_args(&single);
    assert!(!single_args.contains(&"--leader-election".to_owned()));
    assert!(!single_args.contains(&"--shards=auto".to_owned()));
    assert!(find(&single, "PodDisruptionBudget").is_empty());
    assert!(
        find(&single, "Role")
            .iter()
            .all(|r| name(r) != "metascript-leader-election")
    );

    // Admission off: no webhook objects, RBAC or flag.
    let unchecked = rendered(RELEASE, NAMESPACE, &["admission.enabled=false"]);
    assert!(find(&unchecked, "ValidatingWebhookConfiguration").is_empty());
    assert!(
        find(&unchecked, "Service")
            .iter()
            .all(|s| name(s) != "metascript-webhook")
    );
    assert!(
        find(&unchecked, "Role")
            .iter()
            .chain(find(&unchecked, "ClusterRole").iter())
            .all(|r| name(r) != "metascript-webhook")
    );
    assert_eq!(flag(&deployment_args(&unchecked), "--webhook-addr"), None);

    // Impersonation: the broad role of deploy/components/unimpersonated, bound to the operator,
    // and the operator told so.
    let broad = rendered(
        RELEASE,
        NAMESPACE,
        &["impersonation.allowUnimpersonated=true"],
    );
    assert_eq!(env_value(&broad, "METASCRIPT_ALLOW_UNIMPERSONATED"), "true");
    assert_eq!(
        env_value(&defaults, "METASCRIPT_ALLOW_UNIMPERSONATED"),
        "false"
    );
    let component: Vec<Value> = serde_saphyr::from_multiple(
        &std::fs::read_to_string(
            root().join("deploy/components/unimpersonated/rbac-workloads.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let by_name = |objects: &[Value], wanted: &str| -> Value {
        objects
            .iter()
            .find(|o| kind(o) == wanted)
            .map(body)
            .unwrap_or_else(|| panic!("no {wanted}"))
    };
    for wanted in ["ClusterRole", "ClusterRoleBinding"] {
        let templated = find(&broad, wanted)
            .into_iter()
            .find(|o| name(o) == "metascript-workloads")
            .map(body)
            .unwrap_or_else(|| panic!("no {wanted} metascript-workloads"));
        assert_eq!(templated, by_name(&component, wanted), "{wanted}");
    }
    assert!(
        find(&defaults, "ClusterRole")
            .iter()
            .all(|r| name(r) != "metascript-workloads"),
        "no broad role by default"
    );

    // Metrics port: the flag, the container port, the probes (by name) and the Service agree.
    let port = rendered(RELEASE, NAMESPACE, &["metrics.port=9191"]);
    assert_eq!(
        flag(&deployment_args(&port), "--metrics-addr"),
        Some("0.0.0.0:9191")
    );
    let container = &the(&port, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics" && p["containerPort"] == 9191)
    );
    let metrics = find(&port, "Service")
        .into_iter()
        .find(|s| name(s) == "metascript-metrics")
        .expect("the metrics Service");
    assert_eq!(metrics["spec"]["ports"][0]["port"], 9191);
    assert_eq!(metrics["spec"]["ports"][0]["targetPort"], "metrics");

    // Image, resources, workers, log settings and extra arguments.
    let custom = rendered(
        RELEASE,
        NAMESPACE,
        &[
            "image.repository=registry.example.com/metascript",
            "image.tag=v0.1.0",
            "resources.limits.memory=2Gi",
            "workers=32",
            "logLevel=debug",
            "logJson=false",
            "extraArgs={--full-resync}",
        ],
    );
    let container = &the(&custom, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example.com/metascript:v0.1.0");
    assert_eq!(container["resources"]["limits"]["memory"], "2Gi");
    assert_eq!(env_value(&custom, "METASCRIPT_WORKERS"), "32");
    assert_eq!(env_value(&custom, "METASCRIPT_LOG"), "debug");
    let args = deployment_args(&custom);
    assert!(!args.contains(&"--log-json".to_owned()), "{args:?}");
    assert_eq!(args.last().map(String::as_str), Some("--full-resync"));
    let pinned = rendered(
        RELEASE,
        NAMESPACE,
        &["image.digest=sha256:0123456789abcdef"],
    );
    assert_eq!(
        the(&pinned, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
        "metascript@sha256:0123456789abcdef"
    );

    // Webhook destinations: none by default, the list as the operator's variable.
    assert_eq!(env_value(&defaults, "METASCRIPT_WEBHOOK_ALLOW"), "");
    let allowed = rendered(
        RELEASE,
        NAMESPACE,
        &["webhooks.allow={10.96.0.0/12,*.svc.cluster.local}"],
    );
    assert_eq!(
        env_value(&allowed, "METASCRIPT_WEBHOOK_ALLOW"),
        "10.96.0.0/12,*.svc.cluster.local"
    );

    // NetworkPolicies: on by default (deploy/'s, compared above), each setting where it goes.
    let policy = |objects: &[Value], suffix: &str| -> Value {
        find(objects, "NetworkPolicy")
            .into_iter()
            .find(|p| name(p) == format!("metascript-{suffix}"))
            .unwrap_or_else(|| panic!("no NetworkPolicy metascript-{suffix}"))
            .clone()
    };
    assert_eq!(find(&defaults, "NetworkPolicy").len(), 2);
    let tuned = rendered(
        RELEASE,
        NAMESPACE,
        &[
            "networkPolicy.metricsNamespaceSelector.matchLabels.team=monitoring",
            "networkPolicy.apiServerPorts={6443}",
            "networkPolicy.webhookEgress[0].to[0].namespaceSelector.matchLabels.team=hooks",
            "networkPolicy.webhookEgress[0].ports[0].port=8080",
        ],
    );
    let ingress = policy(&tuned, "ingress");
    assert_eq!(
        ingress["spec"]["ingress"][1],
        json!({"from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
               "ports": [{"port": "metrics", "protocol": "TCP"}]})
    );
    let egress = &policy(&tuned, "egress")["spec"]["egress"];
    assert_eq!(
        egress[1],
        json!({"ports": [{"port": 6443, "protocol": "TCP"}]})
    );
    assert_eq!(
        egress[2],
        json!({"to": [{"namespaceSelector": {"matchLabels": {"team": "hooks"}}}],
               "ports": [{"port": 8080}]})
    );
    assert_eq!(egress.as_array().map(Vec::len), Some(3));
    // Traces: the flags, and the way out to the collector.
    let traced = rendered(
        RELEASE,
        NAMESPACE,
        &[
            "tracing.otlpEndpoint=http://collector.monitoring:4318",
            "tracing.sampleRatio=0.05",
            "tracing.egress[0].to[0].namespaceSelector.matchLabels.team=monitoring",
            "tracing.egress[0].ports[0].port=4318",
        ],
    );
    let args = deployment_args(&traced);
    assert_eq!(
        flag(&args, "--otlp-endpoint"),
        Some("http://collector.monitoring:4318")
    );
    assert_eq!(flag(&args, "--trace-sample-ratio"), Some("0.05"));
    assert_eq!(
        policy(&traced, "egress")["spec"]["egress"][2],
        json!({"to": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
               "ports": [{"port": 4318}]})
    );
    assert_eq!(
        flag(
            &deployment_args(&rendered(RELEASE, NAMESPACE, &[])),
            "--otlp-endpoint"
        ),
        None
    );
    // Without admission, its port is not opened.
    let ingress = policy(&unchecked, "ingress");
    assert_eq!(
        ingress["spec"]["ingress"],
        json!([{"from": [{"namespaceSelector": {}}],
                "ports": [{"port": "metrics", "protocol": "TCP"}]}])
    );
    assert!(
        find(
            &rendered(RELEASE, NAMESPACE, &["networkPolicy.enabled=false"]),
            "NetworkPolicy"
        )
        .is_empty()
    );

    // CRDs left to someone else.
    assert!(
        find(
            &rendered(RELEASE, NAMESPACE, &["crds.install=false"]),
            "CustomResourceDefinition"
        )
        .is_empty()
    );
    let deployment = the(&defaults, "Deployment");
    assert_eq!(namespace_of(deployment), NAMESPACE);
}

/// Mistakes are refused at render time, before anything reaches a cluster.
#[test]
fn misspelt_and_unsafe_values_are_refused() {
    let error = template(RELEASE, NAMESPACE, &["replica=3"]).expect_err("an unknown value");
    assert!(error.contains("replica"), "{error}");
    let error = template(RELEASE, NAMESPACE, &["admission.failurePolicy=Sometimes"])
        .expect_err("a failure policy the API server does not know");
    assert!(error.contains("failurePolicy"), "{error}");
    let error = template(RELEASE, NAMESPACE, &["sharding.enabled=false"])
        .expect_err("two replicas neither sharded nor electing a leader");
    assert!(error.contains("sharding.enabled"), "{error}");
    let error = template(RELEASE, NAMESPACE, &["leaderElection.enabled=true"])
        .expect_err("sharded and electing a leader at once");
    assert!(error.contains("exclude each other"), "{error}");
    let error = template(
        RELEASE,
        NAMESPACE,
        &["webhooks.allow[0]=hooks.example.com:8443 x"],
    )
    .expect_err("an entry with a space in it");
    assert!(error.contains("webhooks"), "{error}");
    let error = template(RELEASE, NAMESPACE, &["networkPolicy.apiServerPorts={}"])
        .expect_err("no port for the API server");
    assert!(error.contains("apiServerPorts"), "{error}");
    for bad in [
        "tracing.sampleRatio=2",
        "tracing.otlpEndpoint=collector:4318",
    ] {
        let error = template(RELEASE, NAMESPACE, &[bad]).expect_err(bad);
        assert!(error.contains("tracing"), "{bad}: {error}");
    }
}
