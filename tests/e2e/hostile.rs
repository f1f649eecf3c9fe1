//! Hostile neighbours: every way issue 41 found for one controller author to stop, crash or
//! exhaust the operator, each in a controller of its own, beside a good controller, in one
//! `metascript run` with the default script memory. The good controller keeps converging, the
//! process never exits and stays healthy, its peak memory stays under the documented bound,
//! and every bad controller says what it did wrong where its author looks.

use crate::support::operator::{OWN_OPERATOR_LABEL, apply, get, wait_for};
use crate::support::process::OperatorProcess;
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};
use std::time::Instant;

/// The bound docs/operations.md ("Sizing script memory") promises with the default pool.
const PEAK_RSS_MIB: u64 = 512;

/// One attack: the hook it runs (and the `limits` it asks for), and what its controller must
/// say about it: in its `Ready` condition when it must not load, else in the failure Event on
/// a target it selects. A bomb may hit any budget first (memory, operations, time: a loaded
/// machine decides), so those say only that a limit stopped them.
struct Attack {
    name: &'static str,
    language: &'static str,
    code: &'static str,
    /// The `limits` it asks for, as JSON.
    limits: Option<&'static str>,
    refused_at_load: bool,
    says: &'static str,
}

const ATTACKS: &[Attack] = &[
    Attack {
        name: "map-growth",
        language: "rhai",
        code: "let m = #{}; let i = 0; loop { m[`k${i}`] = `${i}`.pad(2000, 'x'); i += 1; }",
        limits: None,
        refused_at_load: false,
        says: "limit exceeded",
    },
    Attack {
        name: "table-growth",
        language: "lua",
        code: "local t = {} local i = 0 while true do i = i + 1 t[i] = string.rep('x', 4096) .. i end",
        limits: None,
        refused_at_load: false,
        says: "limit exceeded",
    },
    Attack {
        name: "spin",
        language: "rhai",
        code: "loop { }",
        limits: None,
        refused_at_load: false,
        says: "limit exceeded",
    },
    Attack {
        name: "spin-lua",
        language: "lua",
        code: "while true do end",
        limits: None,
        refused_at_load: false,
        says: "limit exceeded",
    },
    // Once a panic in `Duration::from_secs_f64` that lost a worker for good.
    Attack {
        name: "resync-forever",
        language: "rhai",
        code: "#{ resyncAfterSeconds: 1e300 }",
        limits: None,
        refused_at_load: false,
        says: "resyncAfterSeconds",
    },
    Attack {
        name: "asks-a-minute",
        language: "lua",
        code: "return {}",
        limits: Some(r#"{"timeoutMillis": 60000}"#),
        refused_at_load: true,
        says: "--max-hook-timeout",
    },
];

fn decorator(instance: &str, name: &str, selects: Value, sync: Value) -> Value {
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: instance}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps",
                           "labelSelector": {"matchLabels": selects}}],
            "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": sync}
        }
    })
}

fn config_map(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels}
    })
}

/// The operator's peak resident memory (VmHWM), in MiB.
fn peak_rss_mib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024
}

/// The note of a failure Event the controller `name` published about an object in `namespace`.
async fn failure_note(events: &kube::Api<Event>, name: &str) -> Option<String> {
    events
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|event| {
            event.related.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && event.type_.as_deref() == Some("Warning")
        })
        .and_then(|event| event.note)
}

#[tokio::test]
async fn hostile_neighbours_cannot_stop_crash_or_exhaust_the_operator() {
    let client = client().await;
    let instance = unique_name("hostile");
    let mut operator = OperatorProcess::start(&instance, &["--workers", "16"]).await;
    let namespace = test_namespace(&client, "hostile").await;
    let mut attackers = Vec::new();
    for attack in ATTACKS {
        let name = format!("{instance}-{}", attack.name);
        let mut script = json!({"language": attack.language, "inline": attack.code});
        if let Some(limits) = attack.limits {
            script["limits"] = serde_json::from_str(limits).expect("limits as JSON");
        }
        let controller = decorator(
            &instance,
            &name,
            json!({"hostile": instance}),
            json!({"script": script}),
        );
        apply(&client, &controller).await;
        attackers.push((attack, name, controller));
    }
    // Every attacker selects each of these: 8 targets, one work item per attacker each.
    for target in 0..8 {
        let object = config_map(
            &namespace,
            &format!("target-{target}"),
            json!({"hostile": instance}),
        );
        apply(&client, &object).await;
    }
    let good = format!("{instance}-good");
    let sync =
        json!({"script": {"language": "rhai", "inline": r#"#{ labels: #{ "good": "yes" } }"#}});
    apply(
        &client,
        &decorator(&instance, &good, json!({"selects": good}), sync),
    )
    .await;
    let started = Instant::now();
    for target in 0..20 {
        let object = config_map(
            &namespace,
            &format!("good-{target}"),
            json!({"selects": good}),
        );
        apply(&client, &object).await;
    }
    for target in 0..20 {
        let object = config_map(&namespace, &format!("good-{target}"), json!({}));
        wait_for(&client, &object, "the good controller's label", |o| {
            o["metadata"]["labels"]["good"] == "yes"
        })
        .await;
    }
    eprintln!(
        "the good controller converged 20 targets in {:?} beside {} hostile controllers",
        started.elapsed(),
        ATTACKS.len()
    );

    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &namespace);
    for (attack, name, controller) in &attackers {
        let said = if attack.refused_at_load {
            let loaded = wait_for(&client, controller, "its Ready condition", |o| {
                o["status"]["conditions"][0]["status"] == "False"
            })
            .await;
            loaded["status"]["conditions"][0]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        } else {
            let failing = wait_for(&client, controller, "failing targets in its status", |o| {
                o["status"]["failing"].as_i64().is_some_and(|n| n >= 1)
            })
            .await;
            assert_eq!(
                failing["status"]["synced"], 0,
                "{name}: {}",
                failing["status"]
            );
            eventually(&format!("a failure Event of {name}"), || {
                failure_note(&events, name)
            })
            .await
        };
        assert!(
            said.contains(attack.says),
            "{name} should say {:?}; it said: {said}",
            attack.says
        );
    }
    // Nothing of an attacker was applied on a target.
    for target in 0..8 {
        let object = get(
            &client,
            &config_map(&namespace, &format!("target-{target}"), json!({})),
        )
        .await
        .expect("the target");
        assert!(object["metadata"]["labels"].get("good").is_none());
    }

    assert!(
        operator.try_exit_status().is_none(),
        "the operator exited beside the hostile controllers"
    );
    let health = operator.get("/healthz");
    assert_eq!(
        health.as_ref().map(|(status, _)| *status),
        Some(200),
        "/healthz: {health:?}"
    );
    let peak = peak_rss_mib(operator.pid());
    eprintln!("operator peak RSS beside the hostile controllers: {peak} MiB");
    assert!(
        peak < PEAK_RSS_MIB,
        "the operator's resident memory peaked at {peak} MiB, over {PEAK_RSS_MIB}"
    );
}
