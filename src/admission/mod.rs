//! The validating admission webhook `metascript run` serves. A controller may be created,
//! changed or deleted only by someone allowed to use the ServiceAccount it runs as
//! (`crate::tenancy`); one whose scripts do not compile or whose `spec.tests` fail is refused
//! with the hook, line and column, and so is a labelled ConfigMap of scripts that does not
//! compile. The script checks are `crate::validate`'s, the same `metascript validate` runs.
//! The webhook trusts no caller: see [`review`].

mod certs;
mod review;

#[cfg(feature = "testing")]
pub(crate) use certs::generate as generate_serving_cert;
pub(crate) use certs::{CertError, ServingCert};

use crate::runtime::watch::discovery::Discovery;
use crate::runtime::watch::schemas::LiveSchemas;
use crate::script::ceilings::LimitCeilings;
use crate::script::{EffectiveLimits, ScriptEngine};
use crate::tenancy::Operation;
use axum::Json;
use axum::extract::State;
use kube::core::DynamicObject;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as AdmissionOperation,
};
use review::{Reviewer, Verdict};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// The path the webhook answers on.
pub const PATH: &str = "/validate";

/// Reviews that compile and test scripts at once; more wait, within their deadline.
pub(crate) const MAX_CONCURRENT_REVIEWS: usize = 2;

/// The default time a review may take: under the 10 s the shipped configuration gives the
/// API server to wait for the webhook, with room for the round trip.
pub(crate) const DEFAULT_REVIEW_DEADLINE: Duration = Duration::from_secs(8);

/// The most any `spec.tests` call may use at admission, whatever the hook's `limits` say: the
/// webhook runs code anyone who may create a controller wrote, before anyone checked it.
pub(crate) const TEST_CEILING: EffectiveLimits = EffectiveLimits {
    max_operations: 1_000_000,
    timeout_millis: 250,
    max_memory_bytes: 16 * 1024 * 1024,
    max_string_size: 1024 * 1024,
    max_array_size: 100_000,
    max_map_size: 100_000,
};

#[derive(Clone, Debug)]
pub(crate) struct AdmissionConfig {
    pub addr: SocketAddr,
    /// The Secret (namespace, name) holding the serving certificate, shared by every replica.
    pub secret: (String, String),
    /// The ValidatingWebhookConfiguration whose `caBundle` is set to the certificate's CA.
    pub configuration: String,
    /// The names the certificate is for (the webhook Service's DNS names, IP addresses).
    pub names: Vec<String>,
    /// The CA (PEM) the API server's client certificate must be signed by
    /// (`--webhook-client-ca`): with it, only the API server can call the webhook, and its
    /// `userInfo` can be trusted to read ConfigMaps for. Without it anyone who reaches the port
    /// may call, and is answered only what they could learn anyway.
    pub client_ca: Option<String>,
    /// The most a review may take.
    pub deadline: Duration,
    /// The most a hook's `limits` may ask for, as the operator loads them: a controller it
    /// would refuse is refused here first.
    pub limit_ceilings: LimitCeilings,
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(transparent)]
    Certificate(#[from] CertError),
    #[error("the webhook certificate is unusable: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the webhook certificate or key cannot be read: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("--webhook-client-ca holds no usable certificate: {0}")]
    ClientCa(String),
    #[error("--webhook-addr {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Gets the certificate, publishes its CA, binds the address and serves until the returned
/// task is aborted.
pub(crate) async fn start(
    client: kube::Client,
    config: AdmissionConfig,
    schemas: Arc<LiveSchemas>,
) -> Result<tokio::task::JoinHandle<()>, AdmissionError> {
    let (namespace, name) = &config.secret;
    let cert = certs::load_or_create(&client, namespace, name, &config.names).await?;
    if !certs::publish_ca_bundle(&client, &config.configuration, &cert.ca_pem).await? {
        tracing::warn!(configuration = %config.configuration, "no such ValidatingWebhookConfiguration: the API server will not call the webhook until it exists (restart to publish the CA)");
    }
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(server_config(
        &cert,
        config.client_ca.as_deref(),
    )?));
    let listener = std::net::TcpListener::bind(config.addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|source| AdmissionError::Bind {
            addr: config.addr,
            source,
        })?;
    let reviewer = Arc::new(Reviewer {
        discovery: Discovery::new(client.clone()),
        schemas,
        operator_user: crate::runtime::own_user(&client).await,
        client,
        // At most MAX_CONCURRENT_REVIEWS test calls at once, each under TEST_CEILING: 32 MiB
        // in all, kept apart from the pool production hooks draw on.
        engine: ScriptEngine::new()
            .with_ceiling(TEST_CEILING)
            .with_limit_ceilings(config.limit_ceilings)
            .apart_from_pool(),
        authenticated_callers: config.client_ca.is_some(),
        permits: Arc::new(Semaphore::new(MAX_CONCURRENT_REVIEWS)),
        deadline: config.deadline,
    });
    if config.client_ca.is_none() {
        tracing::warn!(
            "the validating webhook does not authenticate its callers (no --webhook-client-ca): it reads no ConfigMap for them, and a NetworkPolicy should keep the port to the API server"
        );
    }
    let app = axum::Router::new()
        .route(PATH, axum::routing::post(review))
        .with_state(reviewer);
    let server =
        axum_server::from_tcp_rustls(listener, tls).map_err(|source| AdmissionError::Bind {
            addr: config.addr,
            source,
        })?;
    tracing::info!(addr = %config.addr, path = PATH, "serving the validating webhook");
    Ok(tokio::spawn(async move {
        if let Err(error) = server.serve(app.into_make_service()).await {
            tracing::error!(%error, "the validating webhook stopped");
        }
    }))
}

