//! Hostile neighbours: every way issue 41 found for one controller author to stop, crash or
//! exhaust the operator, each in a controller of its own, beside a good controller, in one
//! `metascript run` with the default script memory. The good controller keeps converging, the
//! process never exits and stays healthy, its peak memory stays under the documented bound,
//! and every bad controller says what it did wrong where its author looks.

use crate::support::operator::{apply, get, wait_for, wait_for_event};
use crate::support::process::{
    OperatorProcess, good_neighbour_converges, labelled_config_map, own_decorator,
};
use crate::support::{client, eventually, test_namespace, unique_name};
use k8s_openapi::api::events::v1::Event;
use metascript::testing::{HookServer, Reply};
use serde_json::{Value, json};

/// The bound docs/operations.md ("Sizing script memory") promises with the default pool.
const PEAK_RSS_MIB: u64 = 512;

/// What a controller must say about its attack: in its `Ready` condition when it must not
/// load, in the failure Event on a target it selects when its hook fails there, or nothing
/// (its Events are dropped past their rate, and counted) when it floods.
enum Says {
    NotLoaded(&'static str),
    /// The failure Event's reason, and what its note says.
    Failing(&'static str, &'static str),
    Throttled,
}

/// One attack: the hook it runs, the `limits` it asks for (as JSON), the selector it targets
/// with (`None`: the targets every attacker shares) and what it must say. A bomb may hit any
/// budget first (memory, operations, time: a loaded machine decides), so those say only that
/// a limit stopped them.
struct Attack {
    name: &'static str,
    language: &'static str,
    code: &'static str,
    limits: Option<&'static str>,
    selector: Option<fn() -> Value>,
    /// A webhook hook instead of the script, answering this body.
    webhook: Option<fn() -> String>,
    says: Says,
}

const BOMB: Says = Says::Failing("HookFailed", "limit exceeded");

const ATTACKS: &[Attack] = &[
    Attack {
        name: "map-growth",
        language: "rhai",
        code: "let m = #{}; let i = 0; loop { m[`k${i}`] = `${i}`.pad(2000, 'x'); i += 1; }",
        limits: None,
        selector: None,
        webhook: None,
        says: BOMB,
    },
    Attack {
        name: "table-growth",
        language: "lua",
        code: "local t = {} local i = 0 while true do i = i + 1 t[i] = string.rep('x', 4096) .. i end",
        limits: None,
        selector: None,
        webhook: None,
        says: BOMB,
    },
    Attack {
        name: "spin",
        language: "rhai",
        code: "loop { }",
        limits: None,
        selector: None,
        webhook: None,
        says: BOMB,
    },
    Attack {
        name: "spin-lua",
        language: "lua",
        code: "while true do end",
        limits: None,
        selector: None,
        webhook: None,
        says: BOMB,
    },
    // Values nested a level per loop: dropping one deep enough once overflowed the stack and
    // aborted the process.
    Attack {
        name: "nest-maps",
        language: "rhai",
        code: "let x = #{}; loop { x = #{a: x}; }",
        limits: None,
        selector: None,
        webhook: None,
        says: BOMB,
    },
    // A level per operation, past Rhai's size checks (277,000 levels in the default budget).
    Attack {
        name: "nest-closures",
        language: "rhai",
        code: "let f = || 0; loop { let g = f; f = || g; }",
        limits: None,
        selector: None,
        webhook: None,
        says: Says::NotLoaded("a closure that captures variables"),
    },
    Attack {
        name: "nest-tables",
        language: "lua",
        code: "local x = {} for i = 1, 1000 do x = {a = x} end return {labels = x}",
        limits: None,
        selector: None,
        webhook: None,
        says: Says::Failing("HookFailed", "nested deeper than 128"),
    },
    // Once a panic in `Duration::from_secs_f64` that lost a worker for good.
    Attack {
        name: "resync-forever",
        language: "rhai",
        code: "#{ resyncAfterSeconds: 1e300 }",
        limits: None,
        selector: None,
        webhook: None,
        says: Says::Failing("InvalidResponse", "resyncAfterSeconds"),
    },
    Attack {
        name: "asks-a-minute",
        language: "lua",
        code: "return {}",
        limits: Some(r#"{"timeoutMillis": 60000}"#),
        selector: None,
        webhook: None,
        says: Says::NotLoaded("--max-hook-timeout"),
    },
    // Matched against every ConfigMap event on the one dispatcher, once.
    Attack {
        name: "huge-selector",
        language: "lua",
        code: "return {}",
        limits: None,
        selector: Some(huge_selector),
        webhook: None,
        says: Says::NotLoaded("selector too large"),
    },
    // Ten new Events per sync, a sync a second, on every target.
    Attack {
        name: "event-flood",
        language: "rhai",
        code: "for i in 0..10 { event(\"Warning\", \"Flood\", `${timestamp()} ${i}`); } \
               #{ resyncAfterSeconds: 1 }",
        limits: None,
        selector: None,
        webhook: None,
        says: Says::Throttled,
    },
];

/// What `webhook` attacks answer: once a body up to 32 MiB, parsed whole outside every budget
/// (about 0.5 GiB for the first of these, per call, several calls at once).
const WEBHOOK_ATTACKS: &[Attack] = &[
    Attack {
        name: "webhook-zeros",
        language: "",
        code: "",
        limits: None,
        selector: None,
        webhook: Some(zeros),
        says: Says::Failing("HookFailed", "--webhook-max-response-bytes"),
    },
    Attack {
        name: "webhook-nested",
        language: "",
        code: "",
        limits: None,
        selector: None,
        webhook: Some(nested_maps),
        says: Says::Failing("HookFailed", "--script-memory"),
    },
];

/// 30 MiB of `[0,0,…]`: sixteen bytes a value once parsed.
fn zeros() -> String {
    let count = 15 * 1024 * 1024;
    let mut body = String::with_capacity(2 * count + 32);
    body.push_str(r#"{"attachments": [0"#);
    for _ in 1..count {
        body.push_str(",0");
    }
    body.push_str("]}");
    body
}

/// Just under the 4 MiB cap, of the shape that parses largest: maps nested 120 deep, each
/// holding the next under an empty key (about 126 bytes a byte).
fn nested_maps() -> String {
    let one = format!("{}0{}", r#"{"":"#.repeat(120), "}".repeat(120));
    let count = (4 * 1024 * 1024 - 64) / (one.len() + 1);
    format!(r#"{{"attachments": [{}]}}"#, vec![one; count].join(","))
}

/// A selector of 200 requirements, each with a value no object has.
fn huge_selector() -> Value {
    let expressions: Vec<Value> = (0..200)
        .map(|i| json!({"key": format!("k{i}"), "operator": "In", "values": [format!("v{i}")]}))
        .collect();
    json!({"matchExpressions": expressions})
}

/// How many Events the controller `name` published about objects in `namespace`.
async fn events_of(events: &kube::Api<Event>, name: &str) -> usize {
    events
        .list(&Default::default())
        .await
        .expect("listing Events")
        .items
        .iter()
        .filter(|event| event.related.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .count()
}

#[tokio::test]
async fn hostile_neighbours_cannot_stop_crash_or_exhaust_the_operator() {
    let client = client().await;
    let instance = unique_name("hostile");
    let mut operator = OperatorProcess::start(
        &instance,
        &["--workers", "16", "--webhook-allow", "127.0.0.0/8"],
    )
    .await;
    let bodies: std::collections::HashMap<String, String> = WEBHOOK_ATTACKS
        .iter()
        .filter_map(|attack| Some((format!("/{}", attack.name), (attack.webhook?)())))
        .collect();
    let server = HookServer::start_unrecorded(move |path, _| {
        Reply::status(200, bodies.get(path).cloned().unwrap_or_default())
    })
    .expect("the hostile webhook");
    let namespace = test_namespace(&client, "hostile").await;
    let mut attackers = Vec::new();
    for attack in ATTACKS.iter().chain(WEBHOOK_ATTACKS) {
        let name = format!("{instance}-{}", attack.name);
        let hook = if attack.webhook.is_some() {
            json!({"webhook": {"url": server.url(&format!("/{}", attack.name)), "timeout": "10s"}})
        } else {
            let mut script = json!({"language": attack.language, "inline": attack.code});
            if let Some(limits) = attack.limits {
                script["limits"] = serde_json::from_str(limits).expect("limits as JSON");
            }
            json!({"script": script})
        };
        let mut controller = own_decorator(&instance, &name, json!({"hostile": instance}), hook);
        if let Some(selector) = attack.selector {
            controller["spec"]["resources"][0]["labelSelector"] = selector();
        }
        apply(&client, &controller).await;
        attackers.push((attack, name, controller));
    }
    // Every attacker selects each of these: 8 targets, one work item per attacker each.
    for target in 0..8 {
        let object = labelled_config_map(
            &namespace,
            &format!("target-{target}"),
            json!({"hostile": instance}),
        );
        apply(&client, &object).await;
    }
    let took = good_neighbour_converges(&client, &instance, &namespace).await;
    eprintln!(
        "the good controller converged 20 targets in {took:?} beside {} hostile controllers",
        ATTACKS.len() + WEBHOOK_ATTACKS.len()
    );

    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), &namespace);
    for (attack, name, controller) in &attackers {
        let (said, expected) = match attack.says {
            Says::NotLoaded(expected) => {
                let loaded = wait_for(&client, controller, "its Ready condition", |o| {
                    o["status"]["conditions"][0]["status"] == "False"
                })
                .await;
                let message = loaded["status"]["conditions"][0]["message"].as_str();
                (message.unwrap_or_default().to_string(), expected)
            }
            Says::Failing(reason, expected) => {
                let failing = wait_for(&client, controller, "failing targets in its status", |o| {
                    o["status"]["failing"].as_i64().is_some_and(|n| n >= 1)
                })
                .await;
                assert_eq!(
                    failing["status"]["synced"], 0,
                    "{name}: {}",
                    failing["status"]
                );
                let event = wait_for_event(&client, Some(&namespace), reason, |event| {
                    event.related.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                })
                .await;
                (event.note.unwrap_or_default(), expected)
            }
            Says::Throttled => {
                let dropped = format!(
                    "metascript_events_dropped_total{{kind=\"decorator\",controller=\"{name}\",origin=\"script\"}}"
                );
                let dropped = eventually(&format!("{name}'s Events dropped"), || async {
                    operator.metric(&dropped).filter(|n| *n >= 1.0)
                })
                .await;
                let published = events_of(&events, name).await;
                eprintln!("{name}: {published} Events published, {dropped} dropped");
                // Its burst (100), and one a second after it, for the few seconds it ran.
                assert!(published <= 160, "{name} published {published} Events");
                continue;
            }
        };
        assert!(
            said.contains(expected),
            "{name} should say {expected:?}; it said: {said}"
        );
    }
    // Nothing of an attacker was applied: the targets are as created, and no attachment
    // exists (the good controller sets a label only).
    for target in 0..8 {
        let object = get(
            &client,
            &labelled_config_map(&namespace, &format!("target-{target}"), json!({})),
        )
        .await
        .expect("the target");
        assert_eq!(object["metadata"]["labels"], json!({"hostile": instance}));
        assert_eq!(object["metadata"]["annotations"], Value::Null, "{object}");
    }
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), &namespace);
    let names: Vec<String> = config_maps
        .list(&Default::default())
        .await
        .expect("listing ConfigMaps")
        .items
        .into_iter()
        .filter_map(|config_map| config_map.metadata.name)
        .filter(|name| !name.starts_with("target-") && !name.starts_with("good-"))
        .filter(|name| name != "kube-root-ca.crt")
        .collect();
    assert!(names.is_empty(), "attachments of attackers: {names:?}");

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
    let peak = operator.peak_rss_mib();
    eprintln!("operator peak RSS beside the hostile controllers: {peak} MiB");
    assert!(
        peak < PEAK_RSS_MIB,
        "the operator's resident memory peaked at {peak} MiB, over {PEAK_RSS_MIB}"
    );
}
