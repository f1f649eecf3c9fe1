//! High availability: `metascript run --leader-election` processes elect one leader, only it
//! writes, a standby takes over when the leader is killed (within the lease duration) or hands
//! over at once when the leader stops on SIGTERM.

use crate::support::operator::{OWN_OPERATOR_LABEL, apply, wait_for};
use crate::support::process::{self, OperatorProcess, leads};
use crate::support::{client, eventually, test_namespace, unique_name};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Short, so the test is quick; the failover bound scales with it.
const LEASE_SECONDS: u64 = 5;

/// Starts a replica electing through the lease `lease` in `namespace`.
async fn replica(instance: &str, namespace: &str, lease: &str) -> OperatorProcess {
    process::replica(instance, namespace, lease, LEASE_SECONDS, &[]).await
}

/// Waits until exactly one of `replicas` leads, and returns its index.
async fn one_leader(replicas: &[&OperatorProcess]) -> usize {
    eventually("exactly one leader", || async {
        let leading: Vec<usize> = replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| leads(r) == Some(true))
            .map(|(i, _)| i)
            .collect();
        let all_answer = replicas.iter().all(|r| leads(r).is_some());
        (all_answer && leading.len() == 1).then(|| leading[0])
    })
    .await
}

fn writes(replica: &OperatorProcess, controller: &str) -> f64 {
    let sample =
        format!("metascript_api_writes_total{{kind=\"decorator\",controller=\"{controller}\"}}");
    replica
        .metric(&sample)
        .expect("the metrics endpoint answers")
}

#[tokio::test]
async fn one_replica_leads_a_standby_takes_over_when_it_dies_or_hands_over() {
    let client = client().await;
    let namespace = test_namespace(&client, "leader-election").await;
    let name = unique_name("leader-election");
    let lease = unique_name("lease");
    let mut a = replica(&name, &namespace, &lease).await;
    let mut b = replica(&name, &namespace, &lease).await;
    apply(&client, &json!({
        "apiVersion": "metascript.dev/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": name, "labels": {OWN_OPERATOR_LABEL: name}},
        "spec": {
            "resources": [{"apiVersion": "v1", "resource": "configmaps", "labelSelector": {"matchLabels": {"decorate": name}}}],
            "hooks": {"sync": {"script": {"language": "lua", "inline": "return { labels = { seen = 'yes' } }"}}}
        }
    }))
    .await;
    let target = |n: usize| -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("target-{n}"), "namespace": namespace, "labels": {"decorate": name}}})
    };
    let decorated = |o: &Value| o["metadata"]["labels"]["seen"] == "yes";

    let leader = one_leader(&[&a, &b]).await;
    apply(&client, &target(1)).await;
    wait_for(&client, &target(1), "target 1 decorated", decorated).await;
    let (leader, standby) = if leader == 0 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(writes(leader, &name) >= 1.0, "the leader wrote");
    assert_eq!(writes(standby, &name), 0.0, "the standby wrote nothing");
    assert_eq!(leads(standby), Some(false));

    // A leader that dies without a word: the standby takes the lease once it expires.
    leader.signal(libc::SIGKILL);
    let killed = Instant::now();
    apply(&client, &target(2)).await;
    wait_for(
        &client,
        &target(2),
        "target 2 decorated after failover",
        decorated,
    )
    .await;
    let failover = killed.elapsed();
    assert!(
        failover < Duration::from_secs(LEASE_SECONDS + 5),
        "failover took {failover:?} with a {LEASE_SECONDS} s lease"
    );
    assert_eq!(leads(standby), Some(true));
    let survivor = standby;

    // A leader stopped by SIGTERM releases the lease: a standby leads at its next look.
    let mut c = replica(&name, &namespace, &lease).await;
    assert_eq!(
        one_leader(&[survivor, &c]).await,
        0,
        "the survivor kept leading"
    );
    survivor.signal(libc::SIGTERM);
    let stopped = Instant::now();
    let status = survivor.exit_status().await;
    assert!(status.success(), "the leader exited with {status}");
    eventually("the new replica leads", || async {
        (leads(&c) == Some(true)).then_some(())
    })
    .await;
    let handover = stopped.elapsed();
    assert!(
        handover < Duration::from_secs(2),
        "handover took {handover:?}"
    );
    apply(&client, &target(3)).await;
    wait_for(
        &client,
        &target(3),
        "target 3 decorated by the new leader",
        decorated,
    )
    .await;
    assert!(writes(&c, &name) >= 1.0);
    c.signal(libc::SIGTERM);
    assert!(c.exit_status().await.success());
}
