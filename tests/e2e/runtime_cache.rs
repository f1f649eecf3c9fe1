//! The operator's discovery and watch caches against a real apiserver: what `ensure` promises,
//! which events a change produces, the owner index, shared watches, and types that appear
//! after start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::{WAIT, client, eventually, test_namespace, unique_name};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use metascript::api::ResourceRef;
use metascript::object;
use metascript::resources::{ResolveError, ResourceResolver};
use metascript::runtime::watch::cache::{CacheError, Informers};
use metascript::runtime::watch::discovery::{Discovery, ResolvedType};
use metascript::runtime::watch::event::{CacheEvent, ObjectEvent};
use metascript::store::ObjectStore as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn reference(api_version: &str, resource: &str) -> ResourceRef {
    ResourceRef {
        api_version: api_version.into(),
        resource: resource.into(),
    }
}

fn config_map(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data,
    }))
    .expect("a valid ConfigMap")
}

/// The events of one test: the watches are cluster-wide, so other tests' objects of the same
/// type arrive too and are skipped by namespace.
struct Events {
    rx: mpsc::UnboundedReceiver<CacheEvent>,
    namespace: String,
}

impl Events {
    /// The next event about an object in this test's namespace.
    async fn next(&mut self) -> ObjectEvent {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let event = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no event in {} within {WAIT:?}", self.namespace))
                .expect("the event channel closed");
            let event = ObjectEvent::from(event);
            let object = event.new.as_ref().or(event.old.as_ref()).expect("a state");
            if object::namespace(object) == Some(self.namespace.as_str()) {
                return event;
            }
        }
    }

    /// Every event in this namespace up to and including the first one about `name`.
    async fn until(&mut self, name: &str) -> Vec<ObjectEvent> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await;
            let done = name_of(&event) == name;
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

fn name_of(event: &ObjectEvent) -> &str {
    object::name(event.new.as_ref().or(event.old.as_ref()).expect("a state"))
}

/// A fresh namespace, discovery and informers, and this test's event stream.
async fn setup(test: &str) -> (kube::Client, String, Arc<Discovery>, Arc<Informers>, Events) {
    let client = client().await;
    let namespace = test_namespace(&client, test).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let discovery = Discovery::new(client.clone());
    let informers = Informers::new(client.clone(), tx, Default::default());
    let events = Events {
        rx,
        namespace: namespace.clone(),
    };
    (client, namespace, discovery, informers, events)
}

async fn config_maps(discovery: &Discovery) -> ResolvedType {
    discovery
        .resolve(&reference("v1", "configmaps"))
        .await
        .expect("resolving configmaps")
}

#[tokio::test]
async fn the_initial_list_is_cached_before_ensure_returns() {
    let (client, ns, discovery, informers, mut events) = setup("initial-list").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    for name in ["a", "b", "c"] {
        api.create(
            &PostParams::default(),
            &config_map(name, json!({"k": name})),
        )
        .await
        .expect("creating a ConfigMap");
    }
    let resolved = config_maps(&discovery).await;
    assert_eq!(resolved.resource.kind, "ConfigMap");
    assert!(resolved.resource.namespaced && !resolved.resource.has_status);

    informers.ensure(&resolved).await.expect("watching");
    let resource = &resolved.resource;
    assert!(informers.is_watched(resource));
    // No waiting: `ensure` returned, so the list is there.
    let listed: Vec<_> = informers.list(resource, Some(&ns)).collect();
    let names: Vec<&str> = listed.iter().map(|o| object::name(o)).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let b = informers
        .get(resource, Some(&ns), "b")
        .expect("b is cached");
    // List items come without apiVersion and kind; the cache fills them in.
    assert_eq!(object::api_version(&b), "v1");
    assert_eq!(object::kind(&b), "ConfigMap");
    assert_eq!(b["data"]["k"], "b");
    assert!(b.pointer("/metadata/managedFields").is_none());
    assert!(
        informers
            .list(resource, None)
            .filter(|o| object::namespace(o) == Some(&ns))
            .count()
            == 3
    );
    assert!(informers.len(resource) >= 3);

    // The initial list is announced as additions.
    let mut added = Vec::new();
    for _ in 0..3 {
        let event = events.next().await;
        assert!(event.old.is_none() && event.new.is_some(), "{event:?}");
        assert_eq!(event.resource, *resource);
        added.push(name_of(&event).to_owned());
    }
    added.sort();
    assert_eq!(added, ["a", "b", "c"]);
}

