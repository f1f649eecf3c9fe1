//! Sharding: `metascript run --shards auto` replicas share the targets of DecoratorControllers,
//! each syncing its share. The API server's audit log (every request names its replica in the
//! User-Agent) says who wrote what, so the tests check what no metric could: every target
//! written once on the first pass, a frozen replica silent from its lease's lapse until it has
//! waited its way back in, and no target ever written by one replica after another took it over.
//!
//! One walk through the life of a group, since starting replicas is the slow part: three
//! replicas converge, a script edit, a replica frozen (SIGSTOP) past its lease and thawed,
//! one killed (SIGKILL), a fourth joining while the targets keep changing, and one leaving as
//! in a rollout (SIGTERM). The hooks mirror the label of a `generation` ServiceAccount they
//! read into a label, so one write of the test re-syncs every target. One controller does only
//! that, over 600 targets (a pure hook: a replica that keeps a target never re-runs it for
//! nothing); another, over 60 more, also stamps a random annotation, so every one of its syncs
//! writes (a replica that may not write, but would, shows). The ConfigMaps are only the
//! controllers' targets, so each replica caches its share of them, handed over with them.

use crate::support::audit::{AuditedWrite, operator_writes, operator_writes_once};
use crate::support::cluster::Cluster;
use crate::support::operator::{OWN_OPERATOR_LABEL, apply, get, install_crds};
use crate::support::process::{self, OperatorProcess};
use crate::support::transform::{
    TRANSFORM_LUA, config_map, config_template, install_transform, transform_controller,
};
use crate::support::watch::watch_until;
use crate::support::{client, eventually, test_namespace, unique_name};
use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

/// Short, so the test is quick; every bound below scales with it.
const LEASE_SECONDS: u64 = 5;
/// How long a replica that joins beside others waits before writing: half the lease (how long
/// a view of the members is used) plus the margin (a fifth of the lease, at least 1 s).
const WARM_UP: Duration = Duration::from_millis(3_500);
/// The mirrored targets: enough that a quarter of a fair share is over four standard
/// deviations of how rendezvous hashing splits them (so the split check does not flake), few
/// enough to stay quick.
const TARGETS: usize = 600;
/// The stamped targets.
const STAMPED: usize = 60;

/// One replica of the group, ready.
async fn replica(instance: &str, namespace: &str, group: &str) -> OperatorProcess {
    process::sharded_replica(instance, namespace, group, LEASE_SECONDS, &[]).await
}

/// Waits until every replica sees all of them and may write.
async fn settled(replicas: &[&OperatorProcess]) {
    eventually("every replica sees the others and may write", || async {
        replicas
            .iter()
            .all(|r| {
                r.metric("metascript_shard_members") == Some(replicas.len() as f64)
                    && r.metric("metascript_shard_writable") == Some(1.0)
            })
            .then_some(())
    })
    .await;
}

/// Script work items each replica ran for the controller.
fn syncs(replicas: &[&OperatorProcess], controller: &str) -> Vec<f64> {
    let sample =
        format!("metascript_syncs_total{{kind=\"decorator\",controller=\"{controller}\"}}");
    replicas
        .iter()
        .map(|r| r.metric(&sample).expect("the metrics endpoint answers"))
        .collect()
}

/// A controller over the ConfigMaps labelled `shard-test: <targets>`, mirroring the generation
/// into `seen` (and `extra` labels), and stamping them when `stamp`.
fn controller(name: &str, instance: &str, targets: &str, extra: &str, stamp: bool) -> Value {
    let stamp = if stamp {
        "annotations = { stamp = tostring(math.random()) .. '-' .. tostring(os.clock()) },"
    } else {
        ""
    };
    let lua = format!(
        "local generation = get('v1', 'ServiceAccount', request.object.metadata.namespace, 'generation')\n\
         return {{ labels = {{ seen = generation.metadata.labels.gen{extra} }}, {stamp} }}"
    );
    json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: instance}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"shard-test": targets}}}],
            "reads": [{"apiVersion": "v1", "resource": "serviceaccounts"}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": lua}}}
        }
    })
}

