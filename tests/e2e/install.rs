//! The install, `kubectl apply -k deploy/`: what kustomize renders is accepted by the API server,
//! has the availability and hardening properties docs/operations.md promises, and its RBAC lets
//! the operator run exactly as the Deployment starts it.
//!
//! The plane's kubectl renders and sends the manifests, so these tests see what a user's kubectl
//! of the same version (and its embedded kustomize) does. The container image is not built here:
//! these tests run the binary under test in its place.

use crate::support::operator::OWN_OPERATOR_LABEL;
use crate::support::process::{free_port, http_get, metric};
use crate::support::{WAIT, client, plane};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use metascript::testing::BIN_DIR_ENV;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The API server accepts every rendered object, applied either way users apply it.
#[tokio::test]
async fn the_api_server_accepts_the_rendered_install() {
    let kubectl = Kubectl::new().await;
    let (yaml, objects) = render();
    // A dry run of a namespaced object is refused while its namespace does not exist (the
    // NamespaceLifecycle admission plugin runs on dry runs too), so the Namespace alone is
    // applied for real first; the plane is thrown away with the test binary. Then every object,
    // the Namespace included, is dry-run as one stream, as `kubectl apply -k` sends it.
    kubectl.run(
        &["apply", "--server-side", "-f", "-"],
        &the(&objects, "Namespace").to_string(),
    );
    let expected: BTreeSet<String> = objects.iter().map(kubectl_name).collect();
    for apply in [
        // What the docs recommend.
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-o",
            "name",
            "-f",
            "-",
        ][..],
        // Plain `kubectl apply -k deploy/`: client-side apply.
        &["apply", "--dry-run=server", "-o", "name", "-f", "-"],
    ] {
        let (stdout, stderr) = kubectl.run(apply, &yaml);
        let accepted: BTreeSet<String> = stdout.lines().map(str::to_owned).collect();
        assert_eq!(
            accepted,
            expected,
            "`kubectl {}` accepted other objects than kustomize rendered",
            apply.join(" ")
        );
        // The namespace enforces Pod Security "restricted" and warns about the Deployment's pod
        // template when it falls short; deprecated APIs warn too. The one expected warning is
        // about objects that exist already without client-side apply's annotation (the CRDs
        // other tests install, the RBAC the test below applies).
        let warnings: Vec<&str> = stderr
            .lines()
            .filter(|line| !line.trim().is_empty())
            .filter(|line| !line.contains("kubectl.kubernetes.io/last-applied-configuration"))
            .collect();
        assert!(
            warnings.is_empty(),
            "`kubectl {}` warned:\n{}",
            apply.join(" "),
            warnings.join("\n")
        );
    }
}

