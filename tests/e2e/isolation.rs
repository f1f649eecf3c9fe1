//! One bad controller cannot hurt the others: memory bombs stay within the operator's script
//! memory while a good controller converges, a blocking built-in is refused, and slow hooks do
//! not hold every worker. Each runs `metascript run` as a process of its own, so its memory can
//! be read and its workers are its own.

use crate::support::operator::{apply, wait_for};
use crate::support::process::{
    OperatorProcess, good_neighbour_converges, labelled_config_map, own_decorator,
};
use crate::support::{client, eventually, test_namespace, unique_name};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn script(language: &str, code: &str) -> Value {
    json!({"script": {"language": language, "inline": code}})
}

/// Hooks that build far more than any hook should, each its own way.
const BOMBS: &[(&str, &str)] = &[
    // A map of ever more strings.
    (
        "rhai",
        "let m = #{}; let i = 0; loop { m[`k${i}`] = `${i}`.pad(2000, 'x'); i += 1; }",
    ),
    // A table of ever more strings.
    (
        "lua",
        "local t = {} local i = 0 while true do i = i + 1 t[i] = string.rep('x', 4096) .. i end",
    ),
    // A 50 MB string returned as an attachment.
    (
        "lua",
        "return { attachments = { { apiVersion = 'v1', kind = 'ConfigMap', \
         metadata = { name = 'big-' .. request.object.metadata.name }, \
         data = { big = string.rep('x', 50 * 1024 * 1024) } } } }",
    ),
];

#[tokio::test]
async fn memory_bombs_stay_within_the_script_memory_while_a_good_controller_converges() {
    let client = client().await;
    metascript::testing::install_crds(&client)
        .await
        .expect("installing the CRDs");
    let instance = unique_name("bombs");
    let operator =
        OperatorProcess::start(&instance, &["--workers", "16", "--script-memory", "128Mi"]).await;
    let namespace = test_namespace(&client, "bombs").await;
    let mut bombs = Vec::new();
    for (index, (language, code)) in BOMBS.iter().enumerate() {
        let name = format!("{instance}-bomb-{index}");
        let bomb = own_decorator(
            &instance,
            &name,
            json!({"bomb": instance}),
            script(language, code),
        );
        apply(&client, &bomb).await;
        bombs.push(name);
    }
    // 16 targets, each selected by every bomb: 48 calls at once, retried as they fail.
    for target in 0..16 {
        let object = labelled_config_map(
            &namespace,
            &format!("target-{target}"),
            json!({"bomb": instance}),
        );
        apply(&client, &object).await;
    }
    let took = good_neighbour_converges(&client, &instance, &namespace).await;
    eprintln!("the good controller converged 20 targets in {took:?} beside the bombs");
    // Every bomb failed on a budget (not on anything else), and nothing of theirs was applied.
    for bomb in &bombs {
        let failures = eventually(&format!("{bomb} failing on a budget"), || async {
            let sample = format!(
                "metascript_sync_failures_total{{kind=\"decorator\",controller=\"{bomb}\",reason=\"HookFailed\"}}"
            );
            let invalid = format!(
                "metascript_sync_failures_total{{kind=\"decorator\",controller=\"{bomb}\",reason=\"InvalidResponse\"}}"
            );
            let failed = operator.metric(&sample)? + operator.metric(&invalid)?;
            (failed >= 1.0).then_some(failed)
        })
        .await;
        assert!(failures >= 1.0);
    }
    let big = labelled_config_map(&namespace, "big-target-0", json!({}));
    assert!(
        crate::support::operator::get(&client, &big).await.is_none(),
        "the 50 MB attachment was never applied"
    );
    let peak = operator.peak_rss_mib();
    eprintln!("operator peak RSS with the bombs: {peak} MiB");
    // 128 MiB of scripts, 16 floors of 4 MiB, and the operator's own caches and runtime
    // (measured 233-250 MiB alone; 400 leaves room for a loaded machine).
    assert!(
        peak < 400,
        "the operator's resident memory peaked at {peak} MiB"
    );
}

#[tokio::test]
async fn a_blocking_builtin_is_refused_when_the_controller_loads() {
    let client = client().await;
    metascript::testing::install_crds(&client)
        .await
        .expect("installing the CRDs");
    let instance = unique_name("sleep");
    let _operator = OperatorProcess::start(&instance, &[]).await;
    let name = format!("{instance}-sleeper");
    let controller = own_decorator(
        &instance,
        &name,
        json!({"selects": name}),
        script("rhai", "let wait = 300;\nsleep(wait);\n#{}"),
    );
    apply(&client, &controller).await;
    let loaded = wait_for(&client, &controller, "the Ready condition", |o| {
        o["status"]["conditions"][0]["status"] == "False"
    })
    .await;
    let condition = &loaded["status"]["conditions"][0];
    assert_eq!(condition["reason"], "ScriptError", "{condition}");
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`sleep` is not available to hooks") && message.contains("line 2"),
        "{message}"
    );
}

/// A server that accepts connections and never answers: every call to it runs into the
/// webhook's timeout, holding its worker meanwhile, without using any CPU.
fn silent_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    (port, handle)
}

#[tokio::test]
async fn slow_hooks_do_not_hold_up_another_controllers_first_sync() {
    let client = client().await;
    metascript::testing::install_crds(&client)
        .await
        .expect("installing the CRDs");
    let instance = unique_name("slow");
    let operator = OperatorProcess::start(
        &instance,
        &["--workers", "16", "--webhook-allow", "127.0.0.0/8"],
    )
    .await;
    let namespace = test_namespace(&client, "slow").await;
    let (port, _server) = silent_server();
    let slow = format!("{instance}-slow");
    let webhook =
        json!({"webhook": {"url": format!("http://127.0.0.1:{port}/sync"), "timeout": "30s"}});
    apply(
        &client,
        &own_decorator(&instance, &slow, json!({"selects": slow}), webhook),
    )
    .await;
    for target in 0..16 {
        let object = labelled_config_map(
            &namespace,
            &format!("slow-{target}"),
            json!({"selects": slow}),
        );
        apply(&client, &object).await;
    }
    // The slow controller takes every worker it may before the good one arrives.
    let running =
        format!("metascript_controller_running{{kind=\"decorator\",controller=\"{slow}\"}}");
    eventually("the slow controller holding its workers", || async {
        operator.metric(&running).filter(|held| *held >= 8.0)
    })
    .await;
    let good = format!("{instance}-good");
    let started = Instant::now();
    let sync = script("lua", "return { labels = { good = 'yes' } }");
    apply(
        &client,
        &own_decorator(&instance, &good, json!({"selects": good}), sync),
    )
    .await;
    let target = labelled_config_map(&namespace, "good-0", json!({"selects": good}));
    apply(&client, &target).await;
    wait_for(&client, &target, "the good controller's first sync", |o| {
        o["metadata"]["labels"]["good"] == "yes"
    })
    .await;
    let waited = started.elapsed();
    eprintln!("the good controller's first sync took {waited:?} beside 16 slow hooks");
    // Without a share cap, all 16 workers wait 30 s on the silent webhook first.
    assert!(
        waited < Duration::from_secs(20),
        "the good controller waited {waited:?} behind the slow one"
    );
}
