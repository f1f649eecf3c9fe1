//! Proves the test control plane is a real Kubernetes: the behaviours the operator depends on
//! (CRDs, server-side apply, watches, garbage collection, namespace teardown, RBAC) work end to
//! end against etcd, kube-apiserver and kube-controller-manager.

use crate::support::{WAIT, client, eventually, test_namespace, unique_name};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams, WatchEvent, WatchParams,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, ResourceExt as _};
use serde_json::json;

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name },
        "data": data.iter().copied().collect::<std::collections::BTreeMap<_, _>>(),
    }))
    .expect("a valid ConfigMap")
}

#[tokio::test]
async fn serves_the_pinned_kubernetes_version() {
    let client = client().await;
    let version = client.apiserver_version().await.expect("GET /version");
    assert_eq!(version.git_version, "v1.36.3");
}

#[tokio::test]
async fn crd_is_established_and_custom_objects_round_trip() {
    let client = client().await;
    let ns = test_namespace(&client, "crd").await;
    // CRDs are cluster-scoped: a unique group keeps concurrent test binaries' CRDs apart.
    let group = format!("{}.smoke.metascript.test", unique_name("crd"));
    let crd_name = format!("widgets.{group}");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": crd_name },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget" },
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {
                                "size": { "type": "integer", "minimum": 1 },
                                "colour": { "type": "string" },
                            },
                        },
                        "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    },
                }},
            }],
        },
    }))
    .expect("a valid CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("creating the CRD");
    tokio::time::timeout(
        WAIT,
        await_condition(crds.clone(), &crd_name, conditions::is_crd_established()),
    )
    .await
    .expect("CRD did not become Established in time")
    .expect("watching the CRD");

    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let mut widget = DynamicObject::new("first", &resource);
    widget.data = json!({ "spec": { "size": 3, "colour": "blue" } });
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .expect("creating a Widget");

    let read = widgets.get("first").await.expect("reading the Widget back");
    assert_eq!(read.data["spec"], json!({ "size": 3, "colour": "blue" }));
    assert!(read.uid().is_some(), "the apiserver assigned no uid");

    // The schema is enforced: this is the real apiextensions-apiserver, not a key-value store.
    let mut invalid = DynamicObject::new("invalid", &resource);
    invalid.data = json!({ "spec": { "size": 0 } });
    let err = widgets
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("a Widget violating the schema's minimum was accepted");
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 422),
        "expected 422 Invalid, got {err}"
    );

    // The status subresource is separate from the main resource.
    let status = json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget",
                         "status": { "phase": "Ready" } });
    widgets
        .patch_status("first", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patching the Widget's status");
    let read = widgets.get("first").await.expect("reading the Widget");
    assert_eq!(read.data["status"]["phase"], "Ready");
}

#[tokio::test]
async fn server_side_apply_records_the_field_manager() {
    let client = client().await;
    let ns = test_namespace(&client, "ssa").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let params = PatchParams::apply("metascript-smoke").force();

    api.patch(
        "applied",
        &params,
        &Patch::Apply(config_map("applied", &[("a", "1")])),
    )
    .await
    .expect("first apply");
    let applied = api
        .patch(
            "applied",
            &params,
            &Patch::Apply(config_map("applied", &[("b", "2")])),
        )
        .await
        .expect("second apply");

    // Apply semantics: a field the manager stopped applying is removed, not merged.
    let data = applied.data.expect("data");
    assert_eq!(data.get("b").map(String::as_str), Some("2"));
    assert!(
        !data.contains_key("a"),
        "field `a` survived re-apply: {data:?}"
    );

    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|entry| (entry.manager, entry.operation))
        .collect();
    assert!(
        managers.contains(&(Some("metascript-smoke".into()), Some("Apply".into()))),
        "managedFields do not name the field manager: {managers:?}"
    );

    // A different manager applying the same field conflicts unless it forces.
    let err = api
        .patch(
            "applied",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(config_map("applied", &[("b", "3")])),
        )
        .await
        .expect_err("a conflicting apply was accepted");
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 409),
        "expected 409 Conflict, got {err}"
    );
}

