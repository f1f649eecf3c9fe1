//! Staged rollouts (`spec.rollout`), in Rhai and Lua: a shadow revision writes nothing and
//! reports exactly what it would do; a canary of 10% of 200 targets writes to those and no
//! others; a canary whose hook fails rolls back, and the targets it served get the serving
//! revision's output again; promotion (annotation or `metascript rollout promote`) finishes a
//! rollout; a leader failover and a replica that starts from nothing both go on with a
//! rollout where it was.

use crate::support::cli::{metascript, stdout_of};
use crate::support::operator::{
    OWN_OPERATOR_LABEL, apply, get, operator, regarding_name, wait_for, wait_for_condition,
    wait_for_event,
};
use crate::support::process::{self, OperatorProcess};
use crate::support::{client, eventually, plane, test_namespace, unique_name};
use futures::StreamExt as _;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use metascript::api::{CanaryStep, PROMOTE_ANNOTATION};
use metascript::plan::rollout::{Share, position};
use metascript::resources::StaticResolver;
use metascript::runtime::{ControllerId, ObjRef};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A DecoratorController labelling ConfigMaps `rollout: <name>` with `rev: <revision>`; it fails
/// on the targets named in `failing`.
fn controller(
    name: &str,
    language: &str,
    revision: &str,
    failing: &[&str],
    rollout: Value,
) -> Value {
    let script = match language {
        "rhai" => format!(
            "let failing = {failing:?};\n\
             if failing.contains(name(request.object)) {{ throw \"revision {revision} fails here\"; }}\n\
             #{{ labels: #{{ rev: \"{revision}\" }} }}"
        ),
        _ => {
            let failing: Vec<String> = failing.iter().map(|n| format!("[{n:?}] = true")).collect();
            format!(
                "local failing = {{ {} }}\n\
                 if failing[request.object.metadata.name] then error(\"revision {revision} fails here\") end\n\
                 return {{ labels = {{ rev = \"{revision}\" }} }}",
                failing.join(", ")
            )
        }
    };
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": {"rollout": name}}}],
            "hooks": {"sync": {"script": {"language": language, "inline": script}}},
            "rollout": rollout,
        }
    })
}

fn target_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("t-{i:03}")).collect()
}

/// Creates the targets, a few at a time.
async fn create_targets(
    client: &kube::Client,
    namespace: &str,
    controller: &str,
    names: &[String],
) {
    futures::stream::iter(names.iter().map(|name| {
        let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": {"rollout": controller}}});
        async move { apply(client, &target).await }
    }))
    .buffer_unordered(8)
    .collect::<Vec<()>>()
    .await;
}

/// Each target's `rev` label and resourceVersion.
async fn targets(
    client: &kube::Client,
    namespace: &str,
    controller: &str,
) -> BTreeMap<String, (String, String)> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default().labels(&format!("rollout={controller}")))
        .await
        .expect("listing the targets")
        .items
        .into_iter()
        .map(|target| {
            let rev = target
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get("rev"))
                .cloned()
                .unwrap_or_default();
            (
                target.metadata.name.unwrap_or_default(),
                (rev, target.metadata.resource_version.unwrap_or_default()),
            )
        })
        .collect()
}

/// Waits until every target's `rev` is what `expected` says for it.
async fn wait_for_revs(
    client: &kube::Client,
    namespace: &str,
    controller: &str,
    what: &str,
    expected: impl Fn(&str) -> &'static str,
) -> BTreeMap<String, (String, String)> {
    eventually(what, || async {
        let now = targets(client, namespace, controller).await;
        now.iter()
            .all(|(name, (rev, _))| rev == expected(name))
            .then_some(now)
    })
    .await
}

/// Waits until the targets in `share` are at `version` and the others still at v1.
async fn wait_for_share(
    client: &kube::Client,
    namespace: &str,
    controller: &str,
    share: &BTreeSet<String>,
    version: &'static str,
) -> BTreeMap<String, (String, String)> {
    let what = format!("the canary's share at {version}");
    wait_for_revs(client, namespace, controller, &what, |target| {
        if share.contains(target) {
            version
        } else {
            "v1"
        }
    })
    .await
}

