//! DecoratorController end to end against a real kube-apiserver: sync, update strategies,
//! finalize, customize, hot reload of inline, ConfigMap and local scripts, and failure safety.

use crate::support::cli::{metascript, stdout_of};
use crate::support::manifests::service_per_pod;
use crate::support::operator::{apply, get, operator, wait_for, wait_for_event};
use crate::support::{client, eventually, test_namespace, unique_name};
use metascript::object::label;
use metascript::testing::service_per_pod_target;
use serde_json::{Value, json};

const SYNC_RHAI: &str = include_str!("../../scripts/service-per-pod/sync.rhai");
const SYNC_LUA: &str = include_str!("../../scripts/service-per-pod/sync.lua");

/// A StatefulSet asking for service-per-pod, labelled so only `controller` selects it.
fn stateful_set(namespace: &str, name: &str, controller: &str, replicas: i64) -> Value {
    let mut sts = service_per_pod_target(namespace, name, replicas, "80:8080");
    sts["metadata"]["labels"] = json!({"test-controller": controller});
    sts
}

fn inline(language: &str, code: &str) -> Value {
    json!({"script": {"language": language, "inline": code}})
}

fn service(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}})
}

async fn controller_status(client: &kube::Client, name: &str) -> Value {
    get(client, &json!({"apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController", "metadata": {"name": name}}))
        .await
        .expect("controller exists")["status"]
        .clone()
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn service_per_pod_runs_in_rhai_and_lua_from_a_config_map() {
    let client = client().await;
    operator().await;
    for (language, code) in [("rhai", SYNC_RHAI), ("lua", SYNC_LUA)] {
        let namespace = test_namespace(&client, &format!("spp-{language}")).await;
        let name = unique_name(&format!("spp-{language}"));
        let key = format!("sync.{language}");
        apply(
            &client,
            &json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "hooks", "namespace": namespace},
                "data": {key.clone(): code}
            }),
        )
        .await;
        let by_ref = json!({"script": {"configMapRef": {"namespace": namespace, "name": "hooks", "key": key}}});
        apply(&client, &service_per_pod(&name, json!({"sync": by_ref}))).await;
        apply(&client, &stateful_set(&namespace, "web", &name, 2)).await;

        for pod in ["web-0", "web-1"] {
            let created = wait_for(
                &client,
                &service(&namespace, pod),
                &format!("{language}: Service {pod}"),
                |_| true,
            )
            .await;
            assert_eq!(
                created["spec"]["selector"]["statefulset.kubernetes.io/pod-name"],
                pod
            );
            assert_eq!(created["spec"]["ports"][0]["targetPort"], 8080);
            let owner = &created["metadata"]["ownerReferences"][0];
            assert_eq!(owner["kind"], "StatefulSet");
            assert_eq!(owner["name"], "web");
            assert_eq!(owner["controller"], true);
            assert_eq!(
                label(&created, "metascript.dev/decorator"),
                Some(name.as_str())
            );
        }
        wait_for(
            &client,
            &stateful_set(&namespace, "web", &name, 2),
            "the target's label",
            |sts| label(sts, "metascript.dev/service-per-pod") == Some("true"),
        )
        .await;

        // Scaling down deletes the Service of the pod that no longer exists.
        apply(&client, &stateful_set(&namespace, "web", &name, 1)).await;
        eventually(&format!("{language}: web-1 deleted"), || async {
            get(&client, &service(&namespace, "web-1"))
                .await
                .is_none()
                .then_some(())
        })
        .await;
        assert!(get(&client, &service(&namespace, "web-0")).await.is_some());

        let status = eventually("controller status", || async {
            let status = controller_status(&client, &name).await;
            (status["synced"] == 1 && condition(&status, "Ready")["status"] == "True")
                .then_some(status)
        })
        .await;
        assert_eq!(status["targets"], 1);
        assert_eq!(status["failing"], 0);
        assert!(
            status["scripts"]["sync"]["digest"]
                .as_str()
                .is_some_and(|d| d.len() == 64)
        );
        assert_eq!(
            status["scripts"]["sync"]["source"],
            format!("ConfigMap {namespace}/hooks key {key}")
        );
    }
}

/// A sync script that labels the target with `value` and attaches one Service.
fn labelling_script(value: &str) -> String {
    format!(
        r#"#{{
            labels: #{{ "example.com/version": "{value}" }},
            attachments: [#{{
                apiVersion: "v1", kind: "Service",
                metadata: #{{ name: request.object.metadata.name + "-svc" }},
                spec: #{{ ports: [#{{ port: 80 }}] }}
            }}]
        }}"#
    )
}