#[tokio::test]
async fn add_update_and_delete_reach_the_cache_and_the_event_stream() {
    let (client, ns, discovery, informers, mut events) = setup("add-update-delete").await;
    let resolved = config_maps(&discovery).await;
    let resource = &resolved.resource;
    informers.ensure(&resolved).await.expect("watching");
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);

    api.create(
        &PostParams::default(),
        &config_map("obj", json!({"v": "1"})),
    )
    .await
    .expect("creating");
    let added = events.next().await;
    assert_eq!(name_of(&added), "obj");
    assert!(added.old.is_none());
    assert_eq!(added.new.as_ref().unwrap()["data"]["v"], "1");
    let cached = informers.get(resource, Some(&ns), "obj").expect("cached");
    assert!(Arc::ptr_eq(&cached, added.new.as_ref().unwrap().whole()));

    api.patch(
        "obj",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .expect("updating");
    let updated = events.next().await;
    assert_eq!(updated.old.as_ref().unwrap()["data"]["v"], "1");
    assert_eq!(updated.new.as_ref().unwrap()["data"]["v"], "2");
    assert_eq!(
        informers.get(resource, Some(&ns), "obj").unwrap()["data"]["v"],
        "2"
    );

    api.delete("obj", &DeleteParams::default())
        .await
        .expect("deleting");
    let deleted = events.next().await;
    assert!(deleted.new.is_none());
    assert_eq!(deleted.old.as_ref().unwrap()["data"]["v"], "2");
    assert!(informers.get(resource, Some(&ns), "obj").is_none());
    assert!(informers.list(resource, Some(&ns)).is_empty());
}

#[tokio::test]
async fn a_change_of_only_resource_version_and_managed_fields_is_not_an_event() {
    let (client, ns, discovery, informers, mut events) = setup("bookkeeping").await;
    let resolved = config_maps(&discovery).await;
    let resource = &resolved.resource;
    informers.ensure(&resolved).await.expect("watching");
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);

    let first = api
        .patch(
            "shared",
            &PatchParams::apply("manager-a"),
            &Patch::Apply(config_map("shared", json!({"k": "v"}))),
        )
        .await
        .expect("first apply");
    assert_eq!(name_of(&events.next().await), "shared");

    // A second manager applying identical content only adds itself to managedFields: a real
    // write with a new resourceVersion, but nothing a controller could act on.
    let second = api
        .patch(
            "shared",
            &PatchParams::apply("manager-b"),
            &Patch::Apply(config_map("shared", json!({"k": "v"}))),
        )
        .await
        .expect("second apply");
    let version = second.metadata.resource_version.clone().unwrap();
    assert_ne!(first.metadata.resource_version, Some(version.clone()));

    // Events of one type arrive in order, so once the barrier's is here, the write above has
    // been seen too.
    api.create(&PostParams::default(), &config_map("barrier", json!({})))
        .await
        .expect("creating the barrier");
    let seen = events.until("barrier").await;
    assert_eq!(seen.len(), 1, "unexpected events: {seen:?}");
    // The cache still moved to the new version.
    let cached = informers.get(resource, Some(&ns), "shared").unwrap();
    assert_eq!(
        object::str_at(&cached, "/metadata/resourceVersion"),
        Some(version.as_str())
    );
}

