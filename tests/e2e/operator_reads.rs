//! Reads from scripts (`get`, `list`) against a real kube-apiserver: a change to what a hook read
//! re-syncs exactly the work that read it, in both languages.

use crate::support::manifests::{decorator, inline_sync};
use crate::support::operator::{api_for, apply, get, operator, wait_for};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::object::label;
use metascript::runtime::ControllerId;
use metascript::runtime::report::metrics::ControllerLabels;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const TEAM_RHAI: &str = include_str!("../../scripts/namespace-team/sync.rhai");
const TEAM_LUA: &str = include_str!("../../scripts/namespace-team/sync.lua");

/// Annotates a ConfigMap with the names of the Services of its namespace that match the label
/// selector in its annotation `example.com/service-selector`.
const INDEX_RHAI: &str = r#"
let cm = request.object;
let services = list("v1", "Service", #{
    namespace: namespace(cm),
    labelSelector: annotation(cm, "example.com/service-selector"),
});
let names = "";
for s in services {
    if names != "" { names += ","; }
    names += name(s);
}
#{ annotations: #{ "example.com/services": names } }
"#;
const INDEX_LUA: &str = r#"
local cm = request.object
local services = list("v1", "Service", {
    namespace = namespace(cm),
    labelSelector = annotation(cm, "example.com/service-selector"),
})
local names = {}
for _, s in ipairs(services) do table.insert(names, name(s)) end
return { annotations = { ["example.com/services"] = table.concat(names, ",") } }
"#;

/// A DecoratorController of the objects labelled `test-controller: <name>` of one type, whose
/// sync hook may read one core type. Status-only changes of targets are not routed (the
/// Deployment controller's status writes are not these tests' business).
pub fn reading_decorator(
    name: &str,
    (api_version, resource): (&str, &str),
    reads: &str,
    language: &str,
    code: &str,
) -> Value {
    let mut controller = decorator(name, (api_version, resource), inline_sync(language, code));
    controller["spec"]["resources"][0]["ignoreStatusChanges"] = true.into();
    controller["spec"]["reads"] = json!([{"apiVersion": "v1", "resource": reads}]);
    controller
}

fn deployment(namespace: &str, name: &str, controller: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"test-controller": controller}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web"}]}
            }
        }
    })
}

fn namespace(name: &str, team: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": team}}})
}

#[tokio::test]
async fn relabelling_a_namespace_resyncs_exactly_its_deployments() {
    let client = client().await;
    let operator = &operator().await.operator;
    for (language, code) in [("rhai", TEAM_RHAI), ("lua", TEAM_LUA)] {
        let name = unique_name(&format!("team-{language}"));
        let shop = test_namespace(&client, &format!("team-shop-{language}")).await;
        let lab = test_namespace(&client, &format!("team-lab-{language}")).await;
        apply(&client, &namespace(&shop, "payments")).await;
        apply(&client, &namespace(&lab, "research")).await;
        apply(
            &client,
            &reading_decorator(
                &name,
                ("apps/v1", "deployments"),
                "namespaces",
                language,
                code,
            ),
        )
        .await;
        let web = deployment(&shop, "web", &name);
        let api = deployment(&shop, "api", &name);
        let probe = deployment(&lab, "probe", &name);
        for object in [&web, &api, &probe] {
            apply(&client, object).await;
        }
        for (object, team) in [(&web, "payments"), (&api, "payments"), (&probe, "research")] {
            wait_for(&client, object, &format!("{language}: team {team}"), |o| {
                label(o, "example.com/team") == Some(team)
            })
            .await;
        }
        let id = ControllerId::new(metascript::kinds::decorator::KIND, &name);
        let dependencies = operator
            .metrics()
            .dependencies
            .get_or_create(&ControllerLabels::of(&id));
        eventually(&format!("{language}: one read per Deployment"), || async {
            (dependencies.get() == 3).then_some(())
        })
        .await;
        eventually(&format!("{language}: settled"), || async {
            (operator.pending(&id) == 0).then_some(())
        })
        .await;
        let syncs_before = operator.metrics().syncs_of(&id);
        let probe_before = get(&client, &probe).await.expect("probe exists");

        let started = Instant::now();
        apply(&client, &namespace(&shop, "checkout")).await;
        for object in [&web, &api] {
            wait_for(
                &client,
                object,
                &format!("{language}: team checkout"),
                |o| label(o, "example.com/team") == Some("checkout"),
            )
            .await;
        }
        let took = started.elapsed();
        eventually(&format!("{language}: settled again"), || async {
            (operator.pending(&id) == 0).then_some(())
        })
        .await;
        // Exactly the two Deployments of the relabelled Namespace ran; the other one did not.
        assert_eq!(
            operator.metrics().syncs_of(&id) - syncs_before,
            2,
            "{language}: only shop's Deployments re-sync"
        );
        let probe_after = get(&client, &probe).await.expect("probe exists");
        assert_eq!(
            probe_after["metadata"]["resourceVersion"], probe_before["metadata"]["resourceVersion"],
            "{language}: the other namespace's Deployment is not rewritten"
        );
        // Loose: the issue's goal is 2 s; a loaded CI machine gets some slack.
        assert!(took < Duration::from_secs(10), "{language}: took {took:?}");
        eprintln!("{language}: relabel to re-labelled Deployments took {took:?}");
    }
}