/// Two sharded replicas that hand over to each other, probed on the health port, hardened, with
/// a disruption budget and a metrics Service that cover them.
#[test]
fn the_rendered_deployment_is_highly_available_and_hardened() {
    let (_, objects) = render();
    let crds: BTreeSet<String> = find(&objects, "CustomResourceDefinition")
        .into_iter()
        .map(|crd| name(crd).to_owned())
        .collect();
    let generated: BTreeSet<String> = metascript::kinds::all_crds()
        .into_iter()
        .filter_map(|crd| crd.metadata.name)
        .collect();
    assert_eq!(crds, generated, "the install's CRDs");

    let deployment = the(&objects, "Deployment");
    let namespace = namespace_of(deployment);
    assert_eq!(name(the(&objects, "Namespace")), namespace);
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2, "replicas");
    assert_eq!(spec["strategy"]["type"], "RollingUpdate", "strategy");
    // Otherwise a rollout may stop a replica before its replacement is ready to take over.
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod_labels = &spec["template"]["metadata"]["labels"];
    assert!(
        selects(&spec["selector"], pod_labels),
        "Deployment selector"
    );
    let pod = &spec["template"]["spec"];
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];
    // The Deployment's placeholder `metascript` must meet the `images:` entry (which gives it a
    // tag), or `kustomize edit set image metascript=…` would change nothing.
    let image = container["image"].as_str().expect("image");
    assert!(
        image.contains(':') || image.contains('@'),
        "image {image:?}: the images: entry of deploy/kustomization.yaml did not apply"
    );

    let args = strings(&container["args"]);
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    assert!(args.iter().any(|a| a == "--shards=auto"), "{args:?}");
    let port = metrics_port(&args);
    let port_name = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["containerPort"] == port)
        .unwrap_or_else(|| panic!("no container port {port} (the --metrics-addr port)"))["name"]
        .clone();
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert!(
            get["port"] == port_name || get["port"] == port,
            "{probe} is on port {}, not the health port {port} ({port_name})",
            get["port"]
        );
    }
    for (what, quantity) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(
            container["resources"][what][quantity].is_string(),
            "resources.{what}.{quantity}"
        );
    }
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("env {name}"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field, "{name}");
    }

    // A container's setting wins over the pod's.
    let security = |field: &str| -> Value {
        match &container["securityContext"][field] {
            Value::Null => pod["securityContext"][field].clone(),
            value => value.clone(),
        }
    };
    assert_eq!(security("runAsNonRoot"), true, "runAsNonRoot");
    assert_eq!(security("seccompProfile")["type"], "RuntimeDefault");
    let container_security = &container["securityContext"];
    assert_eq!(container_security["readOnlyRootFilesystem"], true);
    assert_eq!(container_security["allowPrivilegeEscalation"], false);
    assert!(
        strings(&container_security["capabilities"]["drop"]).contains(&"ALL".to_owned()),
        "capabilities.drop ALL"
    );

    let account = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    assert!(
        find(&objects, "ServiceAccount")
            .iter()
            .any(|a| name(a) == account && namespace_of(a) == namespace),
        "ServiceAccount {namespace}/{account} is installed"
    );

    let budget = the(&objects, "PodDisruptionBudget");
    assert_eq!(namespace_of(budget), namespace);
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert!(selects(&budget["spec"]["selector"], pod_labels), "PDB");

    let port_of = |flag: &str| -> (u16, Value) {
        let port: u16 = args
            .iter()
            .find_map(|a| a.strip_prefix(&format!("{flag}=")))
            .and_then(|addr| addr.rsplit_once(':'))
            .and_then(|(_, port)| port.parse().ok())
            .unwrap_or_else(|| panic!("the Deployment passes {flag}=HOST:PORT: {args:?}"));
        let name = container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["containerPort"] == port)
            .unwrap_or_else(|| panic!("no container port {port} (the {flag} port)"))["name"]
            .clone();
        (port, name)
    };
    let (webhook_port, webhook_port_name) = port_of("--webhook-addr");
    for (service, port, port_name) in [
        ("metascript-metrics", port, &port_name),
        ("metascript-webhook", webhook_port, &webhook_port_name),
    ] {
        let service = service_named(service, &objects);
        assert_eq!(namespace_of(service), namespace);
        assert!(
            selects(
                &json!({"matchLabels": service["spec"]["selector"]}),
                pod_labels
            ),
            "{} selects the operator's pods",
            name(service)
        );
        assert!(
            service["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["targetPort"] == *port_name || p["targetPort"] == port),
            "{} targets port {port} ({port_name})",
            name(service)
        );
    }

    // Admission: every webhook calls the webhook Service's /validate and fails closed.
    let configuration = the(&objects, "ValidatingWebhookConfiguration");
    let webhooks = configuration["webhooks"].as_array().expect("webhooks");
    assert!(webhooks.len() >= 2, "controllers and script ConfigMaps");
    for webhook in webhooks {
        let target = &webhook["clientConfig"]["service"];
        assert_eq!(target["name"], "metascript-webhook", "{webhook}");
        assert_eq!(target["namespace"], namespace, "{webhook}");
        assert_eq!(target["path"], metascript::admission::PATH, "{webhook}");
        assert_eq!(webhook["failurePolicy"], "Fail", "{webhook}");
    }
    // Least privilege: controllers must name their ServiceAccount.
    let unimpersonated = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "METASCRIPT_ALLOW_UNIMPERSONATED")
        .expect("METASCRIPT_ALLOW_UNIMPERSONATED is set");
    assert_eq!(unimpersonated["value"], "false");
}

