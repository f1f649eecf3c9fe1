//! A webhook's credentials, read from the Secrets (and ConfigMaps) they name: the CA bundle it
//! trusts, the `Authorization` header it sends, the client certificate it presents. What is read
//! here is never printed: errors name the object and key, never a value.

use super::source::ConfigMapLookup;
use crate::api::{Authorization, BasicAuth, CaBundle, ClientTls, Credentials, KeyRef};
use base64::Engine as _;
use ureq::tls::{Certificate, ClientCert, PrivateKey};

/// Credentials with their values read.
#[derive(Default)]
pub(super) struct Resolved {
    /// The trusted CAs' PEM, and the field it came from (to name in an error about it).
    pub ca_pem: Option<(&'static str, String)>,
    /// The whole header value: `Bearer <token>`, `Basic <base64>`.
    pub authorization: Option<String>,
    pub client_cert: Option<ClientCert>,
}

/// Why credentials cannot be used, with the field (under `webhook.` or the `endpointConfigs`
/// entry) it is about.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum CredentialRefusal {
    /// The spec is wrong, or a value read is not what the field needs.
    Invalid { field: &'static str, reason: String },
    /// A value cannot be read: its Secret, ConfigMap or key is missing, or is not the
    /// controller's to read. Offline checks (`validate`, `convert`, admission) have no Secrets,
    /// so they tell this apart.
    Unavailable { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> CredentialRefusal {
    CredentialRefusal::Invalid {
        field,
        reason: reason.into(),
    }
}

fn unavailable(field: &'static str, reason: String) -> CredentialRefusal {
    CredentialRefusal::Unavailable { field, reason }
}

/// Checks what can be checked without reading a value, so a check without Secrets still
/// finds every mistake in the spec.
pub(super) fn check(credentials: &Credentials) -> Result<(), CredentialRefusal> {
    if credentials.authorization.is_some() && credentials.basic_auth.is_some() {
        return Err(invalid(
            "authorization",
            "authorization and basicAuth are exclusive: give one",
        ));
    }
    if let Some(authorization) = credentials.authorization {
        scheme(authorization)?;
    }
    if let Some(bundle) = credentials.ca_bundle {
        let given = [
            bundle.inline.is_some(),
            bundle.secret_ref.is_some(),
            bundle.config_map_ref.is_some(),
        ];
        if given.iter().filter(|given| **given).count() != 1 {
            return Err(invalid(
                "caBundle",
                "needs exactly one of inline, secretRef or configMapRef",
            ));
        }
    }
    Ok(())
}

/// Reads the values of a set of credentials (after [`check`]ing them).
pub(super) fn resolve(
    credentials: &Credentials,
    lookup: &dyn ConfigMapLookup,
) -> Result<Resolved, CredentialRefusal> {
    check(credentials)?;
    let authorization = match (credentials.authorization, credentials.basic_auth) {
        (Some(authorization), _) => Some(bearer(authorization, lookup)?),
        (None, Some(basic)) => Some(basic_auth(basic, lookup)?),
        (None, None) => None,
    };
    Ok(Resolved {
        ca_pem: credentials
            .ca_bundle
            .map(|bundle| ca_bundle(bundle, lookup))
            .transpose()?,
        authorization,
        client_cert: credentials
            .client_tls
            .map(|tls| client_cert(tls, lookup))
            .transpose()?,
    })
}

/// A Secret key's value, with what went wrong named by object and key.
fn secret(
    lookup: &dyn ConfigMapLookup,
    field: &'static str,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, CredentialRefusal> {
    match lookup.secret_value(namespace, name, key) {
        Some(Some(value)) => Ok(value),
        Some(None) => Err(unavailable(
            field,
            format!("Secret {namespace}/{name} has no key {key:?}"),
        )),
        None => Err(unavailable(
            field,
            format!(
                "Secret {namespace}/{name} cannot be read: it does not exist, or the \
                 controller's ServiceAccount may not get it"
            ),
        )),
    }
}

fn text(field: &'static str, what: &str, value: Vec<u8>) -> Result<String, CredentialRefusal> {
    String::from_utf8(value).map_err(|_| invalid(field, format!("{what} is not UTF-8 text")))
}

/// The header's scheme: `Bearer` unless given; never `Basic`, which has a field of its own.
fn scheme(authorization: &Authorization) -> Result<&str, CredentialRefusal> {
    let scheme = authorization.type_.as_deref().unwrap_or("Bearer");
    if scheme.eq_ignore_ascii_case("basic") {
        return Err(invalid(
            "authorization.type",
            "Basic authentication goes in basicAuth",
        ));
    }
    // A token68-style name: anything else would break the header.
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(invalid(
            "authorization.type",
            format!("{scheme:?} is not a scheme"),
        ));
    }
    Ok(scheme)
}

fn bearer(
    authorization: &Authorization,
    lookup: &dyn ConfigMapLookup,
) -> Result<String, CredentialRefusal> {
    let scheme = scheme(authorization)?;
    let reference = &authorization.secret_ref;
    let field = "authorization.secretRef";
    let value = secret(
        lookup,
        field,
        &reference.namespace,
        &reference.name,
        &reference.key,
    )?;
    let credential = text(field, "the credential", value)?;
    Ok(format!("{scheme} {}", credential.trim()))
}

fn basic_auth(
    basic: &BasicAuth,
    lookup: &dyn ConfigMapLookup,
) -> Result<String, CredentialRefusal> {
    let reference = &basic.secret_ref;
    let field = "basicAuth.secretRef";
    let read = |key: &str| {
        secret(lookup, field, &reference.namespace, &reference.name, key)
            .and_then(|value| text(field, key, value))
    };
    let username = read(basic.username_key.as_deref().unwrap_or("username"))?;
    let password = read(basic.password_key.as_deref().unwrap_or("password"))?;
    // As Metacontroller: surrounding whitespace (a trailing newline from `echo`) is no part of
    // either, and a colon would make the username ambiguous.
    let (username, password) = (username.trim(), password.trim());
    if username.contains(':') {
        return Err(invalid(field, "the username must not contain ':'"));
    }
    let encoded =
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    Ok(format!("Basic {encoded}"))
}

fn ca_bundle(
    bundle: &CaBundle,
    lookup: &dyn ConfigMapLookup,
) -> Result<(&'static str, String), CredentialRefusal> {
    let key = |reference: &KeyRef| reference.key.clone().unwrap_or_else(|| "ca.crt".into());
    match (&bundle.inline, &bundle.secret_ref, &bundle.config_map_ref) {
        (Some(pem), None, None) => Ok(("caBundle.inline", pem.clone())),
        (None, Some(reference), None) => {
            let field = "caBundle.secretRef";
            let value = secret(
                lookup,
                field,
                &reference.namespace,
                &reference.name,
                &key(reference),
            )?;
            Ok((field, text(field, "the CA bundle", value)?))
        }
        (None, None, Some(reference)) => {
            let (namespace, name, key) = (&reference.namespace, &reference.name, key(reference));
            let field = "caBundle.configMapRef";
            match lookup.credential_config_map_value(namespace, name, &key) {
                Some(Some(pem)) => Ok((field, pem)),
                Some(None) => Err(unavailable(
                    field,
                    format!("ConfigMap {namespace}/{name} has no key {key:?}"),
                )),
                None => Err(unavailable(
                    field,
                    format!("ConfigMap {namespace}/{name} does not exist"),
                )),
            }
        }
        _ => Err(invalid(
            "caBundle",
            "needs exactly one of inline, secretRef or configMapRef",
        )),
    }
}

fn client_cert(
    tls: &ClientTls,
    lookup: &dyn ConfigMapLookup,
) -> Result<ClientCert, CredentialRefusal> {
    let reference = &tls.secret_ref;
    let field = "clientTLS.secretRef";
    let read = |key: &str| secret(lookup, field, &reference.namespace, &reference.name, key);
    let cert_key = tls.cert_key.as_deref().unwrap_or("tls.crt");
    let key_key = tls.private_key_key.as_deref().unwrap_or("tls.key");
    let certificates = read(cert_key)?;
    let chain: Vec<Certificate<'static>> = ureq::tls::parse_pem(&certificates)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => Some(certificate),
            _ => None,
        })
        .collect();
    if chain.is_empty() {
        return Err(invalid(
            field,
            format!("key {cert_key:?} holds no PEM certificate"),
        ));
    }
    let key_pem = read(key_key)?;
    let key = PrivateKey::from_pem(&key_pem)
        .map_err(|_| invalid(field, format!("key {key_key:?} holds no PEM private key")))?;
    usable_client_cert(&chain, &key_pem).map_err(|reason| {
        invalid(
            field,
            format!("the certificate in key {cert_key:?} and the key in {key_key:?}: {reason}"),
        )
    })?;
    Ok(ClientCert::new_with_certs(&chain, key))
}