#[tokio::test]
async fn controlled_by_finds_children_through_the_owner_index() {
    let (client, ns, discovery, informers, mut events) = setup("owner-index").await;
    let resolved = config_maps(&discovery).await;
    let resource = &resolved.resource;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let owner = api
        .create(&PostParams::default(), &config_map("owner", json!({})))
        .await
        .expect("creating the owner");
    let other = api
        .create(&PostParams::default(), &config_map("other", json!({})))
        .await
        .expect("creating another owner");
    let with_owner = |name: &str, owner: &ConfigMap, controller: bool| {
        let mut child = config_map(name, json!({}));
        child.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.metadata.name, "uid": owner.metadata.uid,
                "controller": controller,
            }))
            .unwrap(),
        ]);
        child
    };
    for child in [
        with_owner("child-1", &owner, true),
        with_owner("child-2", &owner, true),
        // Owned but not controlled, and controlled by someone else: neither is a child.
        with_owner("bystander", &owner, false),
        with_owner("foreign", &other, true),
    ] {
        api.create(&PostParams::default(), &child)
            .await
            .expect("creating a child");
    }

    informers.ensure(&resolved).await.expect("watching");
    let owner_value = informers.get(resource, Some(&ns), "owner").unwrap();
    let names = |children: Vec<Arc<Value>>| {
        let mut names: Vec<String> = children
            .iter()
            .map(|c| object::name(c).to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(informers.controlled_by(resource, &owner_value)),
        ["child-1", "child-2"]
    );

    // The index follows the watch: a new child is found, a deleted one no longer.
    api.create(&PostParams::default(), &with_owner("child-3", &owner, true))
        .await
        .expect("creating a child");
    api.delete("child-1", &DeleteParams::default())
        .await
        .expect("deleting a child");
    events.until("child-3").await;
    events.until("child-1").await;
    assert_eq!(
        names(informers.controlled_by(resource, &owner_value)),
        ["child-2", "child-3"]
    );
}

#[tokio::test]
async fn ensuring_a_type_twice_shares_one_watch_until_released() {
    let (client, ns, discovery, informers, mut events) = setup("shared-watch").await;
    let resolved = config_maps(&discovery).await;
    let resource = &resolved.resource;
    let (first, second) = tokio::join!(informers.ensure(&resolved), informers.ensure(&resolved));
    first.expect("first ensure");
    second.expect("second ensure");
    informers.ensure(&resolved).await.expect("third ensure");

    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    api.create(&PostParams::default(), &config_map("once", json!({})))
        .await
        .expect("creating");
    api.create(&PostParams::default(), &config_map("barrier", json!({})))
        .await
        .expect("creating the barrier");
    // Two watches would deliver every event twice.
    let seen = events.until("barrier").await;
    let names: Vec<&str> = seen.iter().map(name_of).collect();
    assert_eq!(names, ["once", "barrier"]);

    informers.release(resource);
    assert!(!informers.is_watched(resource));
    assert_eq!(informers.len(resource), 0);
    assert!(informers.get(resource, Some(&ns), "once").is_none());
    assert!(informers.list(resource, Some(&ns)).is_empty());

    // Watching again lists again.
    informers.ensure(&resolved).await.expect("watching again");
    assert!(informers.get(resource, Some(&ns), "once").is_some());
}

#[tokio::test]
async fn a_crd_created_after_start_is_resolved_and_watched() {
    let (client, ns, discovery, informers, mut events) = setup("late-crd").await;
    let group = format!("{}.cache.metascript.test", unique_name("late"));
    let api_version = format!("{group}/v1");
    let gadgets = reference(&api_version, "gadgets");
    assert!(matches!(
        discovery.resolve(&gadgets).await,
        Err(ResolveError::Unknown { .. })
    ));

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd_name = format!("gadgets.{group}");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                }},
            }],
        },
    }))
    .unwrap();
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("creating the CRD");
    tokio::time::timeout(
        WAIT,
        await_condition(crds, &crd_name, conditions::is_crd_established()),
    )
    .await
    .expect("the CRD was not established in time")
    .expect("watching the CRD");

    // The miss above was remembered for a moment (rate limit); the type shows up after it.
    let resolved = eventually("the new CRD to resolve", || async {
        discovery.resolve(&gadgets).await.ok()
    })
    .await;
    assert_eq!(resolved.resource.kind, "Gadget");
    assert_eq!(resolved.resource.api_version, api_version);
    assert!(resolved.resource.namespaced && resolved.resource.has_status);
    assert_eq!(
        discovery
            .api_resource(&resolved.resource)
            .map(|api| api.plural),
        Some("gadgets".to_owned())
    );

    informers.ensure(&resolved).await.expect("watching gadgets");
    let gadget_api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resolved.api);
    let mut gadget = DynamicObject::new("g1", &resolved.api);
    gadget.data = json!({"spec": {"size": 1}});
    gadget_api
        .create(&PostParams::default(), &gadget)
        .await
        .expect("creating a Gadget");
    let added = events.next().await;
    assert_eq!(added.resource, resolved.resource);
    let new = added.new.expect("an addition");
    assert_eq!(object::kind(&new), "Gadget");
    assert_eq!(new["spec"]["size"], 1);
    assert!(informers.get(&resolved.resource, Some(&ns), "g1").is_some());
}