/// The targets a canary step of `percent` serves: as the operator picks them, by a stable hash
/// of the work item (`ConfigMap.v1 <namespace>/<name>`).
fn canary_share(namespace: &str, names: &[String], percent: u32) -> BTreeSet<String> {
    let config_maps = StaticResolver::with_builtins()
        .find_kind("v1", "ConfigMap")
        .expect("ConfigMap is built in");
    let unit = |name: &String| {
        ObjRef {
            resource: config_maps.clone(),
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
        .to_string()
    };
    let step = CanaryStep {
        percent: Some(percent),
        ..CanaryStep::default()
    };
    let share = Share::of_step(&step, names.iter().map(|name| position(&unit(name))));
    names
        .iter()
        .filter(|name| share.serves(&unit(name)))
        .cloned()
        .collect()
}

/// The shared operator (which installs the CRDs, and the namespace snapshots are kept in), a
/// client, a namespace for the test and a name for its controller.
async fn setup(test: &str, controller: &str) -> (kube::Client, String, String) {
    operator().await;
    let client = client().await;
    let namespace = test_namespace(&client, test).await;
    (client, namespace, unique_name(controller))
}

/// Starts a controller at `v1` over new targets named `names` (with `own`, labelled for an
/// operator of its own) and waits until every target is at v1 and the status names the
/// revision serving. Returns the targets then, and that revision.
async fn serve_v1(
    client: &kube::Client,
    namespace: &str,
    controller_v1: &Value,
    names: &[String],
) -> (BTreeMap<String, (String, String)>, String) {
    let name = metascript::object::name(controller_v1);
    apply(client, controller_v1).await;
    create_targets(client, namespace, name, names).await;
    let before = wait_for_revs(client, namespace, name, "every target at v1", |_| "v1").await;
    let serving = wait_for(
        client,
        controller_v1,
        "the serving revision in status",
        |o| rollout_of(o)["serving"].is_string(),
    )
    .await;
    let serving = rollout_of(&serving)["serving"]
        .as_str()
        .unwrap()
        .to_string();
    (before, serving)
}

fn rollout_of(object: &Value) -> &Value {
    &object["status"]["rollout"]
}

async fn kubeconfig_arg() -> String {
    plane().await.kubeconfig_path().display().to_string()
}

async fn shadow_reports_exactly_and_writes_nothing(language: &str) {
    let (client, namespace, name) = setup("rollout-shadow", &format!("shadow-{language}")).await;
    let shadow = json!({"strategy": "Shadow"});
    let mut names = target_names(10);
    names.extend(["bad-a".to_string(), "bad-b".to_string()]);
    let (before, serving) = serve_v1(
        &client,
        &namespace,
        &controller(&name, language, "v1", &[], shadow.clone()),
        &names,
    )
    .await;

    // The new revision labels v2 and fails on the bad targets: evaluated, never written.
    let candidate = controller(&name, language, "v2", &["bad-a", "bad-b"], shadow.clone());
    apply(&client, &candidate).await;
    let evaluated = wait_for(
        &client,
        &candidate,
        "a shadow evaluation of every target",
        |o| rollout_of(o)["shadow"]["evaluated"] == 12,
    )
    .await;
    let rollout = rollout_of(&evaluated);
    assert_eq!(rollout["serving"], serving.as_str(), "{rollout}");
    let candidate_revision = rollout["candidate"]
        .as_str()
        .expect("a candidate")
        .to_string();
    assert_ne!(candidate_revision, serving);
    let shadow_report = &rollout["shadow"];
    assert_eq!(shadow_report["wouldUpdate"], 10, "{shadow_report}");
    assert_eq!(shadow_report["errors"], 2, "{shadow_report}");
    assert_eq!(shadow_report["wouldCreate"], 0, "{shadow_report}");
    assert_eq!(shadow_report["wouldDelete"], 0, "{shadow_report}");
    let examples = shadow_report["examples"].to_string();
    assert!(
        examples.contains(r#"metadata.labels.rev: \"v1\" -> \"v2\""#)
            && examples.contains("fails here"),
        "examples show a change and an error: {examples}"
    );
    let condition = wait_for_condition(&client, &candidate, "Rollout", "False").await;
    assert_eq!(condition["reason"], "Shadowing", "{condition}");
    // Its calls are the controller's: the serving v1 never fails, the candidate's two failures
    // on the bad targets are counted (and with them its usage and budget).
    let id = ControllerId::new(metascript::kinds::decorator::KIND, &name);
    let failed = operator()
        .await
        .operator
        .metrics()
        .hook_failures_of(&id, metascript::kinds::decorator::SYNC);
    assert!(failed >= 2, "the shadow's failed calls counted: {failed}");
    assert_eq!(
        targets(&client, &namespace, &name).await,
        before,
        "a shadow revision writes nothing"
    );
    let status = stdout_of(
        &metascript([
            "rollout",
            "status",
            &format!("dec/{name}"),
            "--kubeconfig",
            &kubeconfig_arg().await,
        ]),
        "rollout status",
    );
    assert!(
        status.contains(&format!("candidate: revision {candidate_revision}"))
            && status.contains("12 evaluated, 0 to create, 10 to change, 0 to delete"),
        "{status}"
    );

    // Promoted: it serves every target (and fails where it fails).
    let promoted = stdout_of(
        &metascript([
            "rollout",
            "promote",
            &format!("dec/{name}"),
            "--kubeconfig",
            &kubeconfig_arg().await,
        ]),
        "rollout promote",
    );
    assert!(promoted.contains(&candidate_revision), "{promoted}");
    wait_for_revs(
        &client,
        &namespace,
        &name,
        "the good targets at v2",
        |target| {
            if target.starts_with("bad") {
                "v1"
            } else {
                "v2"
            }
        },
    )
    .await;
    let done = wait_for(&client, &candidate, "the candidate serving", |o| {
        rollout_of(o)["serving"] == candidate_revision.as_str()
            && rollout_of(o)["candidate"].is_null()
    })
    .await;
    assert!(
        rollout_of(&done)["shadow"].is_null(),
        "{}",
        rollout_of(&done)
    );
    wait_for_condition(&client, &candidate, "Rollout", "True").await;
}

#[tokio::test]
async fn a_shadow_revision_reports_exactly_and_writes_nothing_rhai() {
    shadow_reports_exactly_and_writes_nothing("rhai").await;
}

#[tokio::test]
async fn a_shadow_revision_reports_exactly_and_writes_nothing_lua() {
    shadow_reports_exactly_and_writes_nothing("lua").await;
}

async fn canary_writes_only_its_share(language: &str) {
    let (client, namespace, name) = setup("rollout-canary", &format!("canary-{language}")).await;
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 10, "intervalSeconds": 3600}]});
    let names = target_names(200);
    let (before, _) = serve_v1(
        &client,
        &namespace,
        &controller(&name, language, "v1", &[], canary.clone()),
        &names,
    )
    .await;

    let share = canary_share(&namespace, &names, 10);
    assert!(
        (8..40).contains(&share.len()),
        "10% of 200: {}",
        share.len()
    );
    let candidate = controller(&name, language, "v2", &[], canary.clone());
    apply(&client, &candidate).await;
    let after = wait_for_share(&client, &namespace, &name, &share, "v2").await;
    let status = wait_for(&client, &candidate, "the canary's counts", |o| {
        rollout_of(o)["canary"]["serving"] == share.len()
    })
    .await;
    assert_eq!(rollout_of(&status)["step"], 0);
    assert_eq!(rollout_of(&status)["canary"]["failing"], 0);
    for (target, (_, version)) in &after {
        if !share.contains(target) {
            assert_eq!(
                &before[target].1, version,
                "{target} outside the canary was not written"
            );
        }
    }
    wait_for_event(&client, None, "RolloutStarted", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;

    // Promoted by annotation: every target.
    let revision = rollout_of(&status)["candidate"]
        .as_str()
        .unwrap()
        .to_string();
    let mut promoted = candidate.clone();
    promoted["metadata"]["annotations"] = json!({PROMOTE_ANNOTATION: revision});
    apply(&client, &promoted).await;
    wait_for_revs(&client, &namespace, &name, "every target at v2", |_| "v2").await;
    wait_for_event(&client, None, "Promoted", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;
}

#[tokio::test]
async fn a_canary_of_ten_percent_writes_only_to_those_targets_rhai() {
    canary_writes_only_its_share("rhai").await;
}

#[tokio::test]
async fn a_canary_of_ten_percent_writes_only_to_those_targets_lua() {
    canary_writes_only_its_share("lua").await;
}

async fn failing_canary_rolls_back(language: &str) {
    let (client, namespace, name) = setup("rollout-back", &format!("rollback-{language}")).await;
    let canary = json!({"strategy": "Canary", "maxErrors": 0,
                        "steps": [{"percent": 50, "intervalSeconds": 3600}]});
    let names = target_names(24);
    let (before, _) = serve_v1(
        &client,
        &namespace,
        &controller(&name, language, "v1", &[], canary.clone()),
        &names,
    )
    .await;

    // The new revision fails on one target of its share.
    let share = canary_share(&namespace, &names, 50);
    let failing = share.iter().next().expect("a target in the share").clone();
    let candidate = controller(&name, language, "v2", &[failing.as_str()], canary.clone());
    apply(&client, &candidate).await;
    let held = wait_for(&client, &candidate, "the rollback in status", |o| {
        rollout_of(o)["halted"]["reason"] == "RolledBack" && rollout_of(o)["candidate"].is_null()
    })
    .await;
    let rollout = rollout_of(&held);
    assert!(rollout["candidate"].is_null(), "{rollout}");
    assert!(
        rollout["halted"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("maxErrors (0)"),
        "{rollout}"
    );
    let condition = wait_for_condition(&client, &candidate, "Rollout", "False").await;
    assert_eq!(condition["reason"], "RolledBack", "{condition}");
    wait_for_event(&client, None, "RolledBack", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;
    // What the candidate served is the serving revision's again; nothing else was touched.
    let after = wait_for_revs(
        &client,
        &namespace,
        &name,
        "every target at v1 again",
        |_| "v1",
    )
    .await;
    for (target, (_, version)) in &after {
        if !share.contains(target) {
            assert_eq!(
                &before[target].1, version,
                "{target} outside the canary was not written"
            );
        }
    }
    // Held back: a later look finds it still so (the newest spec is the rolled-back one).
    let again = get(&client, &candidate).await.expect("the controller");
    assert_eq!(
        rollout_of(&again)["halted"]["revision"],
        rollout["halted"]["revision"]
    );
}

#[tokio::test]
async fn a_failing_canary_rolls_back_and_nothing_else_changes_rhai() {
    failing_canary_rolls_back("rhai").await;
}

#[tokio::test]
async fn a_failing_canary_rolls_back_and_nothing_else_changes_lua() {
    failing_canary_rolls_back("lua").await;
}

/// Short, so failovers are quick.
const LEASE_SECONDS: u64 = 5;

async fn replica(instance: &str, namespace: &str, lease: &str) -> OperatorProcess {
    let extra = ["--status-interval", "0.3"];
    process::replica(instance, namespace, lease, LEASE_SECONDS, &extra).await
}

fn leads(replica: &OperatorProcess) -> bool {
    process::leads(replica) == Some(true)
}

fn syncs(replica: &OperatorProcess, controller: &str) -> f64 {
    replica
        .metric(&format!(
            "metascript_syncs_total{{kind=\"decorator\",controller=\"{controller}\"}}"
        ))
        .unwrap_or(0.0)
}

/// After a leader change: the new leader has synced every target again (taking over syncs
/// everything) and written none, and the rollout is where it was.
async fn rollout_held_through_failover(
    client: &kube::Client,
    leader: &OperatorProcess,
    controller: &Value,
    namespace: &str,
    targets_before: &BTreeMap<String, (String, String)>,
    candidate: &str,
) {
    let name = metascript::object::name(controller);
    eventually("the new leader leads", || async {
        leads(leader).then_some(())
    })
    .await;
    eventually("the new leader synced every target", || async {
        (syncs(leader, name) >= targets_before.len() as f64).then_some(())
    })
    .await;
    assert_eq!(
        &targets(client, namespace, name).await,
        targets_before,
        "the new leader serves each target from the revision that served it"
    );
    let status = get(client, controller).await.expect("the controller");
    assert_eq!(
        rollout_of(&status)["candidate"],
        candidate,
        "{}",
        rollout_of(&status)
    );
    assert_eq!(rollout_of(&status)["step"], 0);
}

#[tokio::test]
async fn a_rollout_goes_on_through_a_failover_and_a_restart() {
    let (client, namespace, name) = setup("rollout-failover", "rollout-failover").await;
    let lease = unique_name("lease");
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 30, "intervalSeconds": 3600}]});
    let own = |mut controller: Value| {
        controller["metadata"]["labels"] = json!({OWN_OPERATOR_LABEL: name});
        controller
    };
    let mut a = replica(&name, &namespace, &lease).await;
    let mut b = replica(&name, &namespace, &lease).await;
    let names = target_names(30);
    serve_v1(
        &client,
        &namespace,
        &own(controller(&name, "rhai", "v1", &[], canary.clone())),
        &names,
    )
    .await;
    let share = canary_share(&namespace, &names, 30);
    let candidate = own(controller(&name, "rhai", "v2", &[], canary.clone()));
    apply(&client, &candidate).await;
    let before = wait_for_share(&client, &namespace, &name, &share, "v2").await;
    let status = wait_for(&client, &candidate, "the candidate in status", |o| {
        rollout_of(o)["candidate"].is_string() && rollout_of(o)["step"] == 0
    })
    .await;
    let revision = rollout_of(&status)["candidate"]
        .as_str()
        .unwrap()
        .to_string();
    // The serving revision is kept where a restarted replica finds it.
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        metascript::runtime::DEFAULT_NAMESPACE,
        &kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::ControllerRevision>(&()),
    );
    let kept = snapshots
        .list(&ListParams::default().labels(&format!("metascript.dev/controller={name}")))
        .await
        .expect("listing snapshots");
    assert_eq!(kept.items.len(), 1, "one snapshot: the serving revision's");

    // The leader dies: the warm standby goes on.
    let (dead, standby) = if leads(&a) {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    dead.signal(libc::SIGKILL);
    rollout_held_through_failover(&client, standby, &candidate, &namespace, &before, &revision)
        .await;

    // A replica started now knows the serving revision only from its snapshot; the standby dies.
    let fresh = replica(&name, &namespace, &lease).await;
    standby.signal(libc::SIGKILL);
    rollout_held_through_failover(&client, &fresh, &candidate, &namespace, &before, &revision)
        .await;

    // Promoted from the command line: the restarted replica serves the candidate everywhere.
    stdout_of(
        &metascript([
            "rollout",
            "promote",
            &format!("dec/{name}"),
            "--kubeconfig",
            &kubeconfig_arg().await,
        ]),
        "rollout promote",
    );
    wait_for_revs(&client, &namespace, &name, "every target at v2", |_| "v2").await;
}