async fn set_generation(client: &kube::Client, namespace: &str, generation: u32) {
    apply(
        client,
        &json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "generation", "namespace": namespace,
                         "labels": {"gen": generation.to_string()}}
        }),
    )
    .await;
}

/// Creates `count` ConfigMaps labelled `shard-test: <targets>`, ten at a time.
async fn create_targets(client: &kube::Client, namespace: &str, targets: &str, count: usize) {
    futures::stream::iter(0..count)
        .for_each_concurrent(10, |i| async move {
            apply(
                client,
                &json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("{targets}-{i}"), "namespace": namespace, "labels": {"shard-test": targets}}
                }),
            )
            .await;
        })
        .await;
}

/// Waits until every one of the `count` targets labelled `shard-test: <targets>` carries
/// `label` = `value`.
async fn labelled(api: &Api<ConfigMap>, targets: (&str, usize), label: &str, value: &str) {
    let (targets, count) = targets;
    let selector = format!("shard-test={targets}");
    let what = format!("{count} targets of {targets} with {label}={value}");
    watch_until(api.clone(), Some(&selector), &what, |objects| {
        objects.len() == count
            && objects.iter().all(|object| {
                let labels = object.metadata.labels.as_ref();
                labels.and_then(|l| l.get(label)).map(String::as_str) == Some(value)
            })
    })
    .await;
}

/// The targets whose writers, in the order the API server received their writes, go back to a
/// replica after another: a target written by two replicas at once.
fn interleaved(writes: &[&AuditedWrite]) -> Vec<String> {
    let mut writers: BTreeMap<(&str, &str), Vec<i32>> = BTreeMap::new();
    for write in writes {
        let runs = writers
            .entry((&write.field_manager, &write.name))
            .or_default();
        if runs.last() != Some(&write.pid) {
            runs.push(write.pid);
        }
    }
    writers
        .into_iter()
        .filter(|(_, runs)| {
            let mut distinct = runs.clone();
            distinct.sort();
            distinct.dedup();
            distinct.len() < runs.len()
        })
        .map(|((manager, name), runs)| format!("{manager} {name}: {runs:?}"))
        .collect()
}

fn since(writes: &[AuditedWrite], from: jiff::Timestamp) -> Vec<&AuditedWrite> {
    writes.iter().filter(|w| w.received >= from).collect()
}

/// The ConfigMaps each replica caches whole.
const CACHED: &str = r#"metascript_cached_objects{resource="ConfigMap.v1"}"#;

/// Waits until the replicas cache the targets between them, each once, about evenly: each
/// keeps its share, not the cluster's ConfigMaps.
async fn cache_their_shares(replicas: &[&OperatorProcess]) {
    let total = TARGETS + STAMPED;
    let cached = eventually("each replica caches its share of the targets", || async {
        let cached: Vec<f64> = replicas
            .iter()
            .map(|r| r.metric(CACHED))
            .collect::<Option<_>>()?;
        (cached.iter().sum::<f64>() == total as f64).then_some(cached)
    })
    .await;
    even(&cached, total, "the cached targets");
}

/// Each replica's share of `total` items is within a quarter of an even split.
fn even(shares: &[f64], total: usize, what: &str) {
    let fair = total as f64 / shares.len() as f64;
    for share in shares {
        assert!(
            (*share - fair).abs() <= fair / 4.0,
            "{what}: shares {shares:?} of {total}, fair {fair}"
        );
    }
}

