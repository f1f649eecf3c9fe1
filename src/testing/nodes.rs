//! The simulated Nodes of a [`Flavor::Cluster`](super::Flavor) plane: the Node objects the plane
//! creates and the kwok stages that make them (and the Pods scheduled onto them) behave like
//! kubelets would, without containers.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher::{self, watcher};
use serde_json::json;

/// kwok's stages (node initialize and heartbeat, pod ready, complete and delete), handed to it
/// with `--config`; see the file's header for where they come from.
pub(super) const KWOK_STAGES: &str = include_str!("kwok-stages.yaml");

/// The annotation kwok selects the Nodes it manages by (`kwok
/// --manage-nodes-with-annotation-selector`), as kwok's documentation names it. A Node created
/// without it is left alone, as a real kubelet's Node would be.
pub const FAKE_NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// The label every simulated Node carries, so tests and benchmarks can select them.
pub const FAKE_NODE_LABEL: (&str, &str) = ("type", "kwok");

/// Pod IPs, handed out by kwok from one pool for all Nodes. A /9 rather than per-Node /24s: a
/// Node holds far more than 254 Pods in benchmarks, and kwok does not stop at the end of a
/// range. Disjoint from the Service range (10.0.0.0/16) and the Node addresses below.
pub(super) const POD_CIDR: &str = "10.128.0.0/9";

/// How long kwok's Node Leases last; kwok renews them every quarter of it, as a kubelet does,
/// and the controller-manager's node lifecycle controller reads them as the Nodes' heartbeat.
pub(super) const NODE_LEASE_SECONDS: u32 = 40;

/// The name of the `i`th simulated Node.
pub fn node_name(i: usize) -> String {
    format!("kwok-node-{i}")
}

/// A Node as a kubelet would register it, annotated for kwok. No taint: every Node here is
/// simulated, so workloads need no toleration (kwok's docs taint fake Nodes only to keep real
/// workloads of a shared cluster off them).
fn node(i: usize) -> Node {
    let name = node_name(i);
    // 10.64.0.1 onwards (10.64.0.0/10), one address per Node, as a kubelet reports its
    // InternalIP.
    let k = i + 1;
    let ip = format!("10.{}.{}.{}", 64 + k / 65_536, (k / 256) % 256, k % 256);
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION.0: FAKE_NODE_ANNOTATION.1},
            "labels": {
                FAKE_NODE_LABEL.0: FAKE_NODE_LABEL.1,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/agent": "",
            },
        },
        // Created with its addresses, as a kubelet registers; kwok's node-initialize stage
        // fills in the rest (conditions, capacity: 1k CPUs, 1 TiB, 1M pods, node info).
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": name},
            ],
        },
    }))
    .expect("a valid Node")
}

/// Creates the `count` simulated Nodes, a few requests in flight at a time (hundreds of Nodes
/// one after another would add seconds to the start).
pub(super) async fn create(client: &kube::Client, count: usize) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let nodes = nodes.clone();
            async move { nodes.create(&PostParams::default(), &node(i)).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Whether a Node can take Pods: Ready, and without the `node.kubernetes.io/not-ready` taint
/// that admission puts on every new Node and the node lifecycle controller removes once it sees
/// the Node Ready (the scheduler skips a tainted Node).
fn schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    ready && !tainted
}

/// Resolves once all `count` simulated Nodes can take Pods; an error string says how many can
/// and what the watch last saw. A watch rather than polling lists: with hundreds of Nodes a list
/// every few milliseconds would cost the apiserver more than the start itself.
pub(super) async fn schedulable_nodes(client: &kube::Client, count: usize) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let selector = format!("{}={}", FAKE_NODE_LABEL.0, FAKE_NODE_LABEL.1);
    let config = watcher::Config::default().labels(&selector);
    let mut events = std::pin::pin!(watcher(nodes, config));
    let mut ready = BTreeSet::new();
    let mut init = BTreeSet::new();
    loop {
        let event = match events.next().await {
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                // The watcher retries by itself; the caller's deadline bounds the wait.
                tracing::debug!(%error, "watching the simulated Nodes");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            None => return Err("the Node watch ended".into()),
        };
        let track = |set: &mut BTreeSet<String>, node: Node| {
            let name = node.metadata.name.clone().unwrap_or_default();
            if schedulable(&node) {
                set.insert(name);
            } else {
                set.remove(&name);
            }
        };
        match event {
            watcher::Event::Init => init.clear(),
            watcher::Event::InitApply(node) => track(&mut init, node),
            watcher::Event::InitDone => ready = std::mem::take(&mut init),
            watcher::Event::Apply(node) => track(&mut ready, node),
            watcher::Event::Delete(node) => {
                ready.remove(&node.metadata.name.unwrap_or_default());
            }
        }
        if ready.len() >= count {
            return Ok(());
        }
    }
}