/// Refuses a certificate and key that rustls will not present: ureq would panic on them at the
/// first call (an X.509 v1 certificate, as `openssl x509 -req` signs without `-extfile`, or a
/// key that is not the certificate's).
fn usable_client_cert(chain: &[Certificate<'static>], key_pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|error| error.to_string())?;
    let chain = chain
        .iter()
        .map(|certificate| CertificateDer::from(certificate.der().to_vec()))
        .collect();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map(drop)
        .map_err(|error| {
            let text = error.to_string();
            if text.contains("UnsupportedCertVersion") {
                format!(
                    "{text}: an X.509 v1 certificate cannot be used; sign it as v3 (e.g. with \
                     `openssl x509 -req -extfile` giving `extendedKeyUsage = clientAuth`)"
                )
            } else {
                text
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::hook::{SecretKeyRef, SecretRef};
    use serde_json::json;

    fn secrets() -> Vec<serde_json::Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "token", "namespace": "hooks"},
                   "data": {"token": base64::engine::general_purpose::STANDARD.encode("s3cret\n")}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "basic", "namespace": "hooks"},
                   "stringData": {"username": "me", "password": "pw"}}),
        ]
    }

    #[test]
    fn authorization_and_basic_auth_become_the_header() {
        let authorization = Authorization {
            type_: None,
            secret_ref: SecretKeyRef {
                name: "token".into(),
                namespace: "hooks".into(),
                key: "token".into(),
            },
        };
        let resolved = resolve(
            &Credentials {
                authorization: Some(&authorization),
                ..Credentials::default()
            },
            &secrets(),
        )
        .map_err(|refusal| format!("{refusal:?}"))
        .unwrap();
        assert_eq!(resolved.authorization.as_deref(), Some("Bearer s3cret"));
        let basic = BasicAuth {
            secret_ref: SecretRef {
                name: "basic".into(),
                namespace: "hooks".into(),
            },
            ..BasicAuth::default()
        };
        let resolved = resolve(
            &Credentials {
                basic_auth: Some(&basic),
                ..Credentials::default()
            },
            &secrets(),
        )
        .map_err(|refusal| format!("{refusal:?}"))
        .unwrap();
        assert_eq!(resolved.authorization.as_deref(), Some("Basic bWU6cHc="));
    }

    #[test]
    fn what_cannot_be_read_is_named_without_its_value() {
        let missing = Authorization {
            type_: Some("Token".into()),
            secret_ref: SecretKeyRef {
                name: "token".into(),
                namespace: "hooks".into(),
                key: "nope".into(),
            },
        };
        let credentials = Credentials {
            authorization: Some(&missing),
            ..Credentials::default()
        };
        let Err(CredentialRefusal::Unavailable { field, reason }) =
            resolve(&credentials, &secrets())
        else {
            panic!("a missing key is refused");
        };
        assert_eq!(field, "authorization.secretRef");
        assert_eq!(reason, "Secret hooks/token has no key \"nope\"");
        let elsewhere = Authorization {
            secret_ref: SecretKeyRef {
                namespace: "kube-system".into(),
                ..missing.secret_ref.clone()
            },
            ..missing.clone()
        };
        let Err(CredentialRefusal::Unavailable { reason, .. }) = resolve(
            &Credentials {
                authorization: Some(&elsewhere),
                ..Credentials::default()
            },
            &secrets(),
        ) else {
            panic!("an unreadable Secret is refused");
        };
        assert!(reason.contains("may not get it"), "{reason}");
        let basic = Authorization {
            type_: Some("Basic".into()),
            ..missing.clone()
        };
        // Refused before anything is read.
        assert!(matches!(
            check(&Credentials {
                authorization: Some(&basic),
                ..Credentials::default()
            }),
            Err(CredentialRefusal::Invalid {
                field: "authorization.type",
                ..
            })
        ));
    }
}