#[tokio::test]
async fn editing_an_inline_script_resyncs_its_targets() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "inline-edit").await;
    let name = unique_name("inline-edit");
    apply(
        &client,
        &service_per_pod(
            &name,
            json!({"sync": inline("rhai", &labelling_script("one"))}),
        ),
    )
    .await;
    for sts in ["a", "b"] {
        apply(&client, &stateful_set(&namespace, sts, &name, 1)).await;
    }
    for sts in ["a", "b"] {
        wait_for(
            &client,
            &stateful_set(&namespace, sts, &name, 1),
            "version one",
            |o| label(o, "example.com/version") == Some("one"),
        )
        .await;
    }
    let first_digest = eventually("a digest in status", || async {
        controller_status(&client, &name).await["scripts"]["sync"]["digest"]
            .as_str()
            .map(str::to_string)
    })
    .await;

    apply(
        &client,
        &service_per_pod(
            &name,
            json!({"sync": inline("rhai", &labelling_script("two"))}),
        ),
    )
    .await;
    for sts in ["a", "b"] {
        wait_for(
            &client,
            &stateful_set(&namespace, sts, &name, 1),
            "version two",
            |o| label(o, "example.com/version") == Some("two"),
        )
        .await;
    }
    eventually("the new digest in status", || async {
        let digest = controller_status(&client, &name).await["scripts"]["sync"]["digest"]
            .as_str()
            .map(str::to_string);
        (digest.is_some() && digest.as_deref() != Some(&first_digest)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn editing_a_referenced_config_map_reloads_the_script() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "cm-edit").await;
    let name = unique_name("cm-edit");
    let config_map = |code: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hooks", "namespace": namespace}, "data": {"sync.rhai": code}});
    apply(&client, &config_map(&labelling_script("one"))).await;
    let by_ref = json!({"script": {"configMapRef": {"namespace": namespace, "name": "hooks", "key": "sync.rhai"}}});
    apply(&client, &service_per_pod(&name, json!({"sync": by_ref}))).await;
    apply(&client, &stateful_set(&namespace, "web", &name, 1)).await;
    wait_for(
        &client,
        &stateful_set(&namespace, "web", &name, 1),
        "version one",
        |o| label(o, "example.com/version") == Some("one"),
    )
    .await;
    apply(&client, &config_map(&labelling_script("two"))).await;
    wait_for(
        &client,
        &stateful_set(&namespace, "web", &name, 1),
        "version two",
        |o| label(o, "example.com/version") == Some("two"),
    )
    .await;
}

#[tokio::test]
async fn saving_a_local_script_file_resyncs_in_the_dev_loop() {
    let client = client().await;
    let operator = operator().await;
    let namespace = test_namespace(&client, "dev-loop").await;
    let name = unique_name("dev-loop");
    let key = format!("{name}.rhai");
    let file = operator.scripts_dir.join(&key);
    std::fs::write(&file, labelling_script("from-disk")).unwrap();
    // The ConfigMap named here does not even exist: the local file stands in for its key.
    let by_ref =
        json!({"script": {"configMapRef": {"namespace": namespace, "name": "absent", "key": key}}});
    apply(&client, &service_per_pod(&name, json!({"sync": by_ref}))).await;
    apply(&client, &stateful_set(&namespace, "web", &name, 1)).await;
    wait_for(
        &client,
        &stateful_set(&namespace, "web", &name, 1),
        "the file's version",
        |o| label(o, "example.com/version") == Some("from-disk"),
    )
    .await;
    std::fs::write(&file, labelling_script("saved-again")).unwrap();
    wait_for(
        &client,
        &stateful_set(&namespace, "web", &name, 1),
        "the saved version",
        |o| label(o, "example.com/version") == Some("saved-again"),
    )
    .await;
    let status = controller_status(&client, &name).await;
    assert_eq!(
        status["scripts"]["sync"]["source"],
        format!("file {}", file.display())
    );

    // An editor that truncates the file, then writes it: only the finished file is loaded (an
    // empty script would have run and answered null: an InvalidResponse Event).
    std::fs::write(&file, "").unwrap();
    std::fs::write(&file, labelling_script("written-in-two-steps")).unwrap();
    let sts = stateful_set(&namespace, "web", &name, 1);
    wait_for(&client, &sts, "the finished file's version", |o| {
        label(o, "example.com/version") == Some("written-in-two-steps")
    })
    .await;
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(client.clone(), &namespace);
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        // The operator's own: the API server's repair loops post Events here too
        // (`ClusterIPNotAllocated` when a Service's IP is checked mid-allocation under load).
        .filter(|e| e.reporting_controller.as_deref() == Some("metascript.dev/operator"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.is_empty(), "no failure on the way: {reasons:?}");

    // A file left empty is not a new version: the last one keeps running, marked stale.
    std::fs::write(&file, "").unwrap();
    eventually("the empty file reported, the last version kept", || async {
        let status = controller_status(&client, &name).await;
        (status["scripts"]["sync"]["stale"] == true).then_some(())
    })
    .await;
    let condition = condition(&controller_status(&client, &name).await, "ScriptsLoaded").clone();
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or_default()
            .contains("is empty"),
        "{condition}"
    );
    let target = get(&client, &sts).await.unwrap();
    assert_eq!(
        label(&target, "example.com/version"),
        Some("written-in-two-steps")
    );
}

/// What `status.usage` says and `kubectl get` prints, from a controller's real work: its hook
/// calls, their CPU and operations, the writes for its targets, and failures by reason.
#[tokio::test]
async fn status_usage_reports_what_the_controller_cost() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "usage").await;
    let name = unique_name("usage");
    // A loop, so the call has operations and CPU time worth counting.
    let busy = format!(
        "let n = 0; for i in 0..2000 {{ n += i; }}\n{}",
        labelling_script("counted")
    );
    apply(
        &client,
        &service_per_pod(&name, json!({"sync": inline("rhai", &busy)})),
    )
    .await;
    for sts in ["web", "api"] {
        apply(&client, &stateful_set(&namespace, sts, &name, 1)).await;
    }
    let status = eventually("both targets synced", || async {
        let status = controller_status(&client, &name).await;
        (status["synced"] == 2).then_some(status)
    })
    .await;
    let usage = &status["usage"];
    let total = &usage["total"];
    // The status that says both synced was written after both calls and their writes.
    assert!(total["hookCalls"].as_u64() >= Some(2), "{usage}");
    assert!(total["operations"].as_u64() >= Some(2 * 2000), "{usage}");
    assert!(total["hookCPUMillis"].as_f64() > Some(0.0), "{usage}");
    assert!(total["peakMemoryBytes"].as_u64() > Some(0), "{usage}");
    // Each target: its label and its Service; the controller's own status is not counted.
    assert!(total["writes"].as_u64() >= Some(4), "{usage}");
    assert_eq!(total["webhookCalls"], 0, "{usage}");
    assert_eq!(
        usage["recent"]["hookCalls"], total["hookCalls"],
        "a new controller: all recent"
    );
    assert!(usage["writesPerMinute"].as_f64() > Some(0.0), "{usage}");
    let cpu = usage["cpuPerMinute"].as_str().unwrap_or_default();
    assert!(cpu.ends_with('s') && cpu != "0s", "{usage}");
    for stamp in ["since", "updated"] {
        let stamp = usage[stamp].as_str().unwrap_or_default();
        assert!(stamp.parse::<jiff::Timestamp>().is_ok(), "{usage}");
    }

    // What `kubectl get` prints, as its columns.
    let kubectl = metascript::testing::kubectl().expect("kubectl beside the plane's binaries");
    let output = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(crate::support::plane().await.kubeconfig_path())
        .args(["get", "decoratorcontroller", &name])
        .output()
        .expect("kubectl runs");
    let table = String::from_utf8_lossy(&output.stdout);
    let (header, row) = table.split_once('\n').unwrap_or_default();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert!(
        columns.contains(&"CPU/MIN") && columns.contains(&"WRITES/MIN"),
        "{table}"
    );
    let cpu_at = columns.iter().position(|c| *c == "CPU/MIN").unwrap();
    assert_eq!(row.split_whitespace().nth(cpu_at), Some(cpu), "{table}");

    // `metascript top` lists it with the same figures (other tests' controllers beside it).
    let kubeconfig = crate::support::plane().await.kubeconfig_path();
    let kubeconfig = kubeconfig.to_str().expect("a UTF-8 path");
    let top = stdout_of(
        &metascript(["top", "--kubeconfig", kubeconfig, "--sort", "name"]),
        "metascript top",
    );
    let header: Vec<&str> = top
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ours: Vec<&str> = top
        .lines()
        .find(|line| line.starts_with(&format!("DecoratorController/{name} ")))
        .unwrap_or_else(|| panic!("{name} in:\n{top}"))
        .split_whitespace()
        .collect();
    let cell = |column: &str| ours[header.iter().position(|c| *c == column).unwrap()];
    assert_eq!(cell("TARGETS"), "2", "{top}");
    // The status may have been refreshed since it was read; never with fewer calls.
    let calls: u64 = cell("CALLS(10M)").parse().expect("a count");
    assert!(Some(calls) >= total["hookCalls"].as_u64(), "{top}");
    assert!(cell("CPU/MIN").ends_with('s'), "{top}");

    // Failures, by reason: the targets' count changes, so the usage comes with it at once.
    apply(
        &client,
        &service_per_pod(&name, json!({"sync": inline("lua", "error('no')")})),
    )
    .await;
    let status = eventually("both targets failing", || async {
        let status = controller_status(&client, &name).await;
        (status["failing"] == 2).then_some(status)
    })
    .await;
    let failures = &status["usage"]["total"]["failures"];
    assert!(failures["HookFailed"].as_u64() >= Some(2), "{failures}");
}