/// A canary whose steps run their course is promoted on its own, step by step.
#[tokio::test]
async fn a_canary_steps_on_and_is_promoted_when_its_last_step_ends() {
    let (client, namespace, name) = setup("rollout-steps", "steps").await;
    let canary = json!({"strategy": "Canary", "steps": [
        {"percent": 20, "intervalSeconds": 1}, {"count": 15, "intervalSeconds": 1}
    ]});
    let names = target_names(20);
    serve_v1(
        &client,
        &namespace,
        &controller(&name, "lua", "v1", &[], canary.clone()),
        &names,
    )
    .await;
    let candidate = controller(&name, "lua", "v2", &[], canary);
    apply(&client, &candidate).await;
    wait_for_revs(&client, &namespace, &name, "every target at v2", |_| "v2").await;
    let step = wait_for_event(&client, None, "CanaryStep", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;
    assert!(
        step.note
            .as_deref()
            .unwrap_or_default()
            .contains("step 2 of 2"),
        "{:?}",
        step.note
    );
    wait_for_event(&client, None, "Promoted", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;
    let done = wait_for(&client, &candidate, "the candidate serving", |o| {
        rollout_of(o)["candidate"].is_null()
    })
    .await;
    assert_eq!(rollout_of(&done)["strategy"], "Canary");
    wait_for_condition(&client, &candidate, "Rollout", "True").await;
}

/// An aborted canary hands its share back to the serving revision and stays held back until
/// the controller changes again.
#[tokio::test]
async fn an_aborted_canary_gives_its_share_back_until_the_next_edit() {
    let (client, namespace, name) = setup("rollout-abort", "abort").await;
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 50, "intervalSeconds": 3600}]});
    let names = target_names(16);
    serve_v1(
        &client,
        &namespace,
        &controller(&name, "rhai", "v1", &[], canary.clone()),
        &names,
    )
    .await;
    let share = canary_share(&namespace, &names, 50);
    apply(
        &client,
        &controller(&name, "rhai", "v2", &[], canary.clone()),
    )
    .await;
    wait_for_share(&client, &namespace, &name, &share, "v2").await;
    wait_for(
        &client,
        &controller(&name, "rhai", "v2", &[], canary.clone()),
        "the candidate in status",
        |o| rollout_of(o)["candidate"].is_string(),
    )
    .await;
    let aborted = stdout_of(
        &metascript([
            "rollout",
            "abort",
            &format!("decorator/{name}"),
            "--kubeconfig",
            &kubeconfig_arg().await,
        ]),
        "rollout abort",
    );
    assert!(aborted.contains("aborted"), "{aborted}");
    wait_for_revs(
        &client,
        &namespace,
        &name,
        "every target at v1 again",
        |_| "v1",
    )
    .await;
    let held = controller(&name, "rhai", "v2", &[], canary.clone());
    let status = wait_for(&client, &held, "the abort in status", |o| {
        rollout_of(o)["halted"]["reason"] == "Aborted"
    })
    .await;
    assert!(
        rollout_of(&status)["candidate"].is_null(),
        "{}",
        rollout_of(&status)
    );
    let condition = wait_for_condition(&client, &held, "Rollout", "False").await;
    assert_eq!(condition["reason"], "Aborted", "{condition}");
    wait_for_event(&client, None, "Aborted", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;

    // The next edit is a new candidate.
    apply(&client, &controller(&name, "rhai", "v3", &[], canary)).await;
    wait_for_share(&client, &namespace, &name, &share, "v3").await;
}