#[tokio::test]
async fn unknown_resources_fail_fast_and_known_ones_resolve_from_the_cache() {
    let client = client().await;
    let discovery = Discovery::new(client);
    let started = Instant::now();
    for (api_version, resource) in [
        ("v1", "nonexistents"),
        ("nothing.metascript.test/v1", "things"),
        ("apps/v9", "deployments"),
    ] {
        let result = discovery.resolve(&reference(api_version, resource)).await;
        assert!(
            matches!(&result, Err(ResolveError::Unknown { .. })),
            "{api_version} {resource}: {result:?}"
        );
    }
    // Asked again within the rate limit: answered from memory.
    assert!(matches!(
        discovery.resolve(&reference("v1", "nonexistents")).await,
        Err(ResolveError::Unknown { .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );

    // The synchronous resolver the planners use answers only from what the async one found
    // (the inherent async `resolve` shadows it), and never makes a request itself.
    let deployments = reference("apps/v1", "deployments");
    assert!(matches!(
        ResourceResolver::resolve(&*discovery, &deployments),
        Err(ResolveError::Unknown { .. })
    ));
    discovery
        .resolve(&deployments)
        .await
        .expect("discovering apps/v1");
    let resolved = ResourceResolver::resolve(&*discovery, &deployments).expect("now cached");
    assert_eq!(resolved.kind, "Deployment");
    assert!(resolved.namespaced && resolved.has_status);
    let namespaces = reference("v1", "namespaces");
    discovery
        .resolve(&namespaces)
        .await
        .expect("discovering v1");
    assert!(
        !ResourceResolver::resolve(&*discovery, &namespaces)
            .unwrap()
            .namespaced
    );
}

#[tokio::test]
async fn ensure_reports_a_watch_that_cannot_list_instead_of_hanging() {
    let (_client, _ns, _discovery, informers, _events) = setup("failing-watch").await;
    // A type the apiserver does not serve: every list is a 404.
    let missing = ResolvedType {
        resource: metascript::resources::ResourceType::from(metascript::resources::TypeInfo {
            api_version: "v1".into(),
            kind: "Nonexistent".into(),
            plural: "nonexistents".into(),
            namespaced: true,
            has_status: false,
        }),
        api: kube::api::ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Nonexistent".into(),
            plural: "nonexistents".into(),
        },
    };
    let error = tokio::time::timeout(WAIT, informers.ensure(&missing))
        .await
        .expect("ensure hung on a failing watch")
        .expect_err("a type that cannot be listed was reported as watched");
    assert!(
        matches!(&error, CacheError::Watch { resource, .. } if resource == "Nonexistent.v1"),
        "{error}"
    );
    // The watch keeps retrying in the background until released.
    assert!(informers.is_watched(&missing.resource));
    assert_eq!(informers.len(&missing.resource), 0);
    informers.release(&missing.resource);
    assert!(!informers.is_watched(&missing.resource));
}

#[tokio::test]
async fn dropping_the_informers_stops_every_watch() {
    let (_client, _ns, discovery, informers, mut events) = setup("drop").await;
    informers
        .ensure(&config_maps(&discovery).await)
        .await
        .expect("watching configmaps");
    let namespaces = discovery
        .resolve(&reference("v1", "namespaces"))
        .await
        .expect("resolving namespaces");
    informers
        .ensure(&namespaces)
        .await
        .expect("watching namespaces");
    // A cluster-scoped object is found whatever namespace the caller is looking from.
    let resource = &namespaces.resource;
    assert!(informers.get(resource, None, &events.namespace).is_some());
    assert!(
        informers
            .get(resource, Some("elsewhere"), &events.namespace)
            .is_some()
    );
    assert!(
        informers
            .list(resource, Some("elsewhere"))
            .any(|o| object::name(&o) == events.namespace)
    );
    drop(informers);
    // Each watch task holds a sender; the channel closes only once every task has ended.
    tokio::time::timeout(WAIT, async { while events.rx.recv().await.is_some() {} })
        .await
        .expect("a watch task outlived the informers");
}

/// A ConfigMap in `namespace` with `labels`.
fn labelled(namespace: &str, name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
    }))
    .expect("a valid ConfigMap")
}