/// A controller past its write budget is slowed, not dropped: its work waits (status says
/// `Throttled` and why, an Event too), and a raised budget lets it through at once.
#[tokio::test]
async fn a_controller_over_its_write_budget_waits_until_its_budget_allows() {
    let client = client().await;
    let operator = operator().await;
    let namespace = test_namespace(&client, "budget").await;
    let name = unique_name("budget");
    let with_budget = |writes: i64| {
        let mut object = service_per_pod(
            &name,
            json!({"sync": inline("rhai", &labelling_script("paced"))}),
        );
        object["spec"]["budget"] = json!({"writesPerMinute": writes});
        object
    };
    // One write a minute; two targets make four (a label and a Service each): three minutes
    // of debt, longer than any wait below.
    apply(&client, &with_budget(1)).await;
    for sts in ["web-0", "web-1"] {
        apply(&client, &stateful_set(&namespace, sts, &name, 1)).await;
    }
    throttled_for(
        &client,
        &name,
        "WriteBudget",
        "over its write budget of 1 write a minute: ",
    )
    .await;
    let event = wait_for_event(&client, None, "Throttled", |event| {
        crate::support::operator::regarding_name(event) == Some(name.as_str())
    })
    .await;
    assert!(
        event
            .note
            .unwrap_or_default()
            .contains("write budget of 1 write a minute"),
        "the Event says why"
    );

    // A target arriving now waits in the queue: nothing dropped, nothing run.
    apply(&client, &stateful_set(&namespace, "web-2", &name, 1)).await;
    let id = metascript::runtime::ControllerId::new(metascript::kinds::decorator::KIND, &name);
    let throttled = operator
        .operator
        .metrics()
        .controller_throttled
        .get(&metascript::runtime::report::metrics::ControllerLabels::of(
            &id,
        ))
        .map(|gauge| gauge.get());
    assert_eq!(throttled, Some(1), "the gauge the alert reads");
    eventually("web-2 queued behind the budget", || async {
        (operator.operator.pending(&id) > 0).then_some(())
    })
    .await;
    assert!(
        get(&client, &service(&namespace, "web-2-svc"))
            .await
            .is_none()
    );

    // A raised budget: the change reloads the controller, whose work goes on at once.
    apply(&client, &with_budget(600)).await;
    wait_for(
        &client,
        &service(&namespace, "web-2-svc"),
        "web-2 synced after the budget was raised",
        |_| true,
    )
    .await;
    eventually("Throttled=False", || async {
        let status = controller_status(&client, &name).await;
        let throttled = condition(&status, "Throttled");
        (throttled["status"] == "False" && throttled["reason"] == "WithinBudget").then_some(())
    })
    .await;
}