/// A MapController's canary serves (parent, input) pairs: one parent's outputs come from both
/// revisions, each from the revision its input's pair is served by.
#[tokio::test]
async fn a_map_canary_serves_a_share_of_one_parents_inputs() {
    use crate::support::cluster::Cluster;
    use crate::support::transform::{TRANSFORM_CRDS, config_map, map_controller};
    use metascript::kinds::map::MAP_KEY_LABEL;
    operator().await;
    let mut cluster = Cluster::new().await;
    let group = format!("{}.example.com", unique_name("map-canary"));
    cluster
        .install(TRANSFORM_CRDS, "ConfigTemplate", &group)
        .await;
    let namespace = test_namespace(&cluster.client, "map-canary").await;
    let name = unique_name("map-canary");
    let controller = |version: &str| {
        let map = format!(
            "return {{ outputs = {{ {{ apiVersion = \"v1\", kind = \"ConfigMap\", metadata = {{ name = name(request.input) .. \"-out\" }}, data = {{ version = \"{version}\" }} }} }} }}"
        );
        let mut controller = map_controller(
            &name,
            (&format!("{group}/v1"), "configtemplates"),
            "configmaps",
            ("v1", "configmaps"),
            json!({"map": {"script": {"language": "lua", "inline": map}}}),
        );
        controller["spec"]["rollout"] =
            json!({"strategy": "Canary", "steps": [{"percent": 50, "intervalSeconds": 3600}]});
        controller
    };
    cluster.apply(&controller("one")).await;
    let parent = json!({
        "apiVersion": format!("{group}/v1"), "kind": "ConfigTemplate",
        "metadata": {"name": "t", "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"in": name}}}
    });
    cluster.apply(&parent).await;
    let sources: Vec<String> = (0..20).map(|i| format!("in-{i:02}")).collect();
    for source in &sources {
        cluster
            .apply(&config_map(
                &namespace,
                source,
                json!({"in": name}),
                json!({}),
            ))
            .await;
    }
    let outputs = || async {
        let listed = cluster
            .list(&config_map(&namespace, "x", json!({}), json!({})))
            .await;
        listed
            .into_iter()
            .filter(|o| metascript::object::name(o).ends_with("-out"))
            .map(|o| {
                (
                    metascript::object::name(&o).to_string(),
                    (
                        o["data"]["version"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        metascript::object::label(&o, MAP_KEY_LABEL)
                            .unwrap_or_default()
                            .to_string(),
                        o["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                    ),
                )
            })
            .collect::<BTreeMap<String, (String, String, String)>>()
    };
    let before = eventually("every output at version one", || async {
        let now = outputs().await;
        (now.len() == 20 && now.values().all(|(v, _, _)| v == "one")).then_some(now)
    })
    .await;
    cluster
        .wait_for(&controller("one"), "the serving revision in status", |o| {
            rollout_of(o)["serving"].is_string()
        })
        .await;
    // The pairs the candidate serves: by the parent and each input's map key.
    let parent_ref = ObjRef {
        resource: metascript::resources::ResourceType::from(metascript::resources::TypeInfo {
            api_version: format!("{group}/v1"),
            kind: "ConfigTemplate".into(),
            plural: "configtemplates".into(),
            namespaced: true,
            has_status: true,
        }),
        namespace: Some(namespace.clone()),
        name: "t".into(),
    };
    let share = Share::of_step(
        &CanaryStep {
            percent: Some(50),
            ..CanaryStep::default()
        },
        before
            .values()
            .map(|(_, key, _)| position(&format!("{parent_ref}, key {key}"))),
    );
    let served: BTreeSet<String> = before
        .iter()
        .filter(|(_, (_, key, _))| share.serves(&format!("{parent_ref}, key {key}")))
        .map(|(output, _)| output.clone())
        .collect();
    assert!(
        (3..18).contains(&served.len()),
        "about half of 20: {}",
        served.len()
    );

    cluster.apply(&controller("two")).await;
    let after = eventually("the canary's pairs at version two", || async {
        let now = outputs().await;
        now.iter()
            .all(|(output, (v, _, _))| {
                v == if served.contains(output) {
                    "two"
                } else {
                    "one"
                }
            })
            .then_some(now)
    })
    .await;
    for (output, (_, _, version)) in &after {
        if !served.contains(output) {
            assert_eq!(
                &before[output].2, version,
                "{output} outside the canary was not written"
            );
        }
    }
}

/// The API server refuses a rollout it could not carry out, with the reason.
#[tokio::test]
async fn the_api_server_refuses_a_canary_without_steps_and_a_step_without_a_share() {
    operator().await;
    let client = client().await;
    let name = unique_name("bad-rollout");
    for (rollout, reason) in [
        (
            json!({"strategy": "Canary"}),
            "a Canary rollout needs at least one step",
        ),
        (
            json!({"strategy": "Shadow", "steps": [{"percent": 10}]}),
            "steps belong to the Canary strategy",
        ),
        (
            json!({"strategy": "Canary", "steps": [{"intervalSeconds": 10}]}),
            "a step needs exactly one of percent or count",
        ),
        (
            json!({"strategy": "Canary", "steps": [{"percent": 150}]}),
            "should be less than or equal to 100",
        ),
    ] {
        let object = controller(&name, "lua", "v1", &[], rollout.clone());
        let refused = crate::support::operator::api_for(&client, &object)
            .patch(
                &name,
                &kube::api::PatchParams::apply("metascript-tests"),
                &kube::api::Patch::Apply(&object),
            )
            .await
            .expect_err(&format!("{rollout} is refused"));
        assert!(refused.to_string().contains(reason), "{rollout}: {refused}");
    }
}

/// Sharded (`--shards auto`), every replica serves the candidate's work items it owns: the
/// replica owning the controller drives the rollout with every replica's counts, so a failure
/// on another replica's share rolls the candidate back, and the others follow its steps and its
/// promotion.
#[tokio::test]
async fn sharded_replicas_roll_out_together() {
    let (client, namespace, name) = setup("rollout-sharded", "rollout-sharded").await;
    let group = unique_name("shards");
    let replicas = [
        sharded(&name, &namespace, &group).await,
        sharded(&name, &namespace, &group).await,
    ];
    eventually("both replicas see each other", || async {
        replicas
            .iter()
            .all(|r| r.metric("metascript_shard_members") == Some(2.0))
            .then_some(())
    })
    .await;
    let own = |mut controller: Value| {
        controller["metadata"]["labels"] = json!({OWN_OPERATOR_LABEL: name});
        controller
    };
    let canary = |max_errors: u32| {
        json!({"strategy": "Canary", "maxErrors": max_errors, "steps": [
            {"percent": 50, "intervalSeconds": 2}, {"percent": 100, "intervalSeconds": 0}
        ]})
    };
    let names = target_names(40);
    serve_v1(
        &client,
        &namespace,
        &own(controller(&name, "lua", "v1", &[], canary(1))),
        &names,
    )
    .await;
    let worked = |replica: &OperatorProcess| syncs(replica, &name) > 0.0;
    assert!(replicas.iter().all(worked), "both replicas synced targets");

    // A candidate failing on all of its share, within a generous maxErrors: the status counts
    // what both replicas serve and what fails there (each owns about half of the share).
    let share = canary_share(&namespace, &names, 50);
    let everywhere: Vec<&str> = share.iter().map(String::as_str).collect();
    let slow = json!({"strategy": "Canary", "maxErrors": 1000,
                      "steps": [{"percent": 50, "intervalSeconds": 3600}]});
    let failing_share = own(controller(&name, "lua", "v2", &everywhere, slow));
    apply(&client, &failing_share).await;
    let counted = wait_for(
        &client,
        &failing_share,
        "the canary's counts over both replicas",
        |o| rollout_of(o)["canary"]["failing"] == share.len(),
    )
    .await;
    assert_eq!(rollout_of(&counted)["canary"]["serving"], share.len());

    // Two failures in the share, more than maxErrors 1 allows, whichever replicas own them.
    let failing: Vec<&str> = share.iter().take(2).map(String::as_str).collect();
    let broken = own(controller(&name, "lua", "v3", &failing, canary(1)));
    apply(&client, &broken).await;
    wait_for(&client, &broken, "the rollback in status", |o| {
        rollout_of(o)["halted"]["reason"] == "RolledBack" && rollout_of(o)["candidate"].is_null()
    })
    .await;
    wait_for_revs(
        &client,
        &namespace,
        &name,
        "every target at v1 again",
        |_| "v1",
    )
    .await;

    // A good revision steps through both shares on both replicas, and serves everything.
    let fixed = own(controller(&name, "lua", "v4", &[], canary(1)));
    apply(&client, &fixed).await;
    wait_for_revs(&client, &namespace, &name, "every target at v4", |_| "v4").await;
    wait_for(&client, &fixed, "the candidate promoted", |o| {
        rollout_of(o)["candidate"].is_null() && rollout_of(o)["halted"].is_null()
    })
    .await;
}

async fn sharded(instance: &str, namespace: &str, group: &str) -> OperatorProcess {
    let extra = ["--status-interval", "0.3"];
    process::sharded_replica(instance, namespace, group, LEASE_SECONDS, &extra).await
}

/// The brake with the admission webhook down: promote, abort and undo skip it and the API
/// server checks them itself, so alice, who may use the controller's account, can set each,
/// and bob, who may write controllers but not use that account, cannot. Any other change is
/// still the webhook's, and is refused while it is down; `rollout status` says it is.
#[tokio::test]
async fn the_brake_works_while_the_webhook_is_down() {
    use crate::support::operator::{api_for, try_apply};
    use crate::support::tenants::{AdmissionWebhook, Tenant, config_map_account};
    use kube::api::{Patch, PatchParams};
    let admin = client().await;
    let operator_namespace = test_namespace(&admin, "brake-op").await;
    let team_a = test_namespace(&admin, "brake-a").await;
    let team_b = test_namespace(&admin, "brake-b").await;
    let webhook = AdmissionWebhook::start(&admin, &operator_namespace, true, &[]).await;
    config_map_account(&admin, &team_a, "bot").await;
    let (alice, bob) = (Tenant::new("brake-a"), Tenant::new("brake-b"));
    alice.grant(&admin, &team_a).await;
    bob.grant(&admin, &team_b).await;
    let (as_alice, as_bob) = (alice.client().await, bob.client().await);
    let name = unique_name("brake");
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 50}]});
    let mut controller = controller(&name, "rhai", "v1", &[], canary);
    controller["metadata"]["labels"] = webhook.labels();
    controller["spec"]["serviceAccountName"] = "bot".into();
    controller["spec"]["serviceAccountNamespace"] = team_a.clone().into();
    try_apply(&as_alice, &controller)
        .await
        .expect("alice writes a controller running as her team's account");
    webhook.stop();

    let mut changed = controller.clone();
    changed["spec"]["resyncPeriodSeconds"] = 30.into();
    let refused = try_apply(&as_alice, &changed)
        .await
        .expect_err("a spec change needs the webhook");
    assert!(refused.contains("failed calling webhook"), "{refused}");
    let status = stdout_of(
        &metascript([
            "rollout",
            "status",
            &format!("dec/{name}"),
            "--kubeconfig",
            &kubeconfig_arg().await,
        ]),
        "rollout status",
    );
    assert!(
        status.contains("admission webhook: UNREACHABLE"),
        "{status}"
    );

    let patch = |key: &str| json!({"metadata": {"annotations": {key: "0123456789"}}});
    let params = PatchParams::default();
    // The brake with anything else that makes the controller act is the webhook's to judge.
    let abort = metascript::api::ABORT_ANNOTATION;
    for with_more in [
        json!({"metadata": {"labels": {"brake-test": "x"}, "annotations": {abort: "0123456789"}}}),
        json!({"metadata": {"annotations": {abort: "0123456789",
                                            "metascript.dev/sync-requested-at": "now"}}}),
    ] {
        let refused = api_for(&as_alice, &controller)
            .patch(&name, &params, &Patch::Merge(&with_more))
            .await
            .expect_err("more than the brake needs the webhook")
            .to_string();
        assert!(
            refused.contains("failed calling webhook"),
            "{with_more}: {refused}"
        );
    }
    // A new policy takes effect when the API server's policy cache has it, a moment after it
    // is created (longer on a busy plane): bob's attempts are dry runs until one is refused.
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    for key in metascript::api::BRAKE_ANNOTATIONS {
        let refused = eventually(&format!("bob refused {key}"), || async {
            api_for(&as_bob, &controller)
                .patch(&name, &dry_run, &Patch::Merge(&patch(key)))
                .await
                .err()
                .map(|error| error.to_string())
        })
        .await;
        assert!(
            refused.contains(&format!("may not use ServiceAccount {team_a}/bot")),
            "{key}: {refused}"
        );
        let set = api_for(&as_alice, &controller)
            .patch(&name, &params, &Patch::Merge(&patch(key)))
            .await
            .unwrap_or_else(|error| panic!("alice sets {key}: {error}"));
        assert_eq!(
            metascript::object::annotation(&serde_json::to_value(set).unwrap(), key),
            Some("0123456789")
        );
    }
}

