//! What a sharded replica's caches keep, over the in-memory API: a type only its controllers'
//! targets name is kept as its share (the objects the rules select whose items it owns),
//! follows the members as they come and go, and is kept whole once anything else needs it.

use super::api::{FakeApi, Served};
use crate::api::Selection;
use crate::runtime::keys::{ControllerId, ObjRef};
use crate::runtime::replicas::shard::{Assignment, Item};
use crate::runtime::watch::share::Sharer;
use crate::store::ObjectStore;
use serde_json::json;
use tokio::sync::mpsc;

const CONFIG_MAPS: Served = Served::namespaced("v1", "ConfigMap", "configmaps");

fn name(i: usize) -> String {
    format!("cm-{i:02}")
}

#[tokio::test]
async fn a_replica_caches_its_share_follows_the_members_and_keeps_a_type_whole_when_asked() {
    let api = FakeApi::new(&[CONFIG_MAPS]);
    // 30 selected by the controller's rule, 10 not.
    for i in 0..40 {
        let team = if i < 30 { "x" } else { "y" };
        api.put(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": name(i), "labels": {"team": team}},
        }));
    }
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (informers, resolved) = api.informers("configmaps", events_tx).await;
    let resource = resolved.resource.clone();
    let controller = ControllerId::new(crate::api::TEST_KIND, "d");
    let sharer = Sharer {
        controller: controller.clone(),
        selections: vec![Selection {
            labels: Some(serde_json::from_value(json!({"matchLabels": {"team": "x"}})).unwrap()),
            annotations: None,
        }],
    };
    // The selected objects whose item replica `a` owns among `members`.
    let owned = |members: &[&str]| -> Vec<String> {
        let assignment = Assignment::of(members, "a");
        (0..30)
            .map(name)
            .filter(|name| {
                let object = ObjRef {
                    resource: resource.clone(),
                    namespace: Some("ns".into()),
                    name: name.clone(),
                };
                assignment.owns(&Item::object(&controller, &object))
            })
            .collect()
    };
    let cached = || -> Vec<String> {
        let mut names: Vec<String> = ObjectStore::list(&*informers, &resource, None)
            .map(|object| crate::object::name(&object).to_string())
            .collect();
        names.sort();
        names
    };
    let mut added = || {
        let mut names = Vec::new();
        while let Ok(event) = events.try_recv() {
            let event = crate::runtime::watch::event::ObjectEvent::from(event);
            assert!(event.old.is_none(), "only additions: {event:?}");
            names.push(crate::object::name(event.new.as_ref().unwrap()).to_string());
        }
        names.sort();
        names
    };

    informers
        .reshare(Assignment::of(&["a", "b"], "a"))
        .await
        .unwrap();
    let lease = informers.share(&resolved, None, sharer).await.unwrap();
    let share = owned(&["a", "b"]);
    assert!(!share.is_empty() && share.len() < 30, "{share:?}");
    assert_eq!(cached(), share);
    assert_eq!(added(), share, "what it holds is announced, nothing else");

    // b leaves: a lists the type again and takes what came its way, announced as added.
    informers
        .reshare(Assignment::of(&["a"], "a"))
        .await
        .unwrap();
    let all: Vec<String> = (0..30).map(name).collect();
    assert_eq!(cached(), all);
    let came: Vec<String> = all.iter().filter(|n| !share.contains(n)).cloned().collect();
    assert_eq!(added(), came);

    // b joins again: a drops b's share without a word.
    informers
        .reshare(Assignment::of(&["a", "b"], "a"))
        .await
        .unwrap();
    assert_eq!(cached(), share);
    assert_eq!(added(), Vec::<String>::new());

    // Another controller needs the type whole (as a child, an input, a read): every object is
    // listed again and kept from then on, the other replica's share included.
    informers.ensure(&resolved).await.unwrap();
    assert_eq!(informers.len(&resource), 40);
    informers
        .reshare(Assignment::of(&["a", "b", "c"], "a"))
        .await
        .unwrap();
    assert_eq!(informers.len(&resource), 40);
    drop(lease);
}