#[tokio::test]
async fn a_listed_service_joining_or_leaving_the_selector_updates_the_index() {
    let client = client().await;
    operator().await;
    for (language, code) in [("rhai", INDEX_RHAI), ("lua", INDEX_LUA)] {
        let name = unique_name(&format!("index-{language}"));
        let ns = test_namespace(&client, &format!("index-{language}")).await;
        apply(
            &client,
            &reading_decorator(&name, ("v1", "configmaps"), "services", language, code),
        )
        .await;
        let index = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "index", "namespace": ns,
                         "labels": {"test-controller": name},
                         "annotations": {"example.com/service-selector": "app=web"}}
        });
        let service = |service: &str, app: &str| {
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": service, "namespace": ns, "labels": {"app": app}},
                   "spec": {"ports": [{"port": 80}]}})
        };
        let indexed = |expected: &'static str| {
            let (client, index) = (client.clone(), index.clone());
            async move {
                wait_for(
                    &client,
                    &index,
                    &format!("{language}: services {expected:?}"),
                    |o| o["metadata"]["annotations"]["example.com/services"] == expected,
                )
                .await;
            }
        };
        apply(&client, &index).await;
        indexed("").await;
        apply(&client, &service("web-1", "web")).await;
        indexed("web-1").await;
        apply(&client, &service("web-2", "web")).await;
        apply(&client, &service("db", "db")).await;
        indexed("web-1,web-2").await;
        // Leaving the selector counts as a change to the list.
        apply(&client, &service("web-1", "db")).await;
        indexed("web-2").await;
        let web_2 = service("web-2", "web");
        api_for(&client, &web_2)
            .delete("web-2", &Default::default())
            .await
            .expect("delete web-2");
        indexed("").await;
    }
}

/// The Ready condition of a DecoratorController, once the operator has reported one.
async fn ready_condition(client: &kube::Client, name: &str) -> Value {
    let like = json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}});
    let object = wait_for(client, &like, &format!("{name}: Ready reported"), |o| {
        o["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready"))
    })
    .await;
    object["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default()
}

#[tokio::test]
async fn reads_beyond_the_service_account_or_of_secrets_are_refused_at_load() {
    let client = client().await;
    operator().await;
    let ns = test_namespace(&client, "reads-refused").await;
    // An account with no roles at all: it may not list ConfigMaps.
    apply(
        &client,
        &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nobody", "namespace": ns}}),
    )
    .await;
    let controller = |name: &str, resource: &str, account: Option<&str>| {
        let mut controller = decorator(name, ("v1", "configmaps"), inline_sync("rhai", "#{}"));
        let spec = &mut controller["spec"];
        spec["reads"] = json!([{"apiVersion": "v1", "resource": resource}]);
        if let Some(account) = account {
            spec["serviceAccountName"] = account.into();
            spec["serviceAccountNamespace"] = ns.clone().into();
        }
        controller
    };

    let forbidden = unique_name("reads-forbidden");
    apply(
        &client,
        &controller(&forbidden, "configmaps", Some("nobody")),
    )
    .await;
    let ready = ready_condition(&client, &forbidden).await;
    assert_eq!(ready["status"], "False", "{ready}");
    assert_eq!(ready["reason"], "ReadForbidden", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("ConfigMap.v1")
            && message.contains(&format!("system:serviceaccount:{ns}:nobody")),
        "{message}"
    );

    let secrets = unique_name("reads-secrets");
    apply(&client, &controller(&secrets, "secrets", None)).await;
    let ready = ready_condition(&client, &secrets).await;
    assert_eq!(ready["status"], "False", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("v1/secrets cannot be read by scripts")),
        "{ready}"
    );
}
