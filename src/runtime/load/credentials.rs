//! Webhook credentials in the running operator. The Secrets (and CA ConfigMaps) a controller's
//! webhooks name are read with the controller's own client (its impersonated writer when it
//! names a ServiceAccount), so a controller can use only what its account may read. Secrets are
//! not watched (that would take reading every Secret of the cluster with the operator's own
//! access): they are read again every `--credentials-poll-interval`, and a change reloads the
//! controller. Nothing here prints a value: errors name the object, digests hide the content.

use crate::api::CredentialSource;
use crate::hooks::ConfigMapLookup;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use sha2::Digest;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One object's keys as read; `None`: missing, or not the controller's to read (the load error
/// says both).
type Keys = Option<BTreeMap<String, Vec<u8>>>;

/// The objects a controller's webhook credentials name, as its account read them.
#[derive(Default)]
pub(crate) struct CredentialValues {
    objects: BTreeMap<CredentialSource, Keys>,
}

/// Reading a credential object failed for another reason than its absence or RBAC (the API
/// server did not answer): the load is retried.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {kind} {namespace}/{name} for webhook credentials: {source}")]
pub(crate) struct CredentialReadError {
    kind: &'static str,
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

impl CredentialValues {
    /// Reads every source with `client` (no request at all when there are none).
    pub(crate) async fn read(
        client: &kube::Client,
        sources: &[CredentialSource],
    ) -> Result<CredentialValues, CredentialReadError> {
        let mut objects = BTreeMap::new();
        for source in sources {
            objects.insert(source.clone(), read_one(client, source).await?);
        }
        Ok(CredentialValues { objects })
    }

    /// Identifies what was read (values, absences), to tell a rotation; a hash, so the values
    /// never leave this struct.
    pub(crate) fn digest(&self) -> String {
        let mut hasher = sha2::Sha256::new();
        for (source, keys) in &self.objects {
            hasher.update(format!("{source:?}").as_bytes());
            match keys {
                None => hasher.update([0]),
                Some(keys) => {
                    hasher.update([1]);
                    for (key, value) in keys {
                        // Lengths first, so no two different contents hash alike.
                        hasher.update((key.len() as u64).to_le_bytes());
                        hasher.update(key.as_bytes());
                        hasher.update((value.len() as u64).to_le_bytes());
                        hasher.update(value);
                    }
                }
            }
        }
        hex::encode(hasher.finalize())
    }

    fn value(&self, source: CredentialSource, key: &str) -> Option<Option<&[u8]>> {
        let keys = self.objects.get(&source)?.as_ref()?;
        Some(keys.get(key).map(Vec::as_slice))
    }
}

async fn read_one(
    client: &kube::Client,
    source: &CredentialSource,
) -> Result<Keys, CredentialReadError> {
    let failed = |kind, namespace: &str, name: &str, source| CredentialReadError {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    };
    match source {
        CredentialSource::Secret { namespace, name } => {
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            match absent_if_denied(api.get_opt(name).await) {
                Ok(secret) => Ok(secret.map(|secret| {
                    secret
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(key, value)| (key, value.0))
                        .collect()
                })),
                Err(error) => Err(failed("Secret", namespace, name, error)),
            }
        }
        CredentialSource::ConfigMap { namespace, name } => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
            match absent_if_denied(api.get_opt(name).await) {
                Ok(config_map) => Ok(config_map.map(|config_map| {
                    config_map
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(key, value)| (key, value.into_bytes()))
                        .collect()
                })),
                Err(error) => Err(failed("ConfigMap", namespace, name, error)),
            }
        }
    }
}

/// An object the account may not read is, to it, an object that is not there.
fn absent_if_denied<T>(read: Result<Option<T>, kube::Error>) -> Result<Option<T>, kube::Error> {
    match read {
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(None),
        other => other,
    }
}

/// Credentials from what the controller's account read; scripts from `fallback`.
pub(crate) struct WithCredentials<'a> {
    pub credentials: &'a CredentialValues,
    pub fallback: &'a dyn ConfigMapLookup,
}

impl ConfigMapLookup for WithCredentials<'_> {
    fn value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<String>> {
        self.fallback.value(namespace, name, key)
    }

    fn local_file(&self, key: &str) -> Option<PathBuf> {
        self.fallback.local_file(key)
    }

    fn secret_value(&self, namespace: &str, name: &str, key: &str) -> Option<Option<Vec<u8>>> {
        let source = CredentialSource::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        Some(self.credentials.value(source, key)?.map(<[u8]>::to_vec))
    }

    fn credential_config_map_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Option<Option<String>> {
        let source = CredentialSource::ConfigMap {
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let value = self.credentials.value(source, key)?;
        // ConfigMap data is text: it was read as a String.
        Some(value.map(|bytes| String::from_utf8_lossy(bytes).into_owned()))
    }
}

/// What a controller's credentials were read from, and how they were, to read them again.
pub struct CredentialWatch {
    /// The controller's client at its load.
    reader: kube::Client,
    sources: Vec<CredentialSource>,
    digest: String,
}

impl CredentialWatch {
    /// `None` for a controller whose webhooks name no credential object: nothing to poll.
    pub(crate) fn new(
        reader: &kube::Client,
        sources: Vec<CredentialSource>,
        read: &CredentialValues,
    ) -> Option<CredentialWatch> {
        (!sources.is_empty()).then(|| CredentialWatch {
            reader: reader.clone(),
            sources,
            digest: read.digest(),
        })
    }

    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether both read the same objects (though maybe when they held other values).
    pub(crate) fn reads_the_same(&self, other: &CredentialWatch) -> bool {
        self.sources == other.sources
    }

    /// Whether the objects read differ now from what the controller loaded with.
    pub(crate) async fn changed(&self) -> Result<bool, CredentialReadError> {
        let now = CredentialValues::read(&self.reader, &self.sources).await?;
        Ok(now.digest() != self.digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::NoConfigMaps;

    fn values(token: &[u8]) -> CredentialValues {
        let secret = CredentialSource::Secret {
            namespace: "hooks".into(),
            name: "token".into(),
        };
        let gone = CredentialSource::ConfigMap {
            namespace: "hooks".into(),
            name: "ca".into(),
        };
        CredentialValues {
            objects: BTreeMap::from([
                (
                    secret,
                    Some(BTreeMap::from([("token".to_string(), token.to_vec())])),
                ),
                (gone, None),
            ]),
        }
    }

    #[test]
    fn the_digest_changes_with_a_value_and_hides_it() {
        let digest = values(b"one").digest();
        assert_eq!(digest, values(b"one").digest());
        assert_ne!(digest, values(b"two").digest());
        assert!(!digest.contains("one"));
        assert_ne!(digest, CredentialValues::default().digest());
    }

    #[test]
    fn credentials_come_only_from_what_the_account_read() {
        let read = values(b"s3cret");
        let lookup = WithCredentials {
            credentials: &read,
            fallback: &NoConfigMaps,
        };
        assert_eq!(
            lookup.secret_value("hooks", "token", "token"),
            Some(Some(b"s3cret".to_vec()))
        );
        assert_eq!(lookup.secret_value("hooks", "token", "other"), Some(None));
        // Not read (unreadable, or not named): unknown, whatever the operator could see.
        assert_eq!(lookup.secret_value("kube-system", "token", "token"), None);
        assert_eq!(
            lookup.credential_config_map_value("hooks", "ca", "ca.crt"),
            None
        );
    }
}
