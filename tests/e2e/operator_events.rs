//! Events from scripts (`event`) against a real kube-apiserver: published on the target, about
//! the controller, and counted rather than repeated when a sync says the same thing again.

use crate::operator_reads::reading_decorator;
use crate::support::operator::{apply, get, operator};
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::core::v1::Event;
use kube::api::ListParams;
use serde_json::{Value, json};

const TEAM_RHAI: &str = include_str!("../../scripts/namespace-team/sync.rhai");
const TEAM_LUA: &str = include_str!("../../scripts/namespace-team/sync.lua");

fn deployment(namespace: &str, controller: &str, poke: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": namespace,
            "labels": {"test-controller": controller},
            "annotations": {"example.com/poke": poke}
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web"}]}
            }
        }
    })
}

/// The events about one object, as `kubectl describe` finds them.
async fn events_about(events: &kube::Api<Event>, uid: &str) -> Vec<Event> {
    let about = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
    events.list(&about).await.expect("listing events").items
}

#[tokio::test]
async fn a_scripts_event_shows_on_the_target_once_and_is_counted_on_repeats() {
    let client = client().await;
    operator().await;
    for (language, code) in [("rhai", TEAM_RHAI), ("lua", TEAM_LUA)] {
        let name = unique_name(&format!("events-{language}"));
        // A test namespace has no `team` label: the script's Warning case.
        let namespace = test_namespace(&client, &format!("events-{language}")).await;
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
        apply(&client, &deployment(&namespace, &name, "1")).await;
        let target = get(&client, &deployment(&namespace, &name, "1"))
            .await
            .expect("the Deployment exists");
        let uid = target["metadata"]["uid"]
            .as_str()
            .expect("a uid")
            .to_string();
        let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &namespace);
        let no_team = |found: Vec<Event>| -> Vec<Event> {
            found
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("NoTeam"))
                .collect()
        };
        let first = eventually(&format!("{language}: the script's Event"), || async {
            no_team(events_about(&events, &uid).await).pop()
        })
        .await;
        assert_eq!(first.type_.as_deref(), Some("Warning"), "{language}");
        assert_eq!(
            first.message.as_deref(),
            Some(format!("Namespace {namespace} has no team label").as_str()),
            "{language}"
        );
        assert_eq!(
            first.reporting_component.as_deref(),
            Some("metascript.dev/operator"),
            "{language}"
        );
        let related = first.related.clone().expect("a related object");
        assert_eq!(related.kind.as_deref(), Some("DecoratorController"));
        assert_eq!(related.name.as_deref(), Some(name.as_str()));

        // Another sync saying the same thing counts on the same Event instead of a new one.
        apply(&client, &deployment(&namespace, &name, "2")).await;
        let repeated = eventually(&format!("{language}: the repeat counted"), || async {
            let found = no_team(events_about(&events, &uid).await);
            let counted = found.first().and_then(|e| e.series.as_ref()?.count);
            counted.is_some_and(|count| count >= 2).then_some(found)
        })
        .await;
        assert_eq!(
            repeated.len(),
            1,
            "{language}: one Event object for the repeated message"
        );
        assert_eq!(repeated[0].metadata.name, first.metadata.name, "{language}");
    }
}
