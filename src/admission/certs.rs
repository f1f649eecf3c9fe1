//! The webhook's serving certificate. The API server must trust it, and every replica must
//! serve the same one, so it lives in a Secret: the first replica to start generates a CA and
//! a certificate signed by it (rcgen) and creates the Secret; the others read it. The CA is
//! published as the `caBundle` of the ValidatingWebhookConfiguration.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::collections::BTreeMap;

const CA_KEY: &str = "ca.crt";
const CERT_KEY: &str = "tls.crt";
const PRIVATE_KEY: &str = "tls.key";

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{name} lacks {key}; delete it to have a new one generated")]
    Incomplete {
        namespace: String,
        name: String,
        key: &'static str,
    },
    #[error("ValidatingWebhookConfiguration {name}: {source}")]
    Configuration {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// PEM text of the CA, the serving certificate and its key.
#[derive(Clone, Debug)]
pub(crate) struct ServingCert {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new CA and a serving certificate it signed for `names` (DNS names or IP addresses).
pub(crate) fn generate(names: &[String]) -> Result<ServingCert, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "metascript webhook CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_after = rcgen::date_time_ymd(2126, 1, 1);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names.to_vec())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "metascript webhook");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_after = rcgen::date_time_ymd(2126, 1, 1);
    let cert = params.signed_by(&key, &ca)?;
    Ok(ServingCert {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The certificate in the Secret, creating the Secret first when it does not exist. Two
/// replicas starting at once both try; the second's create fails and it reads the first's.
pub(super) async fn load_or_create(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    names: &[String],
) -> Result<ServingCert, CertError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |source| CertError::Secret {
        namespace: namespace.into(),
        name: name.into(),
        source,
    };
    if let Some(secret) = secrets.get_opt(name).await.map_err(failed)? {
        return read(&secret, namespace, name);
    }
    let cert = generate(names)?;
    let data = [
        (CA_KEY, &cert.ca_pem),
        (CERT_KEY, &cert.cert_pem),
        (PRIVATE_KEY, &cert.key_pem),
    ]
    .into_iter()
    .map(|(key, pem)| (key.to_string(), ByteString(pem.as_bytes().to_vec())))
    .collect::<BTreeMap<_, _>>();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app.kubernetes.io/name".into(), "metascript".into())].into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    };
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => {
            tracing::info!(namespace, name, "generated the webhook certificate");
            Ok(cert)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let secret = secrets.get(name).await.map_err(failed)?;
            read(&secret, namespace, name)
        }
        Err(error) => Err(failed(error)),
    }
}

fn read(secret: &Secret, namespace: &str, name: &str) -> Result<ServingCert, CertError> {
    let field = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|data| data.get(key))
            .and_then(|bytes| String::from_utf8(bytes.0.clone()).ok())
            .ok_or_else(|| CertError::Incomplete {
                namespace: namespace.into(),
                name: name.into(),
                key,
            })
    };
    Ok(ServingCert {
        ca_pem: field(CA_KEY)?,
        cert_pem: field(CERT_KEY)?,
        key_pem: field(PRIVATE_KEY)?,
    })
}

/// Sets the CA as the `caBundle` of every webhook of the configuration, unless it already is.
/// `false` when the configuration does not exist (nothing to trust the server yet).
pub(super) async fn publish_ca_bundle(
    client: &kube::Client,
    configuration: &str,
    ca_pem: &str,
) -> Result<bool, CertError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let failed = |source| CertError::Configuration {
        name: configuration.into(),
        source,
    };
    let Some(mut current) = api.get_opt(configuration).await.map_err(failed)? else {
        return Ok(false);
    };
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let mut changed = false;
    for webhook in current.webhooks.iter_mut().flatten() {
        if webhook.client_config.ca_bundle.as_ref() != Some(&bundle) {
            webhook.client_config.ca_bundle = Some(bundle.clone());
            changed = true;
        }
    }
    if changed {
        // A replace carries the resourceVersion read: a concurrent edit fails instead of being
        // overwritten (the next start publishes again).
        api.replace(configuration, &PostParams::default(), &current)
            .await
            .map_err(failed)?;
        tracing::info!(configuration, "published the webhook CA");
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_certificate_is_signed_by_its_ca_for_the_names_given() {
        let cert = generate(&[
            "metascript-webhook.metascript-system.svc".into(),
            "127.0.0.1".into(),
        ])
        .expect("generating");
        assert!(cert.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(cert.key_pem.contains("PRIVATE KEY"));
        assert_ne!(cert.ca_pem, cert.cert_pem);
        // rustls accepts the pair as a server identity.
        super::super::server_config(&cert, None).expect("a usable server identity");
    }
}