/// The operator's pods take in only the admission webhook's port (from anywhere) and the
/// metrics port, and let out only DNS and the API server's ports; webhook hooks go nowhere
/// until an admin lists destinations.
#[test]
fn the_operators_pods_are_closed_but_for_admission_metrics_dns_and_the_api_server() {
    let (_, objects) = render();
    let deployment = the(&objects, "Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let port_names: BTreeSet<String> = container["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    let policies = find(&objects, "NetworkPolicy");
    assert_eq!(policies.len(), 2, "an ingress and an egress policy");
    let ports = |rule: &Value| -> Vec<String> {
        rule["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("TCP")))
            .collect()
    };
    for policy in policies {
        assert_eq!(namespace_of(policy), namespace_of(deployment));
        assert!(
            selects(&policy["spec"]["podSelector"], pod_labels),
            "{} selects the operator's pods",
            name(policy)
        );
        let types = strings(&policy["spec"]["policyTypes"]);
        if types == ["Ingress"] {
            let rules = policy["spec"]["ingress"].as_array().expect("ingress rules");
            let opened: Vec<Vec<String>> = rules.iter().map(ports).collect();
            assert_eq!(
                opened,
                [vec!["\"webhook\"/TCP"], vec!["\"metrics\"/TCP"]],
                "{}",
                name(policy)
            );
            // Named ports: the container's.
            for rule in rules {
                for port in rule["ports"].as_array().unwrap() {
                    assert!(
                        port_names.contains(port["port"].as_str().unwrap()),
                        "{port}"
                    );
                }
            }
            assert_eq!(
                rules[0]["from"],
                Value::Null,
                "the API server may call from anywhere"
            );
            assert_eq!(rules[1]["from"], json!([{"namespaceSelector": {}}]));
        } else {
            assert_eq!(types, ["Egress"], "{}", name(policy));
            let rules = policy["spec"]["egress"].as_array().expect("egress rules");
            let opened: Vec<Vec<String>> = rules.iter().map(ports).collect();
            assert_eq!(
                opened,
                [vec!["53/UDP", "53/TCP"], vec!["443/TCP", "6443/TCP"]],
                "{}",
                name(policy)
            );
        }
    }
    let allowed = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "METASCRIPT_WEBHOOK_ALLOW")
        .expect("METASCRIPT_WEBHOOK_ALLOW is set");
    assert_eq!(allowed["value"], "", "no webhook destination by default");
}

fn service_named<'a>(wanted: &str, objects: &'a [Value]) -> &'a Value {
    find(objects, "Service")
        .into_iter()
        .find(|s| name(s) == wanted)
        .unwrap_or_else(|| panic!("no Service {wanted}"))
}

