//! The operator's webhook client: it connects only where `--webhook-allow` says, and never to
//! the API server unless an entry names its address ([`crate::hooks::egress`]). Where the API
//! server is, is read once at start.

use crate::hooks::WebhookClient;
use crate::hooks::egress::{AllowEntry, EgressPolicy};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The client for `allow`, with the API server's addresses guarded, reading answers of up to
/// `max_response_bytes`.
pub(crate) async fn webhook_client(
    client: &kube::Client,
    cluster_url: &http::Uri,
    allow: &[AllowEntry],
    max_response_bytes: u64,
) -> WebhookClient {
    if allow.is_empty() {
        tracing::info!(
            "no webhook destination is allowed (--webhook-allow is empty): webhook hooks fail \
             until an admin lists where they may go"
        );
        return WebhookClient::restricted(EgressPolicy::default(), max_response_bytes);
    }
    let api_server = api_server_addresses(client, cluster_url).await;
    let listed: Vec<String> = allow.iter().map(ToString::to_string).collect();
    tracing::info!(
        allow = listed.join(","),
        api_server = ?api_server,
        "webhook hooks connect only where --webhook-allow says"
    );
    WebhookClient::restricted(
        EgressPolicy::new(allow.to_vec(), api_server),
        max_response_bytes,
    )
}

/// Where the API server is: the addresses of the operator's own cluster URL, and those of the
/// `default/kubernetes` Service (its ClusterIPs, and its endpoints: the API servers' own
/// addresses), each when it can be read.
async fn api_server_addresses(client: &kube::Client, cluster_url: &http::Uri) -> BTreeSet<IpAddr> {
    let mut addresses = BTreeSet::new();
    if let Some(host) = cluster_url.host() {
        let host = host.trim_matches(['[', ']']);
        let port = cluster_url.port_u16().unwrap_or(443);
        match host.parse::<IpAddr>() {
            Ok(address) => {
                addresses.insert(address);
            }
            Err(_) => match tokio::net::lookup_host((host, port)).await {
                Ok(resolved) => addresses.extend(resolved.map(|address| address.ip())),
                Err(error) => {
                    tracing::warn!(%error, host, "cannot resolve the API server's host to guard it from webhook hooks")
                }
            },
        }
    }
    let unread = |what: &str, error: kube::Error| {
        tracing::warn!(%error, "cannot read {what}; webhook hooks are kept from the API server's other addresses");
    };
    match Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
    {
        Ok(Some(service)) => {
            let spec = service.spec.unwrap_or_default();
            let ips = spec.cluster_ips.unwrap_or_default().into_iter();
            addresses.extend(
                ips.chain(spec.cluster_ip)
                    .filter_map(|ip| ip.parse::<IpAddr>().ok()),
            );
        }
        Ok(None) => {}
        Err(error) => unread("the default/kubernetes Service", error),
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await;
    match slices {
        Ok(slices) => addresses.extend(
            slices
                .items
                .iter()
                .flat_map(|slice| slice.endpoints.iter().flatten())
                .flat_map(|endpoint| &endpoint.addresses)
                .filter_map(|address| address.parse::<IpAddr>().ok()),
        ),
        Err(error) => unread("the default/kubernetes EndpointSlices", error),
    }
    addresses
}