/// The CPU figure of a budget, as the write figure above: hook CPU past a millisecond a minute
/// puts the controller in debt, and its condition says which budget.
#[tokio::test]
async fn a_controller_over_its_cpu_budget_is_throttled_for_cpu() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "cpu-budget").await;
    let name = unique_name("cpu-budget");
    // Some hundred thousand operations: tens of milliseconds of CPU, far past 1 ms.
    let busy = format!(
        "let spent = 0; for i in 0..200000 {{ spent += i; }}\n{}",
        labelling_script("busy")
    );
    let mut object = service_per_pod(&name, json!({"sync": inline("rhai", &busy)}));
    object["spec"]["budget"] = json!({"cpuMillisPerMinute": 1});
    apply(&client, &object).await;
    for sts in ["web-0", "web-1"] {
        apply(&client, &stateful_set(&namespace, sts, &name, 1)).await;
    }
    throttled_for(
        &client,
        &name,
        "CPUBudget",
        "over its CPU budget of 1ms a minute: ",
    )
    .await;
}

/// Waits for the controller's `Throttled=True` and checks it names the budget it is over.
async fn throttled_for(client: &kube::Client, name: &str, reason: &str, message_start: &str) {
    let status = eventually(&format!("Throttled=True ({reason})"), || async {
        let status = controller_status(client, name).await;
        (condition(&status, "Throttled")["status"] == "True").then_some(status)
    })
    .await;
    let throttled = condition(&status, "Throttled");
    assert_eq!(throttled["reason"], reason, "{status}");
    let message = throttled["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(message_start), "{message}");
}

#[tokio::test]
async fn a_broken_script_deletes_nothing_and_says_where() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "broken").await;
    let name = unique_name("broken");
    apply(
        &client,
        &service_per_pod(
            &name,
            json!({"sync": inline("rhai", &labelling_script("good"))}),
        ),
    )
    .await;
    apply(&client, &stateful_set(&namespace, "web", &name, 1)).await;
    wait_for(
        &client,
        &service(&namespace, "web-svc"),
        "the attachment",
        |_| true,
    )
    .await;

    // A compile error: the last good script keeps running, and status says so.
    apply(
        &client,
        &service_per_pod(&name, json!({"sync": inline("rhai", "let x = ;")})),
    )
    .await;
    let status = eventually("ScriptsLoaded=False", || async {
        let status = controller_status(&client, &name).await;
        (condition(&status, "ScriptsLoaded")["status"] == "False").then_some(status)
    })
    .await;
    let message = condition(&status, "ScriptsLoaded")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("line 1"), "{message}");
    assert!(
        message.contains(&format!(
            "inline script of DecoratorController {name} hook sync"
        )),
        "{message}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False");
    assert_eq!(status["scripts"]["sync"]["stale"], true);
    assert!(
        get(&client, &service(&namespace, "web-svc"))
            .await
            .is_some()
    );

    // A runtime error: nothing applied or deleted, the failure counted and reported as an Event.
    apply(&client, &service_per_pod(&name, json!({"sync": inline("lua", "error('no capacity for ' .. request.object.metadata.name)")}))).await;
    eventually("failing=1", || async {
        (controller_status(&client, &name).await["failing"] == 1).then_some(())
    })
    .await;
    assert!(
        get(&client, &service(&namespace, "web-svc"))
            .await
            .is_some(),
        "a failing hook must not delete attachments"
    );
    let event = wait_for_event(&client, Some(&namespace), "HookFailed", |_| true).await;
    let note = event.note.unwrap_or_default();
    assert!(note.contains("no capacity for web"), "{note}");
    assert!(note.contains("line 1"), "{note}");

    // A response of the wrong shape: rejected, nothing deleted.
    apply(
        &client,
        &service_per_pod(
            &name,
            json!({"sync": inline("rhai", "#{ attachments: #{ oops: 1 } }")}),
        ),
    )
    .await;
    wait_for_event(&client, Some(&namespace), "InvalidResponse", |e| {
        e.note
            .as_deref()
            .is_some_and(|n| n.contains("attachments: expected a list"))
    })
    .await;
    assert!(
        get(&client, &service(&namespace, "web-svc"))
            .await
            .is_some()
    );
}