/// The install's ServiceAccount and RBAC are enough for the operator started with the
/// Deployment's arguments and environment: it starts, becomes ready and joins the shards (alone,
/// it may write at once).
///
/// Without the broad wildcard role: that is the part users narrow to their controllers' types
/// (docs/operations.md), so the operator's own needs (its types, discovery, the Lease) must not
/// depend on it. With it, any missing verb elsewhere would go unnoticed.
#[tokio::test]
async fn the_installed_rbac_runs_the_operator_as_the_deployment_starts_it() {
    let kubectl = Kubectl::new().await;
    let (_, objects) = render();
    // Least privilege: the operator may read every type, but write none but its own.
    let broad: BTreeSet<&str> = find(&objects, "ClusterRole")
        .into_iter()
        .filter(|role| {
            role["rules"].as_array().into_iter().flatten().any(|rule| {
                strings(&rule["resources"]).contains(&"*".to_owned())
                    && strings(&rule["verbs"])
                        .iter()
                        .any(|verb| !["get", "list", "watch"].contains(&verb.as_str()))
            })
        })
        .map(name)
        .collect();
    assert!(
        broad.is_empty(),
        "the install ships no role that writes every type: {broad:?}"
    );
    // For real this time: RBAC is only evaluated for objects that exist. The Deployment itself
    // is left out, as the plane has no nodes to run it; this process stands in for its pod.
    let identity: Vec<&Value> = objects
        .iter()
        .filter(|o| match kind(o) {
            "CustomResourceDefinition"
            | "Namespace"
            | "ServiceAccount"
            | "Role"
            | "RoleBinding" => true,
            "ClusterRole" => !broad.contains(name(o)),
            "ClusterRoleBinding" => {
                !broad.contains(o["roleRef"]["name"].as_str().unwrap_or_default())
            }
            _ => false,
        })
        .collect();
    // A stream of documents, not a v1 List: kubectl validates a List on the client, with an
    // OpenAPI reader that rejects the `null` the CRDs list among an optional field's enum values
    // (the API server accepts it).
    let stream: String = identity.iter().map(|o| format!("---\n{o}\n")).collect();
    // Forced, because other tests of this binary install the same CRDs under another manager.
    kubectl.run(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &stream,
    );
    let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let crds: Vec<String> = find(&objects, "CustomResourceDefinition")
        .into_iter()
        .map(|crd| format!("crd/{}", name(crd)))
        .collect();
    wait.extend(crds.iter().map(String::as_str));
    kubectl.run(&wait, "");

    let deployment = the(&objects, "Deployment");
    let namespace = namespace_of(deployment);
    let pod = &deployment["spec"]["template"]["spec"];
    let account = pod["serviceAccountName"]
        .as_str()
        .expect("serviceAccountName");
    // The admin kubeconfig acting as the ServiceAccount, so the API server judges every request
    // by the install's RBAC, as it would the pod's token.
    let mut kubeconfig = plane().await.kubeconfig();
    for user in &mut kubeconfig.auth_infos {
        if let Some(info) = user.auth_info.as_mut() {
            info.impersonate = Some(format!("system:serviceaccount:{namespace}:{account}"));
        }
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let kubeconfig_path = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig_path,
        serde_json::to_string(&kubeconfig).unwrap(),
    )
    .expect("writing the kubeconfig");

    let container = &pod["containers"][0];
    let port = free_port();
    // Loopback and free ports: the pod's 0.0.0.0:9090 and :9443 may be taken on this machine.
    let endpoint = format!("--metrics-addr=127.0.0.1:{port}");
    let webhook = format!("--webhook-addr=127.0.0.1:{}", free_port());
    let given = strings(&container["args"]);
    let mut given = given.iter();
    let mut args: Vec<String> = Vec::new();
    while let Some(arg) = given.next() {
        match arg.as_str() {
            "--metrics-addr" => {
                given.next();
                args.push(endpoint.clone());
            }
            arg if arg.starts_with("--metrics-addr=") => args.push(endpoint.clone()),
            arg if arg.starts_with("--webhook-addr=") => args.push(webhook.clone()),
            arg => args.push(arg.to_owned()),
        }
    }
    assert!(
        args.iter().any(|a| a.starts_with("--metrics-addr=")),
        "the Deployment passes --metrics-addr"
    );
    args.extend([
        "--kubeconfig".to_owned(),
        kubeconfig_path.display().to_string(),
        // Leaves other tests' controllers to their own operators.
        "--controller-selector".to_owned(),
        format!("{OWN_OPERATOR_LABEL}=install"),
    ]);
    const POD_NAME: &str = "metascript-install-test";
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|var| {
            let name = var["name"].as_str().expect("env name").to_owned();
            let value = match (&var["value"], &var["valueFrom"]["fieldRef"]["fieldPath"]) {
                (Value::String(value), _) => value.clone(),
                (_, Value::String(field)) if field == "metadata.name" => POD_NAME.to_owned(),
                (_, Value::String(field)) if field == "metadata.namespace" => namespace.to_owned(),
                _ => panic!("env {name}: a source this test cannot stand in for: {var}"),
            };
            (name, value)
        })
        .collect();

    let log_path = dir.path().join("operator.log");
    let log = std::fs::File::create(&log_path).expect("creating the log");
    let child = Command::new(env!("CARGO_BIN_EXE_metascript"))
        .args(&args)
        .envs(env)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("starting metascript run");
    let mut operator = Reaped(child);
    let log = || {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = operator.0.try_wait().expect("polling the operator") {
            panic!(
                "metascript {} exited ({status}):\n{}",
                args.join(" "),
                log()
            );
        }
        let ready = http_get(port, "/readyz").is_some_and(|(code, _)| code == 200);
        if ready && metric(port, "metascript_shard_writable") == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the operator was not ready and writing after {WAIT:?}:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its Lease, as docs/operations.md names it: in the default group, in the operator's
    // namespace.
    let leases: Api<Lease> = Api::namespaced(client().await, namespace);
    let holders: Vec<String> = leases
        .list(&ListParams::default().labels("metascript.dev/shard-group=metascript"))
        .await
        .expect("listing the shard Leases")
        .items
        .into_iter()
        .filter_map(|lease| lease.spec?.holder_identity)
        .collect();
    assert!(
        holders
            .iter()
            .any(|holder| holder.starts_with(&format!("{POD_NAME}_"))),
        "holderIdentity {holders:?}"
    );
    // The webhook's certificate, created by the operator as the RBAC allows.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client().await, namespace);
    let secret = secrets
        .get("metascript-webhook-tls")
        .await
        .expect("the webhook certificate's Secret");
    assert!(
        secret
            .data
            .is_some_and(|d| d.contains_key("tls.crt") && d.contains_key("ca.crt"))
    );
}

/// kubectl against the shared plane, as its admin.
pub(crate) struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub(crate) async fn new() -> Kubectl {
        Kubectl {
            kubeconfig: plane().await.kubeconfig_path().to_path_buf(),
        }
    }

    /// Runs kubectl with `input` on stdin, failing the test unless it succeeds; returns its
    /// stdout and stderr.
    pub(crate) fn run(&self, args: &[&str], input: &str) -> (String, String) {
        run(
            Command::new(kubectl())
                .arg("--kubeconfig")
                .arg(&self.kubeconfig)
                .args(args),
            input,
        )
    }
}