/// An undo never changes whom a controller runs as: a revision that ran as another account
/// (here the controller's account, before it was changed to none, the operator) is not served
/// again, and the `Rollout` condition says why and what to do instead.
#[tokio::test]
async fn an_undo_does_not_bring_back_a_revision_that_ran_as_another_account() {
    use crate::support::tenants::config_map_account;
    let (client, namespace, name) = setup("rollout-undo-account", "undo-account").await;
    config_map_account(&client, &namespace, "bot").await;
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 50, "intervalSeconds": 3600}]});
    let names = target_names(4);
    let mut v1 = controller(&name, "lua", "v1", &[], canary.clone());
    v1["spec"]["serviceAccountName"] = "bot".into();
    v1["spec"]["serviceAccountNamespace"] = namespace.clone().into();
    let (_, first) = serve_v1(&client, &namespace, &v1, &names).await;
    let v2 = controller(&name, "lua", "v2", &[], canary);
    apply(&client, &v2).await;
    let staged = wait_for(&client, &v2, "v2 the candidate", |o| {
        rollout_of(o)["candidate"].is_string()
    })
    .await;
    let second = rollout_of(&staged)["candidate"]
        .as_str()
        .unwrap()
        .to_string();
    let kubeconfig = kubeconfig_arg().await;
    let label = format!("decorator/{name}");
    let run = |action: &str| {
        stdout_of(
            &metascript(["rollout", action, &label, "--kubeconfig", &kubeconfig]),
            action,
        )
    };
    run("promote");
    wait_for_revs(&client, &namespace, &name, "every target at v2", |_| "v2").await;
    wait_for(&client, &v2, "v2 serving", |o| {
        rollout_of(o)["serving"] == second.as_str() && rollout_of(o)["candidate"].is_null()
    })
    .await;

    run("undo");
    let condition = wait_for_condition(&client, &v2, "Rollout", "False").await;
    assert_eq!(condition["reason"], "UndoFailed", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default();
    for part in [
        format!("revision {first}, which served before it, ran as ServiceAccount {namespace}/bot"),
        "now runs as the operator itself".to_string(),
        "apply its spec".to_string(),
    ] {
        assert!(message.contains(&part), "{part:?} in {message}");
    }
    let now = get(&client, &v2).await.expect("the controller");
    assert_eq!(rollout_of(&now)["serving"], second.as_str(), "{now}");
    let targets = targets(&client, &namespace, &name).await;
    assert!(targets.values().all(|(rev, _)| rev == "v2"), "{targets:?}");
}