#[tokio::test]
async fn finalize_runs_on_opt_out_and_on_delete_then_releases_the_object() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "finalize").await;
    let name = unique_name("finalize");
    let finalizer = format!("metascript.dev/decorator-{name}");
    apply(
        &client,
        &service_per_pod(
            &name,
            json!({"sync": inline("rhai", SYNC_RHAI), "finalize": inline("rhai", SYNC_RHAI)}),
        ),
    )
    .await;
    let sts = stateful_set(&namespace, "web", &name, 1);
    apply(&client, &sts).await;
    wait_for(&client, &sts, "our finalizer", |o| {
        o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer.as_str()))
    })
    .await;
    wait_for(
        &client,
        &service(&namespace, "web-0"),
        "the attachment",
        |_| true,
    )
    .await;

    // Opting out (the annotation goes) finalizes: Services removed, label removed, finalizer gone.
    let mut opted_out = sts.clone();
    opted_out["metadata"]["annotations"] = json!({});
    apply(&client, &opted_out).await;
    eventually("the Service removed on opt-out", || async {
        get(&client, &service(&namespace, "web-0"))
            .await
            .is_none()
            .then_some(())
    })
    .await;
    wait_for(&client, &sts, "finalizer released and label gone", |o| {
        !o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer.as_str()))
            && label(o, "metascript.dev/service-per-pod").is_none()
    })
    .await;

    // Opting in again, then deleting: finalize runs and the object goes away.
    apply(&client, &sts).await;
    wait_for(
        &client,
        &service(&namespace, "web-0"),
        "the attachment again",
        |_| true,
    )
    .await;
    crate::support::operator::api_for(&client, &sts)
        .delete("web", &Default::default())
        .await
        .unwrap();
    eventually("the StatefulSet deleted after finalize", || async {
        get(&client, &sts).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_the_controller_releases_every_finalizer() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "release").await;
    let name = unique_name("release");
    let finalizer = format!("metascript.dev/decorator-{name}");
    // A finalize hook that never finishes: only deleting the controller can release targets.
    let never = inline("rhai", "#{ finalized: false }");
    let controller_object = service_per_pod(
        &name,
        json!({"sync": inline("rhai", "#{}"), "finalize": never}),
    );
    apply(&client, &controller_object).await;
    let sts = stateful_set(&namespace, "web", &name, 1);
    apply(&client, &sts).await;
    wait_for(&client, &sts, "our finalizer", |o| {
        o["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer.as_str()))
    })
    .await;
    crate::support::operator::api_for(&client, &controller_object)
        .delete(&name, &Default::default())
        .await
        .unwrap();
    eventually("the controller gone", || async {
        get(&client, &controller_object)
            .await
            .is_none()
            .then_some(())
    })
    .await;
    crate::support::operator::api_for(&client, &sts)
        .delete("web", &Default::default())
        .await
        .unwrap();
    eventually("the StatefulSet deletable", || async {
        get(&client, &sts).await.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn related_objects_selected_by_customize_resync_their_targets() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "related").await;
    let name = unique_name("related");
    let customize = inline(
        "lua",
        r#"return { relatedResources = { { apiVersion = "v1", resource = "configmaps", labelSelector = { matchLabels = { shared = "yes" } } } } }"#,
    );
    let sync = inline(
        "lua",
        r#"local names = {}
           for key, _ in pairs(request.related["ConfigMap.v1"]) do table.insert(names, key) end
           table.sort(names)
           return { annotations = { ["example.com/related"] = table.concat(names, ",") } }"#,
    );
    let mut decorator = service_per_pod(&name, json!({"sync": sync, "customize": customize}));
    decorator["spec"]["attachments"] = json!([]);
    apply(&client, &decorator).await;
    let sts = stateful_set(&namespace, "web", &name, 1);
    apply(&client, &sts).await;
    let related = |config: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config, "namespace": namespace, "labels": {"shared": "yes"}}});
    let annotation = |o: &Value| {
        o["metadata"]["annotations"]["example.com/related"]
            .as_str()
            .map(str::to_string)
    };
    wait_for(&client, &sts, "no related yet", |o| {
        annotation(o).as_deref() == Some("")
    })
    .await;
    apply(&client, &related("alpha")).await;
    wait_for(&client, &sts, "alpha related", |o| {
        annotation(o).as_deref() == Some("alpha")
    })
    .await;
    apply(&client, &related("beta")).await;
    wait_for(&client, &sts, "alpha and beta related", |o| {
        annotation(o).as_deref() == Some("alpha,beta")
    })
    .await;
    let mut unlabelled = related("alpha");
    unlabelled["metadata"]["labels"] = json!({"shared": "no"});
    apply(&client, &unlabelled).await;
    wait_for(&client, &sts, "alpha no longer related", |o| {
        annotation(o).as_deref() == Some("beta")
    })
    .await;
}