/// The names of events in order, with `+` for an addition, `-` for a deletion and `~` for an
/// update.
fn described(events: &[ObjectEvent]) -> Vec<String> {
    events
        .iter()
        .map(|event| {
            let sign = match (&event.old, &event.new) {
                (None, Some(_)) => '+',
                (Some(_), None) => '-',
                _ => '~',
            };
            format!("{sign}{}", name_of(event))
        })
        .collect()
}

/// Watches of what two label selectors match share one cache: an object both match is held and
/// announced once; a selector's watch stopping takes away only what no other holds; a watch of
/// every object taking over announces only what the selected ones did not hold. Each step ends
/// with a marker object whose event shows every earlier event has arrived.
#[tokio::test]
async fn label_selected_watches_share_one_cache_and_hand_over_without_doubled_events() {
    let (client, ns, discovery, informers, mut events) = setup("selected-watches").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    // Watches are cluster-wide: the run label keeps other tests' objects out of the selectors.
    let run = ns.clone();
    let create = |name: &str, group: Option<&str>| {
        let labels = match group {
            Some(group) => json!({"run": run, "group": group}),
            None => json!({}),
        };
        let object = labelled(&ns, name, labels);
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &object)
                .await
                .expect("creating a ConfigMap");
        }
    };
    for (name, group) in [
        ("only-a", Some("a")),
        ("only-b", Some("b")),
        ("both", Some("both")),
        ("neither", Some("none")),
        ("unlabelled", None),
    ] {
        create(name, group).await;
    }
    let resolved = config_maps(&discovery).await;
    let resource = &resolved.resource;
    let cached = |informers: &Informers| -> Vec<String> {
        informers
            .list(resource, Some(&ns))
            .map(|o| object::name(&o).to_owned())
            .collect()
    };

    let lease_a = informers
        .select(&resolved, &format!("run={run},group in (a,both)"))
        .await
        .expect("watching group a");
    assert_eq!(cached(&informers), ["both", "only-a"]);
    let mut listed = described(&events.until("only-a").await);
    if listed.len() == 1 {
        listed.extend(described(&events.until("both").await));
    }
    listed.sort();
    assert_eq!(listed, ["+both", "+only-a"]);

    let lease_b = informers
        .select(&resolved, &format!("run={run},group in (b,both)"))
        .await
        .expect("watching group b");
    assert_eq!(cached(&informers), ["both", "only-a", "only-b"]);
    create("marker-1", Some("a")).await;
    assert_eq!(
        described(&events.until("marker-1").await),
        ["+only-b", "+marker-1"],
        "`both` was held already: its second watch is no news"
    );

    // Moving an object from one selection to the other keeps it cached.
    api.patch(
        "only-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"group": "b"}}})),
    )
    .await
    .expect("relabelling");
    create("marker-2", Some("b")).await;
    events.until("marker-2").await;
    let moved = informers
        .get(resource, Some(&ns), "only-a")
        .expect("still cached: the other watch selects it");
    assert_eq!(moved["metadata"]["labels"]["group"], "b");

    // The last lease on group a ends: only what no other watch holds leaves, as deletions.
    drop(lease_a);
    create("marker-3", Some("b")).await;
    assert_eq!(
        described(&events.until("marker-3").await),
        ["-marker-1", "+marker-3"]
    );
    assert_eq!(
        cached(&informers),
        ["both", "marker-2", "marker-3", "only-a", "only-b"]
    );

    // A watch of every object takes over: only what was not cached is news, and the selected
    // watch is retired (its lease ending later changes nothing).
    informers
        .ensure(&resolved)
        .await
        .expect("watching everything");
    create("marker-4", None).await;
    let mut taken_over = described(&events.until("marker-4").await);
    let last = taken_over.pop();
    assert_eq!(last.as_deref(), Some("+marker-4"));
    taken_over.sort();
    assert_eq!(taken_over, ["+marker-1", "+neither", "+unlabelled"]);
    drop(lease_b);
    create("marker-5", None).await;
    assert_eq!(described(&events.until("marker-5").await), ["+marker-5"]);
    assert_eq!(
        informers.len(resource),
        informers.list(resource, None).len()
    );
    assert_eq!(cached(&informers).len(), 10);
}
