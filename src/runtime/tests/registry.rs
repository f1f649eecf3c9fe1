//! The registry's life of a controller: installed, a reload whose scripts do not compile
//! (the last good version keeps running), removed.

use super::cluster::{CONFIG_MAPS, Cluster, WIDGETS};
use super::decorator::{controller, controller_running, widget};
use crate::api::API_VERSION;
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