/// `resyncPeriodSeconds` (per controller) and `resyncAfterSeconds` (per object, from the hook)
/// both call the hook again with nothing changed: a hook stamping `now()` shows it.
#[tokio::test]
async fn resync_period_and_resync_after_call_the_hook_again() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "resync").await;
    let stamp =
        |extra: &str| format!(r#"#{{ annotations: #{{ "example.com/seen": now() }}{extra} }}"#);
    let periodic = unique_name("periodic");
    let mut by_period = service_per_pod(&periodic, json!({"sync": inline("rhai", &stamp(""))}));
    by_period["spec"]["resyncPeriodSeconds"] = json!(1);
    by_period["spec"]["attachments"] = json!([]);
    let asked = unique_name("asked");
    let mut by_hook = service_per_pod(
        &asked,
        json!({"sync": inline("rhai", &stamp(", resyncAfterSeconds: 0.5"))}),
    );
    by_hook["spec"]["attachments"] = json!([]);
    for (name, decorator) in [(&periodic, by_period), (&asked, by_hook)] {
        apply(&client, &decorator).await;
        let sts = stateful_set(&namespace, name, name, 1);
        apply(&client, &sts).await;
        let seen = |o: &Value| {
            o["metadata"]["annotations"]["example.com/seen"]
                .as_str()
                .map(str::to_string)
        };
        let first =
            seen(&wait_for(&client, &sts, "a first stamp", |o| seen(o).is_some()).await).unwrap();
        let second = seen(
            &wait_for(&client, &sts, "a later stamp", |o| {
                seen(o).is_some_and(|s| s != first)
            })
            .await,
        )
        .unwrap();
        wait_for(&client, &sts, "a third stamp", |o| {
            seen(o).is_some_and(|s| s != first && s != second)
        })
        .await;
    }
}

/// Recreate replaces a changed attachment (a new object, new uid); `status` from the hook
/// replaces the target's status through its status subresource.
#[tokio::test]
async fn recreate_replaces_attachments_and_status_goes_through_the_subresource() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "recreate").await;
    let name = unique_name("recreate");
    let script = |port: u16| {
        format!(
            r#"#{{
                status: #{{ replicas: 1, observedGeneration: {port} }},
                attachments: [#{{
                    apiVersion: "v1", kind: "Service",
                    metadata: #{{ name: "svc" }},
                    spec: #{{ ports: [#{{ port: {port} }}] }}
                }}]
            }}"#
        )
    };
    let decorator = |port: u16| {
        let mut decorator = service_per_pod(&name, json!({"sync": inline("rhai", &script(port))}));
        decorator["spec"]["attachments"][0]["updateStrategy"]["method"] = json!("Recreate");
        decorator
    };
    apply(&client, &decorator(80)).await;
    let sts = stateful_set(&namespace, "web", &name, 1);
    apply(&client, &sts).await;
    let first = wait_for(&client, &service(&namespace, "svc"), "the service", |_| {
        true
    })
    .await;
    wait_for(&client, &sts, "the hook's status", |o| {
        o["status"]["observedGeneration"] == 80 && o["status"]["replicas"] == 1
    })
    .await;

    apply(&client, &decorator(81)).await;
    let second = wait_for(
        &client,
        &service(&namespace, "svc"),
        "the recreated service",
        |o| o["spec"]["ports"][0]["port"] == 81,
    )
    .await;
    assert_ne!(
        first["metadata"]["uid"], second["metadata"]["uid"],
        "Recreate must replace the object, not update it"
    );
    wait_for(&client, &sts, "the new status", |o| {
        o["status"]["observedGeneration"] == 81
    })
    .await;
}