#[tokio::test]
async fn watch_sees_a_change() {
    let client = client().await;
    let ns = test_namespace(&client, "watch").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let created = api
        .create(
            &PostParams::default(),
            &config_map("watched", &[("v", "1")]),
        )
        .await
        .expect("creating the ConfigMap");
    let version = created.resource_version().expect("resourceVersion");

    // Watching from the creation's resourceVersion means the change below cannot be missed.
    let mut events = api
        .watch(&WatchParams::default().timeout(60), &version)
        .await
        .expect("starting the watch")
        .boxed();
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "v": "2" } })),
    )
    .await
    .expect("patching the ConfigMap");

    let event = tokio::time::timeout(WAIT, events.try_next())
        .await
        .expect("no watch event in time")
        .expect("watch stream failed")
        .expect("watch stream ended");
    match event {
        WatchEvent::Modified(cm) => {
            assert_eq!(cm.name_any(), "watched");
            assert_eq!(
                cm.data.unwrap_or_default().get("v").map(String::as_str),
                Some("2")
            );
        }
        other => panic!("expected Modified, got {other:?}"),
    }
}

#[tokio::test]
async fn owned_object_is_garbage_collected_after_its_owner_is_deleted() {
    let client = client().await;
    let ns = test_namespace(&client, "gc").await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let owner = api
        .create(&PostParams::default(), &config_map("owner", &[]))
        .await
        .expect("creating the owner");
    let mut dependent = config_map("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("owner uid"),
        ..OwnerReference::default()
    }]);
    api.create(&PostParams::default(), &dependent)
        .await
        .expect("creating the dependent");
    // An unowned bystander proves the collector deletes by owner, not indiscriminately.
    api.create(&PostParams::default(), &config_map("bystander", &[]))
        .await
        .expect("creating the bystander");

    api.delete("owner", &DeleteParams::background())
        .await
        .expect("deleting the owner");

    eventually("the garbage collector to delete the dependent", || async {
        match api
            .get_opt("dependent")
            .await
            .expect("reading the dependent")
        {
            None => Some(()),
            Some(_) => None,
        }
    })
    .await;
    assert!(
        api.get_opt("bystander")
            .await
            .expect("reading the bystander")
            .is_some(),
        "the unowned ConfigMap was deleted too"
    );
}

#[tokio::test]
async fn namespace_deletion_completes() {
    let client = client().await;
    let ns = test_namespace(&client, "ns-delete").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    config_maps
        .create(
            &PostParams::default(),
            &config_map("content", &[("k", "v")]),
        )
        .await
        .expect("creating content in the namespace");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("deleting the namespace");

    // Without the namespace controller the namespace would stay Terminating forever, because
    // the `kubernetes` finalizer is only removed once its content is gone.
    eventually("the namespace to be removed", || async {
        match namespaces
            .get_opt(&ns)
            .await
            .expect("reading the namespace")
        {
            None => Some(()),
            Some(_) => None,
        }
    })
    .await;
    let left = config_maps
        .list(&ListParams::default())
        .await
        .expect("listing the deleted namespace's ConfigMaps");
    assert!(left.items.is_empty(), "content survived: {:?}", left.items);
}

#[tokio::test]
async fn rbac_denies_an_unprivileged_user() {
    let mut kubeconfig = crate::support::kubeconfig().await;
    let user = unique_name("nobody");
    for auth in &mut kubeconfig.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            // The admin (system:masters) may impersonate anyone; the impersonated user has no
            // bindings, so RBAC must refuse it.
            info.impersonate = Some(user.clone());
        }
    }
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .expect("client config");
    let nobody = kube::Client::try_from(config).expect("client");
    let err = Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&ListParams::default())
        .await
        .expect_err("an unbound user listed ConfigMaps");
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 403),
        "expected 403 Forbidden, got {err}"
    );
}