#[tokio::test]
async fn replicas_share_the_targets_hand_them_over_and_never_write_one_at_once() {
    let client = client().await;
    install_crds(&client).await.expect("installing the CRDs");
    let namespace = test_namespace(&client, "sharding").await;
    let instance = unique_name("sharding");
    let group = unique_name("shards");
    let (mirror, stamp) = (format!("{instance}-mirror"), format!("{instance}-stamp"));
    let mirror_manager = format!("metascript.dev/decorator-{mirror}");
    let stamped = format!("{mirror}ed");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let (api_of, mirrored, stamped_ones) = (&api, mirror.as_str(), stamped.as_str());
    let generation_is = move |generation: u32| async move {
        let value = generation.to_string();
        labelled(api_of, (mirrored, TARGETS), "seen", &value).await;
        labelled(api_of, (stamped_ones, STAMPED), "seen", &value).await;
    };

    let (a, mut b, c) = tokio::join!(
        replica(&instance, &namespace, &group),
        replica(&instance, &namespace, &group),
        replica(&instance, &namespace, &group)
    );
    settled(&[&a, &b, &c]).await;
    set_generation(&client, &namespace, 1).await;
    create_targets(&client, &namespace, &mirror, TARGETS).await;
    create_targets(&client, &namespace, &stamped, STAMPED).await;
    apply(&client, &controller(&mirror, &instance, &mirror, "", false)).await;
    apply(&client, &controller(&stamp, &instance, &stamped, "", true)).await;

    // Three replicas converge: each target written once, by one replica, each a third of them.
    generation_is(1).await;
    let writes = operator_writes_once(&namespace, "every target's write audited", |writes| {
        let written: HashSet<(&str, &str)> = writes
            .iter()
            .map(|w| (w.field_manager.as_str(), w.name.as_str()))
            .collect();
        written.len() >= TARGETS + STAMPED
    })
    .await;
    let mut per_target: BTreeMap<(&str, &str), Vec<i32>> = BTreeMap::new();
    for write in &writes {
        per_target
            .entry((&write.field_manager, &write.name))
            .or_default()
            .push(write.pid);
    }
    assert_eq!(per_target.len(), TARGETS + STAMPED);
    // A pure target is written once. A stamped one is written by each sync, and a loaded
    // machine may sync it again (a lease renewed late looks like a membership change, which
    // re-syncs what is not pure): by its owner alone.
    let wrong: Vec<_> = per_target
        .iter()
        .filter(|((manager, _), writers)| {
            if *manager == mirror_manager {
                writers.len() != 1
            } else {
                writers.iter().any(|pid| *pid != writers[0])
            }
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "each target written once, by one replica: {wrong:?}"
    );
    let first: Vec<f64> = [&a, &b, &c]
        .iter()
        .map(|r| {
            per_target
                .iter()
                .filter(|((manager, _), writers)| {
                    *manager == mirror_manager && writers.as_slice() == [r.pid()]
                })
                .count() as f64
        })
        .collect();
    even(&first, TARGETS, "the first sync");
    let synced = syncs(&[&a, &b, &c], &mirror);
    assert!(
        synced
            .iter()
            .zip(&first)
            .all(|(synced, wrote)| synced >= wrote),
        "each replica synced what it wrote: {synced:?}, {first:?}"
    );
    cache_their_shares(&[&a, &b, &c]).await;
    let status_of = controller(&mirror, &instance, &mirror, "", false);
    let status = eventually("the status counts every replica's targets", || async {
        let object = get(&client, &status_of).await?;
        let status = object["status"].clone();
        (status["targets"] == TARGETS && status["synced"] == TARGETS).then_some(status)
    })
    .await;
    // Its usage too: each replica called the hook and wrote for about a third of them.
    let usage = &status["usage"]["total"];
    assert!(
        usage["hookCalls"].as_u64() >= Some(TARGETS as u64),
        "{usage}"
    );
    assert!(usage["writes"].as_u64() >= Some(TARGETS as u64), "{usage}");

    // A script edit re-syncs every target once, across the replicas: each is written once
    // more, by the replica that wrote it first.
    let edited_at = jiff::Timestamp::now();
    let edited = ", edited = 'yes'";
    apply(
        &client,
        &controller(&mirror, &instance, &mirror, edited, false),
    )
    .await;
    labelled(&api, (&mirror, TARGETS), "edited", "yes").await;
    let writes = operator_writes_once(&namespace, "every edit audited", |writes| {
        let edited: HashSet<&str> = since(writes, edited_at)
            .iter()
            .filter(|w| w.field_manager == mirror_manager)
            .map(|w| w.name.as_str())
            .collect();
        edited.len() >= TARGETS
    })
    .await;
    let mut edit_writers: BTreeMap<(&str, &str), Vec<i32>> = BTreeMap::new();
    for write in since(&writes, edited_at) {
        if write.field_manager == mirror_manager {
            edit_writers
                .entry((&write.field_manager, &write.name))
                .or_default()
                .push(write.pid);
        }
    }
    assert_eq!(edit_writers.len(), TARGETS, "every target re-synced");
    for (target, writers) in &edit_writers {
        assert_eq!(
            writers, &per_target[target],
            "{target:?} written once, by its owner"
        );
    }

    // Frozen past its lease: the others take its targets; thawed, it writes nothing until it
    // has joined again and waited out every view that gave its targets away.
    let all = operator_writes(&namespace).await.len();
    let stopped = jiff::Timestamp::now();
    c.signal(libc::SIGSTOP);
    set_generation(&client, &namespace, 2).await;
    generation_is(2).await;
    let thawed = jiff::Timestamp::now();
    c.signal(libc::SIGCONT);
    settled(&[&a, &b, &c]).await;
    let writes = eventually("the thawed replica writes its targets again", || async {
        let writes = operator_writes(&namespace).await;
        let back = since(&writes, thawed).iter().any(|w| w.pid == c.pid());
        back.then_some(writes)
    })
    .await;
    assert!(writes.len() > all);
    let silent_until = thawed + jiff::SignedDuration::try_from(WARM_UP).unwrap();
    let early: Vec<String> = since(&writes, stopped)
        .iter()
        .filter(|w| w.pid == c.pid() && w.received < silent_until)
        .map(|w| format!("{} at {}", w.name, w.received))
        .collect();
    assert!(
        early.is_empty(),
        "the frozen replica wrote before it could own anything: {early:?}"
    );
    let clashes = interleaved(&since(&writes, stopped));
    assert!(
        clashes.is_empty(),
        "targets written by two replicas at once: {clashes:?}"
    );

    // Killed without a word: its targets converge on the others within the lease plus 10 s.
    let killed = Instant::now();
    b.signal(libc::SIGKILL);
    let _ = b.exit_status().await;
    set_generation(&client, &namespace, 3).await;
    generation_is(3).await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(LEASE_SECONDS + 10),
        "the killed replica's targets converged after {took:?}, lease {LEASE_SECONDS} s"
    );
    settled(&[&a, &c]).await;
    cache_their_shares(&[&a, &c]).await;

    // A fourth joins while the targets keep changing: it takes about a third, and no target is
    // written by one replica after another started.
    let joined = jiff::Timestamp::now();
    let mut d = replica(&instance, &namespace, &group).await;
    let mut generation = 3;
    loop {
        generation += 1;
        let writable = d.metric("metascript_shard_writable") == Some(1.0);
        set_generation(&client, &namespace, generation).await;
        generation_is(generation).await;
        if writable {
            break;
        }
    }
    settled(&[&a, &c, &d]).await;
    let last_round = jiff::Timestamp::now();
    generation += 1;
    set_generation(&client, &namespace, generation).await;
    generation_is(generation).await;
    let writes = eventually("every target mirrored in the last round", || async {
        let writes = operator_writes(&namespace).await;
        let written: HashSet<&str> = since(&writes, last_round)
            .iter()
            .filter(|w| w.field_manager == mirror_manager)
            .map(|w| w.name.as_str())
            .collect();
        (written.len() == TARGETS).then_some(writes)
    })
    .await;
    let clashes = interleaved(&since(&writes, joined));
    assert!(
        clashes.is_empty(),
        "targets written by two replicas at once: {clashes:?}"
    );
    let mut last_writer: BTreeMap<&str, i32> = BTreeMap::new();
    for write in since(&writes, last_round) {
        if write.field_manager == mirror_manager {
            last_writer.insert(&write.name, write.pid);
        }
    }
    let owned: Vec<f64> = [&a, &c, &d]
        .iter()
        .map(|r| last_writer.values().filter(|pid| **pid == r.pid()).count() as f64)
        .collect();
    assert_eq!(
        owned.iter().sum::<f64>(),
        TARGETS as f64,
        "every target has one writer"
    );
    even(&owned, TARGETS, "after the join");
    cache_their_shares(&[&a, &c, &d]).await;

    // Stopped as in a rollout (SIGTERM): it leaves, deleting its Lease, so the others take its
    // targets at their next look instead of after the lease runs out.
    d.signal(libc::SIGTERM);
    let status = d.exit_status().await;
    assert!(status.success(), "the replica exited with {status}");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let holders: Vec<String> = leases
        .list(&Default::default())
        .await
        .expect("listing the leases")
        .items
        .into_iter()
        .filter_map(|lease| lease.spec?.holder_identity)
        .collect();
    let d_pid = format!("_{}", d.pid());
    assert!(
        !holders.iter().any(|holder| holder.ends_with(&d_pid)),
        "the stopped replica's Lease is gone: {holders:?}"
    );
    settled(&[&a, &c]).await;
    generation += 1;
    set_generation(&client, &namespace, generation).await;
    generation_is(generation).await;

    // A controller that reads ConfigMaps needs every one of them: each replica lists them
    // again and keeps them whole from then on.
    let reader = json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": format!("{instance}-reader"), "labels": {OWN_OPERATOR_LABEL: &instance}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "serviceaccounts", "labelSelector": {"matchLabels": {"shard-test": "none"}}}],
            "reads": [{"apiVersion": "v1", "resource": "configmaps"}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return {}"}}}
        }
    });
    apply(&client, &reader).await;
    eventually("every replica caches every target", || async {
        [&a, &c]
            .iter()
            .all(|r| {
                r.metric(CACHED)
                    .is_some_and(|n| n >= (TARGETS + STAMPED) as f64)
            })
            .then_some(())
    })
    .await;
}