#[tokio::test]
async fn deleted_targets_are_forgotten_by_the_status_counts() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "forget-targets").await;
    let name = unique_name("forget-targets");
    // Label-only: no finalize hook, so nothing holds a deleted target back.
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": inline("lua", "return { labels = { seen = 'yes' } }")}
        }
    }))
    .await;
    let config_map = |i: usize| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}"), "namespace": namespace, "labels": {"decorate": name}}});
    for i in 0..20 {
        apply(&client, &config_map(i)).await;
    }
    let counts = |status: &Value| (status["targets"].as_u64(), status["synced"].as_u64());
    eventually("20 targets synced", || async {
        (counts(&controller_status(&client, &name).await) == (Some(20), Some(20))).then_some(())
    })
    .await;

    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &namespace);
    for i in 0..10 {
        config_maps
            .delete(&format!("cm-{i}"), &Default::default())
            .await
            .expect("deleting a target");
    }
    eventually("10 targets left in status", || async {
        (counts(&controller_status(&client, &name).await) == (Some(10), Some(10))).then_some(())
    })
    .await;
    // The survivors are still served: a new one is decorated and counted.
    apply(&client, &config_map(20)).await;
    wait_for(&client, &config_map(20), "the new target decorated", |o| {
        label(o, "seen") == Some("yes")
    })
    .await;
    eventually("11 targets in status", || async {
        (counts(&controller_status(&client, &name).await) == (Some(11), Some(11))).then_some(())
    })
    .await;
}

/// Where a finalizer and labels are both due, one write carries both (before any child), so a
/// target costs one write for itself plus one per child.
#[tokio::test]
async fn the_finalizer_and_the_labels_arrive_in_one_write() {
    use futures::StreamExt as _;
    use kube::runtime::{WatchStreamExt as _, watcher};
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "one-write").await;
    let name = unique_name("one-write");
    let finalizer = format!("metascript.dev/decorator-{name}");
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &namespace);
    let mut versions =
        std::pin::pin!(watcher::watcher(config_maps, watcher::Config::default()).touched_objects());
    let script = "return { labels = { seen = 'yes' } }";
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": inline("lua", script), "finalize": inline("lua", "return { finalized = true }")}
        }
    }))
    .await;
    apply(&client, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "namespace": namespace, "labels": {"decorate": name}}})).await;
    // Every version of the target the watch sees, until the operator's writes have landed.
    let mut seen = Vec::new();
    let converged = tokio::time::timeout(crate::support::WAIT, async {
        while let Some(Ok(object)) = versions.next().await {
            let has_finalizer = object
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| *f == finalizer);
            let labelled = object
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("seen"))
                .is_some();
            seen.push((has_finalizer, labelled));
            if has_finalizer && labelled {
                return;
            }
        }
    })
    .await;
    assert!(converged.is_ok(), "the target never got both: {seen:?}");
    assert!(
        !seen.contains(&(true, false)) && !seen.contains(&(false, true)),
        "the finalizer and the label came in separate writes: {seen:?}"
    );
}

/// A failure's Event names the controller as the related object, and a different error on the
/// same object is a new Event rather than one more count of the old one.
#[tokio::test]
async fn a_new_error_is_a_new_event_naming_the_controller() {
    use k8s_openapi::api::events::v1::Event;
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "new-error").await;
    let name = unique_name("new-error");
    let script = "error('failing: ' .. request.object.data.why)";
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": inline("lua", script)}
        }
    }))
    .await;
    let target = |why: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "target", "namespace": namespace, "labels": {"decorate": name}}, "data": {"why": why}});
    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &namespace);
    let event_saying = |text: String| {
        let events = events.clone();
        async move {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.note.as_deref().is_some_and(|n| n.contains(&text)))
        }
    };
    apply(&client, &target("first")).await;
    let first = eventually("the first error's Event", || {
        event_saying("failing: first".into())
    })
    .await;
    let related = first.related.clone().expect("a related object");
    assert_eq!(related.kind.as_deref(), Some("DecoratorController"));
    assert_eq!(related.name.as_deref(), Some(name.as_str()));
    assert_eq!(first.reason.as_deref(), Some("HookFailed"));

    apply(&client, &target("second")).await;
    let second = eventually("the second error's own Event", || {
        event_saying("failing: second".into())
    })
    .await;
    assert_ne!(first.metadata.name, second.metadata.name);
}