/// The TLS identity, with the crypto provider named explicitly (the process installs none);
/// with `client_ca`, a caller must present a certificate it signed.
pub(crate) fn server_config(
    cert: &ServingCert,
    client_ca: Option<&str>,
) -> Result<rustls::ServerConfig, AdmissionError> {
    let chain =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots
                    .add(ca?)
                    .map_err(|error| AdmissionError::ClientCa(error.to_string()))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|error| AdmissionError::ClientCa(error.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    Ok(builder.with_single_cert(chain, key)?)
}

async fn review(
    State(reviewer): State<Arc<Reviewer>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(request) => request,
        Err(error) => {
            return Json(AdmissionResponse::invalid(error.to_string()).into_review());
        }
    };
    let response = AdmissionResponse::from(&request);
    let operation = match request.operation {
        AdmissionOperation::Create => Operation::Create,
        AdmissionOperation::Update => Operation::Update,
        AdmissionOperation::Delete => Operation::Delete,
        AdmissionOperation::Connect => return Json(response.into_review()),
    };
    let as_json = |object: &Option<DynamicObject>| {
        object
            .as_ref()
            .and_then(|object| serde_json::to_value(object).ok())
    };
    let verdict = reviewer
        .review(
            operation,
            &request.user_info,
            (&request.resource.group, &request.resource.resource),
            as_json(&request.object),
            as_json(&request.old_object),
        )
        .await;
    Json(respond(response, verdict).into_review())
}

/// Refuses the request when the review found errors (listing them all), and passes warnings
/// on (kubectl prints them).
fn respond(response: AdmissionResponse, verdict: Verdict) -> AdmissionResponse {
    let mut response = if verdict.errors.is_empty() {
        response
    } else {
        response.deny(verdict.errors.join("; "))
    };
    if !verdict.warnings.is_empty() {
        response.warnings = Some(verdict.warnings);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AdmissionResponse {
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "operation": "CREATE", "name": "c",
                "kind": {"group": "metascript.dev", "version": "v1alpha1", "kind": "DecoratorController"},
                "resource": {"group": "metascript.dev", "version": "v1alpha1", "resource": "decoratorcontrollers"},
                "userInfo": {}, "dryRun": false
            }
        }))
        .expect("a review");
        let request: AdmissionRequest<DynamicObject> = review.try_into().expect("a request");
        AdmissionResponse::from(&request)
    }

    #[test]
    fn errors_refuse_and_warnings_pass_through() {
        let warned = respond(
            allowed(),
            Verdict {
                errors: Vec::new(),
                warnings: vec!["spec: why".into()],
            },
        );
        assert!(warned.allowed);
        assert_eq!(warned.warnings, Some(vec!["spec: why".to_string()]));
        let refused = respond(
            allowed(),
            Verdict {
                errors: vec!["metascript: spec.hooks.sync: why".into(), "another".into()],
                warnings: Vec::new(),
            },
        );
        assert!(!refused.allowed);
        assert_eq!(
            refused.result.message,
            "metascript: spec.hooks.sync: why; another"
        );
    }
}