/// A snapshot that cannot be saved (its namespace does not exist) is on the controller's
/// `Rollout` condition, not only in the log.
#[tokio::test]
async fn a_snapshot_that_cannot_be_saved_shows_in_the_condition() {
    let client = client().await;
    let namespace = test_namespace(&client, "rollout-nosnap").await;
    let instance = unique_name("nosnap");
    let missing = unique_name("no-such-namespace");
    let _operator = OperatorProcess::start(
        &instance,
        &["--snapshot-namespace", &missing, "--status-interval", "0.3"],
    )
    .await;
    let name = unique_name("nosnap");
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 50}]});
    let mut controller = controller(&name, "lua", "v1", &[], canary);
    controller["metadata"]["labels"] = json!({OWN_OPERATOR_LABEL: instance});
    serve_v1(&client, &namespace, &controller, &target_names(2)).await;
    let condition = wait_for_condition(&client, &controller, "Rollout", "False").await;
    assert_eq!(condition["reason"], "SnapshotNotSaved", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("ControllerRevision {missing}/")),
        "{message}"
    );
    assert!(message.contains("not found"), "{message}");
}

/// A canary's items are named by `rollout status`; after a
/// promotion, `rollout undo` serves the revision before from its snapshot; applying that
/// revision's spec again then serves it without a canary.
#[tokio::test]
async fn undo_goes_back_one_revision_and_the_old_spec_is_no_new_canary() {
    let (client, namespace, name) = setup("rollout-undo", "undo").await;
    let canary = json!({"strategy": "Canary", "steps": [{"percent": 30, "intervalSeconds": 3600}]});
    let names = target_names(10);
    let v1 = controller(&name, "rhai", "v1", &[], canary.clone());
    let (_, first) = serve_v1(&client, &namespace, &v1, &names).await;
    let share = canary_share(&namespace, &names, 30);
    assert!(!share.is_empty(), "some of 10 at 30%");
    let v2 = controller(&name, "rhai", "v2", &[], canary.clone());
    apply(&client, &v2).await;
    wait_for_share(&client, &namespace, &name, &share, "v2").await;
    let cli = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend([format!("decorator/{name}"), "--kubeconfig".into()]);
        all
    };
    let kubeconfig = kubeconfig_arg().await;
    let run = |args: &[&str], what: &str| {
        let mut all = cli(args);
        all.push(kubeconfig.clone());
        stdout_of(&metascript(all), what)
    };
    let status = eventually("the candidate's items in the condition", || async {
        let text = run(&["rollout", "status"], "rollout status");
        text.contains(&format!(
            "serves {} work item(s) at step 1 of 1:",
            share.len()
        ))
        .then_some(text)
    })
    .await;
    for target in &share {
        assert!(
            status.contains(&format!("{namespace}/{target}")),
            "{status}"
        );
    }
    let outside = names.iter().find(|n| !share.contains(*n)).unwrap();
    assert!(
        !status.contains(&format!("{namespace}/{outside},")),
        "{status}"
    );

    run(&["rollout", "promote"], "rollout promote");
    wait_for_revs(&client, &namespace, &name, "every target at v2", |_| "v2").await;
    let promoted = wait_for(&client, &v2, "v2 serving", |o| {
        rollout_of(o)["candidate"].is_null() && rollout_of(o)["serving"] != first.as_str()
    })
    .await;
    let second = rollout_of(&promoted)["serving"]
        .as_str()
        .unwrap()
        .to_string();

    let undone = run(&["rollout", "undo"], "rollout undo");
    assert!(
        undone.contains(&format!("undo of revision {second} asked")),
        "{undone}"
    );
    wait_for_revs(
        &client,
        &namespace,
        &name,
        "every target at v1 again",
        |_| "v1",
    )
    .await;
    let status = wait_for(&client, &v2, "the undo in status", |o| {
        rollout_of(o)["halted"]["reason"] == "Undone"
    })
    .await;
    assert_eq!(rollout_of(&status)["serving"], first.as_str());
    wait_for_event(&client, None, "Undone", |e| {
        regarding_name(e) == Some(name.as_str())
    })
    .await;
    let again = metascript(
        cli(&["rollout", "undo"])
            .into_iter()
            .chain([kubeconfig.clone()]),
    );
    assert!(!again.status.success(), "a second undo in a row is refused");

    // The spec that serves again, applied: it serves, with no candidate and nothing held.
    apply(&client, &v1).await;
    let settled = wait_for(&client, &v1, "v1 the newest and serving", |o| {
        rollout_of(o)["halted"].is_null()
    })
    .await;
    assert_eq!(rollout_of(&settled)["serving"], first.as_str());
    assert!(
        rollout_of(&settled)["candidate"].is_null(),
        "{}",
        rollout_of(&settled)
    );
    wait_for_condition(&client, &v1, "Rollout", "True").await;
    let now = targets(&client, &namespace, &name).await;
    assert!(now.values().all(|(rev, _)| rev == "v1"), "{now:?}");
}