/// A hook that keeps state in its target's status (as Metacontroller's daemonjob does in a
/// parent's): each sync counts one step further from the status the last one wrote, so each step
/// needs a sync on the controller's own status write, as Metacontroller makes one.
#[tokio::test]
async fn a_hook_that_keeps_state_in_status_syncs_again_on_its_own_status_write() {
    let client = client().await;
    operator().await;
    let namespace = test_namespace(&client, "status-state").await;
    let name = unique_name("status-state");
    let script = r#"
        let step = get_path(request.object, "status.replicas", 0);
        if step >= 3 {
            #{ status: #{ replicas: step, readyReplicas: step } }
        } else {
            #{ status: #{ replicas: step + 1 } }
        }
    "#;
    let mut decorator = service_per_pod(&name, json!({"sync": inline("rhai", script)}));
    // No periodic resync to make up for a missed step.
    decorator["spec"]["resyncPeriodSeconds"] = json!(3600);
    apply(&client, &decorator).await;
    let sts = stateful_set(&namespace, "web", &name, 1);
    apply(&client, &sts).await;
    wait_for(&client, &sts, "step 3, ready", |o| {
        o["status"]["replicas"] == 3 && o["status"]["readyReplicas"] == 3
    })
    .await;
    // Settled: the last status write's sync finds the same status and writes nothing more.
    let id = metascript::runtime::ControllerId::new(metascript::kinds::decorator::KIND, &name);
    let (writes, _) = crate::support::operator::quiet(&id).await;
    let (still, _) = crate::support::operator::quiet(&id).await;
    assert_eq!(writes, still, "no writes once settled");
}

/// A custom resource type whose objects hold anything, its group given by the test.
const ANYTHING_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// One custom resource nested deeper than the operator reads (the API server keeps it) sits
/// beside good ones of its type, first in the initial list, then in a watch event: it is passed
/// over and counted, and the controller keeps syncing the others.
#[tokio::test]
async fn an_object_nested_too_deep_is_passed_over_and_its_type_keeps_syncing() {
    use crate::support::cluster::Cluster;
    use metascript::runtime::report::metrics::ResourceLabels;
    let mut cluster = Cluster::new().await;
    let namespace = test_namespace(&cluster.client, "deep").await;
    let group = format!("{}.example.com", unique_name("deep"));
    cluster.install(ANYTHING_CRD, "Widget", &group).await;
    let widget = |name: &str| {
        json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
               "metadata": {"name": name, "namespace": namespace}, "spec": {"size": 1}})
    };
    // Created as text: the test's own client reads objects as serde_json does, and could not
    // read this one back.
    let create_deep = |name: &str| {
        let spec = format!("{}1{}", r#"{"a":"#.repeat(150), "}".repeat(150));
        let body = format!(
            r#"{{"apiVersion":"{group}/v1","kind":"Widget","metadata":{{"name":"{name}"}},"spec":{spec}}}"#
        );
        let request =
            http::Request::post(format!("/apis/{group}/v1/namespaces/{namespace}/widgets"))
                .header("Content-Type", "application/json")
                .body(body.into_bytes())
                .expect("a request");
        let client = cluster.client.clone();
        async move {
            client
                .request_text(request)
                .await
                .unwrap_or_else(|error| panic!("creating a deep widget: {error}"));
        }
    };
    cluster.apply(&widget("listed")).await;
    create_deep("deep-listed").await;

    let name = unique_name("deep");
    apply(
        &cluster.client,
        &json!({
            "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
            "metadata": {"name": name},
            "spec": {
                "resources": [{"apiVersion": format!("{group}/v1"), "resource": "widgets"}],
                "hooks": {"sync": inline("rhai", r#"#{ labels: #{ seen: "yes" } }"#)}
            }
        }),
    )
    .await;
    let seen = |widget: &Value| label(widget, "seen") == Some("yes");
    cluster
        .wait_for(
            &widget("listed"),
            "the widget listed beside the deep one",
            seen,
        )
        .await;
    create_deep("deep-watched").await;
    cluster.apply(&widget("watched")).await;
    cluster
        .wait_for(
            &widget("watched"),
            "a widget created after a deep one",
            seen,
        )
        .await;

    let passed_over = operator()
        .await
        .operator
        .metrics()
        .undecodable_objects
        .get_or_create(&ResourceLabels {
            resource: format!("Widget.{group}/v1"),
        })
        .get();
    assert!(
        passed_over >= 2,
        "each deep widget at least once: {passed_over}"
    );
    // Whoever owns a deep widget finds out on it why nothing acts on it.
    for deep in ["deep-listed", "deep-watched"] {
        let event = wait_for_event(&cluster.client, Some(&namespace), "Undecodable", |event| {
            crate::support::operator::regarding_name(event) == Some(deep)
        })
        .await;
        let note = event.note.unwrap_or_default();
        assert!(note.contains("100 levels"), "{deep}: {note}");
    }
}
