//! Tenants, as the attacker (or the honest team) would be: users the API server knows only by
//! name and group (impersonation headers, as `kubectl --as`), granted what docs/security.md's
//! recipe grants a team; and `metascript run`'s admission webhook called by the API server
//! itself, so every request goes through authentication, RBAC and admission as in a cluster.

use super::operator::{OWN_OPERATOR_LABEL, apply};
use super::process::{OperatorProcess, free_port};
use super::{eventually, kubeconfig, plane, unique_name};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// A user of a team: a name and a group, as an authenticator would give them.
#[derive(Clone, Debug)]
pub struct Tenant {
    pub user: String,
    pub group: String,
}

impl Tenant {
    pub fn new(team: &str) -> Tenant {
        Tenant {
            user: unique_name(&format!("{team}-user")),
            group: unique_name(&format!("{team}-group")),
        }
    }

    /// A client that sends every request as this user (the admin impersonating them): the API
    /// server authorizes it and sends its `userInfo` to admission webhooks.
    pub async fn client(&self) -> kube::Client {
        let mut config = kubeconfig().await;
        for auth in &mut config.auth_infos {
            if let Some(info) = auth.auth_info.as_mut() {
                info.impersonate = Some(self.user.clone());
                info.impersonate_groups = Some(vec![self.group.clone()]);
            }
        }
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
            .await
            .expect("a tenant's client configuration");
        kube::Client::try_from(config).expect("a tenant's client")
    }

    /// What docs/security.md's recipe grants a team working in `namespace`: writing controller
    /// objects (`metascript-editor`, cluster-wide), using the namespace's ServiceAccounts
    /// (`metascript-author`, there) and editing the namespace's ConfigMaps (a lean plane runs
    /// no role aggregation, so the built-in `edit` is empty there).
    pub async fn grant(&self, client: &kube::Client, namespace: &str) {
        author_roles(client).await;
        let subject =
            json!([{"kind": "Group", "name": self.group, "apiGroup": "rbac.authorization.k8s.io"}]);
        apply(client, &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "edit", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]
        }))
        .await;
        apply(client, &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{}-editor", self.group)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metascript-editor"},
            "subjects": subject
        }))
        .await;
        for (kind, role) in [("ClusterRole", "metascript-author"), ("Role", "edit")] {
            apply(client, &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": format!("{}-{role}", self.group), "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": subject
            }))
            .await;
        }
    }
}

/// The ClusterRoles `deploy/rbac-authors.yaml` ships, applied from that very file.
pub async fn author_roles(client: &kube::Client) {
    let path = super::cli::root().join("deploy/rbac-authors.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/rbac-authors.yaml");
    for document in metascript::yaml::parse_documents(&text).expect("the file is YAML") {
        apply(client, &document).await;
    }
}

/// A ServiceAccount in `namespace` that may read ConfigMaps there and label them, and nothing
/// else: what a decorator of ConfigMaps needs.
pub async fn config_map_account(client: &kube::Client, namespace: &str, account: &str) {
    apply(client, &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}})).await;
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch"]}]);
    grant(client, namespace, account, account, rules).await;
}

/// A Role `role` in `namespace` with `rules`, bound to the ServiceAccount `account` there.
pub async fn grant(
    client: &kube::Client,
    namespace: &str,
    role: &str,
    account: &str,
    rules: Value,
) {
    apply(
        client,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": role, "namespace": namespace},
            "rules": rules
        }),
    )
    .await;
    apply(
        client,
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("{role}-{account}"), "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
        }),
    )
    .await;
}

/// `metascript run` serving the admission webhook the API server calls for the objects
/// labelled [`AdmissionWebhook::labels`] (and serving the controllers so labelled).
pub struct AdmissionWebhook {
    /// Kept for its life: dropping it stops the operator.
    _operator: OperatorProcess,
    /// The label value that routes objects to this webhook and this operator.
    pub instance: String,
    pub port: u16,
}

impl AdmissionWebhook {
    /// Starts one whose certificate lives in `namespace`. `authenticated`: it is given the
    /// plane's webhook client CA (`--webhook-client-ca`), so only the API server can call it.
    pub async fn start(
        client: &kube::Client,
        namespace: &str,
        authenticated: bool,
        extra: &[&str],
    ) -> AdmissionWebhook {
        let instance = unique_name("admission");
        AdmissionWebhook::start_as(client, namespace, authenticated, &instance, None, extra).await
    }

