//! The registry's life of a controller: installed, a reload whose scripts do not compile
//! (the last good version keeps running), removed.

use super::cluster::{CONFIG_MAPS, Cluster, WIDGETS};
use super::decorator::{controller, controller_running, widget};
use crate::api::{API_VERSION, ResourceRef};
use crate::reads::ReadAccess;
use crate::runtime::keys::{ControllerId, ObjRef, Work, WorkKey};
use crate::script::CallScope;
use serde_json::json;

#[tokio::test]
async fn a_bad_reload_keeps_the_last_good_version_until_the_controller_is_removed() {
    let mut cluster = Cluster::start().await;
    let decorators = crate::runtime::kind::name::<crate::kinds::decorator::DecoratorKind>();
    cluster.put(controller()).await;
    assert_eq!(
        cluster.kind(decorators).names(),
        ["decorate".to_string()].into()
    );

    cluster.put(controller_running("this is not rhai (")).await;
    cluster.put(widget(json!({"children": ["a"]}))).await;
    assert_eq!(
        cluster.api.names("v1", CONFIG_MAPS.plural, "team"),
        ["w-a"],
        "the last good hooks still sync"
    );
    cluster
        .kind(decorators)
        .write_statuses(&cluster.context)
        .await;
    let object = cluster
        .api
        .get(API_VERSION, decorators.plural(), "", "decorate");
    let conditions = object
        .map(|o| o["status"]["conditions"].clone())
        .unwrap_or_default();
    let failed = conditions
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["status"] == "False");
    let reason = failed.map(|c| c["reason"].clone());
    assert_eq!(
        reason,
        Some(json!("ScriptError")),
        "the status says why: {conditions:#}"
    );

    cluster
        .delete(API_VERSION, decorators.plural(), "", "decorate")
        .await;
    assert!(cluster.kind(decorators).names().is_empty(), "removed");
    assert_eq!(
        cluster.api.names(API_VERSION, decorators.plural(), ""),
        Vec::<String>::new(),
        "its cleanup finalizer released"
    );
    let target = cluster
        .api
        .get(WIDGETS.api_version, WIDGETS.plural, "team", "w");
    let target = target.expect("the target stays");
    assert!(
        crate::object::finalizers(&target).is_empty(),
        "its targets released: {target:#}"
    );
    cluster.writes();
    cluster.put(widget(json!({"children": ["b"]}))).await;
    assert_eq!(cluster.writes(), [], "a removed controller syncs nothing");
}

#[tokio::test]
async fn reads_that_a_removed_controllers_work_records_late_are_refused() {
    let mut cluster = Cluster::start().await;
    let decorators = crate::runtime::kind::name::<crate::kinds::decorator::DecoratorKind>();
    cluster.put(controller()).await;
    let context = cluster.context.clone();
    let id = ControllerId::new(decorators, "decorate");
    let reference = ResourceRef {
        api_version: CONFIG_MAPS.api_version.into(),
        resource: CONFIG_MAPS.plural.into(),
    };
    let config_maps = context.discovery.cached(&reference).unwrap().resource;
    let key = WorkKey::new(
        &id,
        Work::Object(ObjRef {
            resource: config_maps.clone(),
            namespace: Some("team".into()),
            name: "w".into(),
        }),
    );
    // What a work item's hooks read: one ConfigMap.
    let hooks_read = || {
        let access = ReadAccess::new(context.informers.clone(), vec![config_maps.clone()]);
        let args = [json!("v1"), json!("ConfigMap"), json!("team"), json!("x")];
        access.get(&args, usize::MAX).unwrap();
        CallScope::reading(access)
    };
    context.record_reads(&key, &hooks_read());
    assert!(context.dependencies.holds_any(&id));

    cluster
        .delete(API_VERSION, decorators.plural(), "", "decorate")
        .await;
    assert!(!context.dependencies.holds_any(&id), "its reads forgotten");
    // Its work still running when it went records its reads after, or forgets them: nothing
    // would ever take them, or the gauge's label that counts them, out.
    context.record_reads(&key, &hooks_read());
    context.forget_reads(&key);
    assert!(!context.dependencies.holds_any(&id), "late reads refused");
    let mut exported = String::new();
    prometheus_client::encoding::text::encode(&mut exported, &context.metrics.registry()).unwrap();
    let gauge = exported
        .lines()
        .find(|line| line.starts_with("metascript_dependencies{") && line.contains("decorate"));
    assert_eq!(gauge, None);

    // Loaded again, it records as ever.
    cluster.put(controller()).await;
    context.record_reads(&key, &hooks_read());
    assert!(context.dependencies.holds_any(&id));
}