/// A MapController sharded: every replica fans the parent out, each maps the pairs it owns,
/// and the parent's owner aggregates its status from what all of them wrote.
#[tokio::test]
async fn map_pairs_spread_over_the_replicas_and_the_parent_counts_them_all() {
    const INPUTS: usize = 60;
    let mut cluster = Cluster::new().await;
    let client = cluster.client.clone();
    let namespace = test_namespace(&client, "sharding-map").await;
    let group = install_transform(&mut cluster, "sharding-map").await;
    let instance = unique_name("sharding-map");
    let shard_group = unique_name("shards");
    let (a, b) = tokio::join!(
        replica(&instance, &namespace, &shard_group),
        replica(&instance, &namespace, &shard_group)
    );
    settled(&[&a, &b]).await;
    for i in 0..INPUTS {
        let source = config_map(
            &namespace,
            &format!("source-{i}"),
            json!({"render": "yes"}),
            json!({"k": i.to_string()}),
        );
        cluster.apply(&source).await;
    }
    let mut controller = transform_controller(&instance, &group, TRANSFORM_LUA);
    controller["metadata"]["labels"] = json!({OWN_OPERATOR_LABEL: instance});
    cluster.apply(&controller).await;
    let template = config_template(&group, &namespace);
    cluster.apply(&template).await;
    cluster
        .wait_for(&template, "every input rendered and counted", |t| {
            t["status"]["inputs"]["configmaps"]["total"] == INPUTS
                && t["status"]["outputs"]["configmaps"]["total"] == INPUTS
        })
        .await;

    let mut writers: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let audited = operator_writes_once(&namespace, "every output's write audited", |writes| {
        writes.iter().map(|w| &w.name).collect::<HashSet<_>>().len() >= INPUTS
    })
    .await;
    for write in audited {
        writers.entry(write.name).or_default().push(write.pid);
    }
    assert_eq!(
        writers.len(),
        INPUTS,
        "only outputs are written: {writers:?}"
    );
    assert!(
        writers
            .iter()
            .all(|(name, pids)| name.ends_with("-rendered") && pids.len() == 1),
        "each output written once, by one replica: {writers:?}"
    );
    for replica in [&a, &b] {
        let wrote = writers
            .values()
            .filter(|pids| pids[0] == replica.pid())
            .count();
        assert!(wrote > 0, "both replicas map pairs: {writers:?}");
    }
}