/// The kubectl `hack/control-plane/build.sh` builds beside the plane's binaries.
pub(crate) fn kubectl() -> PathBuf {
    metascript::testing::kubectl().unwrap_or_else(|| {
        panic!(
            "kubectl not found: hack/control-plane/build.sh builds it beside the control-plane \
             binaries (unless METASCRIPT_BUILD_KUBECTL=0); set {BIN_DIR_ENV} to the directory it prints"
        )
    })
}

pub(crate) fn run(command: &mut Command, input: &str) -> (String, String) {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    // From a thread, so a child that answers before it has read everything cannot deadlock us.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output().expect("waiting for kubectl");
    let _ = writer.join();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{stderr}{stdout}",
        output.status
    );
    (stdout, stderr)
}

/// `kubectl kustomize deploy/`: what `kubectl apply -k deploy/` sends, and its objects.
pub(crate) fn render() -> (String, Vec<Value>) {
    render_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"))
}

pub(crate) fn render_dir(dir: &Path) -> (String, Vec<Value>) {
    let (yaml, _) = run(Command::new(kubectl()).arg("kustomize").arg(dir), "");
    let objects: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).expect("kustomize renders YAML documents");
    let objects: Vec<Value> = objects.into_iter().filter(|o| !o.is_null()).collect();
    assert!(!objects.is_empty(), "kustomize rendered nothing");
    (yaml, objects)
}

/// The reference `kubectl … -o name` prints: `<kind>[.<group>]/<name>`.
pub(crate) fn kubectl_name(object: &Value) -> String {
    let kind = kind(object).to_lowercase();
    match object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
    {
        Some((group, _)) => format!("{kind}.{group}/{}", name(object)),
        None => format!("{kind}/{}", name(object)),
    }
}

pub(crate) fn kind(object: &Value) -> &str {
    object["kind"].as_str().unwrap_or_default()
}

pub(crate) fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub(crate) fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no namespace", kubectl_name(object)))
}

pub(crate) fn find<'a>(objects: &'a [Value], wanted: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| kind(o) == wanted).collect()
}

/// The one object of a kind.
pub(crate) fn the<'a>(objects: &'a [Value], wanted: &str) -> &'a Value {
    match find(objects, wanted).as_slice() {
        [one] => one,
        found => panic!("expected one {wanted}, rendered {}", found.len()),
    }
}

pub(crate) fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// Whether a label selector (matchLabels only: the install uses nothing else) selects `labels`.
pub(crate) fn selects(selector: &Value, labels: &Value) -> bool {
    assert!(
        selector["matchExpressions"].is_null(),
        "matchExpressions: teach this test"
    );
    let wanted = selector["matchLabels"].as_object().expect("matchLabels");
    !wanted.is_empty() && wanted.iter().all(|(key, value)| &labels[key] == value)
}

/// The port of `--metrics-addr HOST:PORT` (or `--metrics-addr=HOST:PORT`) in `args`.
fn metrics_port(args: &[String]) -> u16 {
    let addr = args
        .iter()
        .position(|a| a == "--metrics-addr")
        .and_then(|i| args.get(i + 1).map(String::as_str))
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--metrics-addr=")))
        .unwrap_or_else(|| panic!("the Deployment does not pass --metrics-addr: {args:?}"));
    addr.rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("--metrics-addr {addr}: no port"))
}

/// A child process killed and reaped when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The opt-in component for controllers without an account: the broad write role, and the
/// operator allowed to write as itself.
#[test]
fn the_unimpersonated_component_adds_the_broad_role_and_allows_writing_as_the_operator() {
    // An overlay as a user writes one; kustomize wants it inside the repository's tree to
    // reach deploy/ by a relative path.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir_in(root.join("target")).expect("a temp dir under target/");
    let relative = |path: &str| format!("../../{path}");
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "resources: [{}]\ncomponents: [{}]\n",
            relative("deploy"),
            relative("deploy/components/unimpersonated")
        ),
    )
    .unwrap();
    let (_, objects) = render_dir(dir.path());
    assert!(
        find(&objects, "ClusterRole")
            .iter()
            .any(|role| name(role) == "metascript-workloads"),
        "the broad role"
    );
    let deployment = the(&objects, "Deployment");
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    let allowed = env
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "METASCRIPT_ALLOW_UNIMPERSONATED")
        .expect("the variable");
    assert_eq!(allowed["value"], "true");
}
