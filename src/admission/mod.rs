//! The validating admission webhook `metascript run` serves: a DecoratorController or
//! MapController whose scripts do not compile or whose `spec.tests` fail is refused by the API
//! server with the hook, line and column, and so is a labelled ConfigMap of scripts that does
//! not compile. The checks are `crate::validate`'s, the same `metascript validate` runs.

mod certs;

#[cfg(feature = "testing")]
pub(crate) use certs::generate as generate_serving_cert;
pub use certs::{CertError, ServingCert};

use crate::hooks::ConfigMapLookup;
use crate::runtime::discovery::Discovery;
use crate::script::ScriptEngine;
use crate::validate::{self, Finding, Severity};
use axum::Json;
use axum::extract::State;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;

/// The path the webhook answers on.
pub const PATH: &str = "/validate";

#[derive(Clone, Debug)]
pub struct AdmissionConfig {
    pub addr: SocketAddr,
    /// The Secret (namespace, name) holding the serving certificate, shared by every replica.
    pub secret: (String, String),
    /// The ValidatingWebhookConfiguration whose `caBundle` is set to the certificate's CA.
    pub configuration: String,
    /// The names the certificate is for (the webhook Service's DNS names, IP addresses).
    pub names: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(transparent)]
    Certificate(#[from] CertError),
    #[error("the webhook certificate is unusable: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the webhook certificate or key cannot be read: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("--webhook-addr {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What a review needs: discovery (to resolve the types a controller names) and the engine.
struct Reviewer {
    client: kube::Client,
    discovery: Arc<Discovery>,
    engine: ScriptEngine,
}

/// Gets the certificate, publishes its CA, binds the address and serves until the returned
/// task is aborted.
pub async fn start(
    client: kube::Client,
    config: AdmissionConfig,
) -> Result<tokio::task::JoinHandle<()>, AdmissionError> {
    let (namespace, name) = &config.secret;
    let cert = certs::load_or_create(&client, namespace, name, &config.names).await?;
    if !certs::publish_ca_bundle(&client, &config.configuration, &cert.ca_pem).await? {
        tracing::warn!(configuration = %config.configuration, "no such ValidatingWebhookConfiguration: the API server will not call the webhook until it exists (restart to publish the CA)");
    }
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(server_config(&cert)?));
    let listener = std::net::TcpListener::bind(config.addr)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|source| AdmissionError::Bind {
            addr: config.addr,
            source,
        })?;
    let reviewer = Arc::new(Reviewer {
        discovery: Discovery::new(client.clone()),
        client,
        engine: ScriptEngine::new(),
    });
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

/// The TLS identity, with the crypto provider named explicitly (the process installs none).
pub(crate) fn server_config(cert: &ServingCert) -> Result<rustls::ServerConfig, AdmissionError> {
    let chain =
        CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?)
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
    let Some(object) = request
        .object
        .as_ref()
        .and_then(|o| serde_json::to_value(o).ok())
    else {
        return Json(response.into_review());
    };
    let findings = reviewer.check(object).await;
    Json(respond(response, &findings).into_review())
}

impl Reviewer {
    /// Resolves the types and fetches the ConfigMaps the object names, then validates it on
    /// the blocking pool (it compiles scripts and runs tests).
    async fn check(self: &Arc<Self>, object: Value) -> Vec<Finding> {
        let references = validate::references(&object);
        for reference in &references.types {
            // A type that does not resolve is reported by the validation itself.
            let _ = self.discovery.resolve(reference).await;
        }
        let mut config_maps: Vec<Value> = Vec::new();
        for (namespace, name) in &references.config_maps {
            let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
            if let Ok(Some(found)) = api.get_opt(name).await
                && let Ok(mut value) = serde_json::to_value(found)
            {
                value["apiVersion"] = "v1".into();
                value["kind"] = "ConfigMap".into();
                config_maps.push(value);
            }
        }
        let reviewer = self.clone();
        let checked = tokio::task::spawn_blocking(move || {
            let lookup: &dyn ConfigMapLookup = &config_maps;
            validate::validate(&reviewer.engine, &*reviewer.discovery, lookup, &object)
        })
        .await;
        checked.unwrap_or_else(|error| {
            vec![Finding {
                severity: Severity::Error,
                path: "(webhook)".into(),
                message: format!("validation failed: {error}"),
                script: None,
            }]
        })
    }
}

/// Refuses the object when any finding is an error (listing them all), and passes warnings on
/// (kubectl prints them).
fn respond(response: AdmissionResponse, findings: &[Finding]) -> AdmissionResponse {
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .map(ToString::to_string)
        .collect();
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    let mut response = if errors.is_empty() {
        response
    } else {
        response.deny(format!("metascript: {}", errors.join("; ")))
    };
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
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
        let finding = |severity, path: &str| Finding {
            severity,
            path: path.into(),
            message: "why".into(),
            script: None,
        };
        let warned = respond(allowed(), &[finding(Severity::Warning, "spec")]);
        assert!(warned.allowed);
        assert_eq!(warned.warnings, Some(vec!["spec: why".to_string()]));
        let refused = respond(
            allowed(),
            &[
                finding(Severity::Error, "spec.hooks.sync"),
                finding(Severity::Error, "spec.tests[0] (t)"),
            ],
        );
        assert!(!refused.allowed);
        assert_eq!(
            refused.result.message,
            "metascript: spec.hooks.sync: why; spec.tests[0] (t): why"
        );
    }
}