    /// [`AdmissionWebhook::start`] for the objects labelled [`AdmissionWebhook::labels_of`]
    /// `instance` (some may exist already), with the operator's own kubeconfig (another
    /// identity) when given.
    pub async fn start_as(
        client: &kube::Client,
        namespace: &str,
        authenticated: bool,
        instance: &str,
        kubeconfig: Option<&std::path::Path>,
        extra: &[&str],
    ) -> AdmissionWebhook {
        let instance = instance.to_string();
        let port = free_port();
        // Only this webhook's objects are sent to it.
        let selector = json!({"matchLabels": {"metascript.test/admission": instance}});
        let webhook = |name: &str, group: &str, resources: Value, operations: Value| {
            json!({
                "name": name,
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate")},
                "rules": [{"apiGroups": [group], "apiVersions": ["*"], "operations": operations, "resources": resources}],
                "objectSelector": selector,
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 10
            })
        };
        let (brake_skip, brake_policy) = rollout_brake();
        let mut controllers = webhook(
            "controllers.metascript.dev",
            "metascript.dev",
            json!([
                "decoratorcontrollers",
                "mapcontrollers",
                "compositecontrollers"
            ]),
            json!(["CREATE", "UPDATE", "DELETE"]),
        );
        controllers["matchConditions"] = brake_skip;
        let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": instance},
            "webhooks": [
                controllers,
                webhook("scripts.metascript.dev", "", json!(["configmaps"]), json!(["CREATE", "UPDATE"]))
            ]
        }))
        .unwrap();
        let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        configurations
            .create(&PostParams::default(), &configuration)
            .await
            .expect("creating the webhook configuration");
        // The brake's policy, bound to this webhook's objects only.
        let mut policy = brake_policy;
        policy["metadata"] = json!({"name": instance});
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(policy).unwrap();
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("creating the brake's policy");
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": instance},
            "spec": {"policyName": instance, "validationActions": ["Deny"],
                     "matchResources": {"objectSelector": selector}}
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("binding the brake's policy");
        let client_ca = plane().await.webhook_client_ca();
        let mut args = vec![
            "--webhook-addr".to_string(),
            format!("127.0.0.1:{port}"),
            "--webhook-secret".into(),
            format!("{namespace}/webhook-tls"),
            "--webhook-configuration".into(),
            instance.clone(),
            "--webhook-names".into(),
            "127.0.0.1,localhost".into(),
        ];
        if authenticated {
            args.extend([
                "--webhook-client-ca".into(),
                client_ca.display().to_string(),
            ]);
        }
        args.extend(extra.iter().map(|arg| arg.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let operator = match kubeconfig {
            Some(kubeconfig) => OperatorProcess::start_with(&instance, kubeconfig, &args).await,
            None => OperatorProcess::start(&instance, &args).await,
        };
        eventually("the CA published in the configuration", || async {
            let current = configurations.get(&instance).await.ok()?;
            current
                .webhooks?
                .iter()
                .all(|w| w.client_config.ca_bundle.is_some())
                .then_some(())
        })
        .await;
        let webhook = AdmissionWebhook {
            _operator: operator,
            instance,
            port,
        };
        // The API server may take a moment to call it after the CA is published.
        let probe: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "probe", "namespace": namespace, "labels": webhook.labels()},
        }))
        .unwrap();
        let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), namespace);
        let dry_run = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        eventually("the API server calling the webhook", || async {
            config_maps.create(&dry_run, &probe).await.ok().map(drop)
        })
        .await;
        webhook
    }

    /// Stops the operator serving the webhook: the API server can no longer call it, and
    /// refuses what the webhook would have judged.
    pub fn stop(self) {
        drop(self._operator);
    }

    /// The labels that send an object to this webhook, and a controller to this operator.
    pub fn labels(&self) -> Value {
        AdmissionWebhook::labels_of(&self.instance)
    }

    /// [`AdmissionWebhook::labels`] of the webhook for `instance`, before it starts.
    pub fn labels_of(instance: &str) -> Value {
        json!({OWN_OPERATOR_LABEL: instance, "metascript.test/admission": instance})
    }
}

/// What `deploy/webhook.yaml` ships for the rollout brake, from that very file: the controller
/// webhook's `matchConditions` (which let the brake skip it) and the ValidatingAdmissionPolicy
/// that checks the brake instead.
fn rollout_brake() -> (Value, Value) {
    let path = super::cli::root().join("deploy/webhook.yaml");
    let text = std::fs::read_to_string(&path).expect("deploy/webhook.yaml");
    let documents = metascript::yaml::parse_documents(&text).expect("the file is YAML");
    let of_kind = |kind: &str| {
        documents
            .iter()
            .find(|document| document["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("deploy/webhook.yaml has a {kind}"))
    };
    let configuration = of_kind("ValidatingWebhookConfiguration");
    let skip = configuration["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|webhook| webhook["name"] == "controllers.metascript.dev")
        .map(|webhook| webhook["matchConditions"].clone())
        .expect("the controllers webhook");
    (skip, of_kind("ValidatingAdmissionPolicy"))
}
