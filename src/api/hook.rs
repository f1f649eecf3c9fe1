//! How a controller names the code behind each hook: an embedded script (inline or in a ConfigMap)
//! or, as in Metacontroller, a webhook.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// One hook of a controller. Exactly one of `script` or `webhook` is set.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.script) != has(self.webhook)",
    "message": "a hook needs exactly one of script or webhook"
}]))]
pub struct Hook {
    /// The shape of the request, as Metacontroller versions it: `v1` (the default) keys an
    /// object by its name, or `namespace/name` when the parent cannot imply its namespace; `v2`
    /// keys every namespaced object `namespace/name`, and lets a namespaced parent's related
    /// objects come from any namespace (`docs/hook-contract.md#hook-versions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "version_schema")]
    pub version: Option<HookVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ScriptSpec>,
    /// An HTTP(S) endpoint that answers the hook, as in Metacontroller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<Webhook>,
}

impl Hook {
    #[cfg(test)]
    /// A hook running `code` inline, with the default version and limits.
    pub(crate) fn inline(language: Language, code: &str) -> Hook {
        Hook {
            script: Some(ScriptSpec {
                language: Some(language),
                inline: Some(code.into()),
                ..ScriptSpec::default()
            }),
            webhook: None,
            version: None,
        }
    }
}

/// A script: its source inline or in a ConfigMap key, its language, and its budgets.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.inline) != has(self.configMapRef)",
        "message": "a script needs exactly one of inline or configMapRef"
    },
    {
        "rule": "!has(self.inline) || has(self.language)",
        "message": "an inline script needs a language (rhai or lua)"
    }
]))]
pub struct ScriptSpec {
    /// `rhai` or `lua`. Optional for `configMapRef`, where the key's `.rhai`/`.lua` suffix decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "language_schema")]
    pub language: Option<Language>,
    /// The script's source, in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The script's source, in a ConfigMap key (editing it reloads the hook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

/// Code shared by a controller's scripts (`spec.libraries`), loaded before each hook of its
/// language: a Rhai library's functions are callable by name; a Lua library is a chunk whose
/// returned value (a table of functions) is bound to the global `name`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.inline) != has(self.configMapRef)",
        "message": "a library needs exactly one of inline or configMapRef"
    },
    {
        "rule": "!has(self.inline) || has(self.language)",
        "message": "an inline library needs a language (rhai or lua)"
    }
]))]
pub struct Library {
    /// What errors call the library; in Lua, the global its returned table is bound to.
    #[schemars(
        regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"),
        length(min = 1, max = 63)
    )]
    pub name: String,
    /// `rhai` or `lua`. Optional for `configMapRef`, where the key's `.rhai`/`.lua` suffix decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "language_schema")]
    pub language: Option<Language>,
    /// The library's source, in the manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The library's source, in a ConfigMap key (editing it reloads every controller using it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyRef>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyRef {
    /// The ConfigMap's namespace.
    pub namespace: String,
    /// The ConfigMap's name.
    pub name: String,
    /// The key holding the script; a `.rhai` or `.lua` suffix tells the language.
    pub key: String,
}

/// `rhai` or `lua`, without the `null` schemars would list for an `Option` (kubectl's
/// client-side validation refuses an enum containing null).
fn language_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["rhai", "lua"]})
}

/// `v1` or `v2`, without the `null` schemars would list for an `Option`.
fn version_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "enum": ["v1", "v2"]})
}

/// Which shape of request a hook gets (Metacontroller's hook versions).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum HookVersion {
    /// Objects keyed by name, or `namespace/name` when the parent cannot imply the namespace.
    #[default]
    V1,
    /// Namespaced objects always keyed `namespace/name`.
    V2,
}

/// The language a script is written in.
#[derive(
    Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Rhai,
    Lua,
}

impl Language {
    /// The language a file or ConfigMap key name implies by its suffix.
    pub(crate) fn from_file_name(name: &str) -> Option<Language> {
        if name.ends_with(".rhai") {
            Some(Language::Rhai)
        } else if name.ends_with(".lua") || name.ends_with(".luau") {
            Some(Language::Lua)
        } else {
            None
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Language::Rhai => "rhai",
            Language::Lua => "lua",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Per-call budgets. Every field is optional; unset fields take the defaults documented in
/// `docs/scripting.md`.
// The schema declares the fields int64: the API server warns about the uint64 format.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Budget of Rhai operations, or of Lua interrupt ticks (function calls and loop iterations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_operations: Option<u64>,
    /// Wall-clock budget of one call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub timeout_millis: Option<u64>,
    /// Heap budget of one call in bytes (Lua).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_memory_bytes: Option<u64>,
    /// Largest string a script may build, in bytes (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_string_size: Option<u64>,
    /// Largest array a script may build (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_array_size: Option<u64>,
    /// Largest map a script may build (Rhai).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), with = "Option<i64>")]
    pub max_map_size: Option<u64>,
}

/// A hook served over HTTP(S), in Metacontroller's form: the request is POSTed as JSON and the
/// response body is the hook's response (`docs/hook-contract.md#webhook-hooks`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.url) != has(self.service)",
        "message": "a webhook needs exactly one of url or service"
    },
    {
        "rule": "!has(self.path) || has(self.service)",
        "message": "path goes with service; with url, put the path in the url"
    },
    {
        "rule": "!(has(self.authorization) && has(self.basicAuth))",
        "message": "authorization and basicAuth are exclusive"
    }
]))]
pub struct Webhook {
    /// The full URL, `http://` or `https://` (e.g. `http://hooks.example.svc/sync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// How long to wait for the response, as a Go duration (`10s`, `500ms`); default 10s, at
    /// most 30s. A hook that takes longer fails like a script that exceeds its time budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Appended to the `service` address (e.g. `/sync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A Service to call instead of a URL: `<protocol>://<name>.<namespace>:<port><path>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    /// The CA certificates (PEM) that sign the server's certificate, for `https` endpoints with a
    /// private CA; without it the system's trust roots are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// `loose` (the default) ignores response fields the hook does not define; `strict` refuses
    /// them, and duplicated keys anywhere in the response.
    #[serde(
        default,
        rename = "responseUnMarshallMode",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_unmarshall_mode: Option<ResponseMode>,
    /// Ask the webhook with `If-None-Match` whether its last answer about the same object still
    /// holds: a `304 Not Modified` (or `412`) reuses it, saving the hook its work (Metacontroller's
    /// `etag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<Etag>,
    /// An `Authorization` header from a Secret (exclusive with `basicAuth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// HTTP Basic authentication from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// A client certificate from a Secret (mutual TLS).
    #[serde(default, rename = "clientTLS", skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
}

impl Webhook {
    /// The hook's own credentials (empty: its host's `endpointConfigs` entry applies).
    pub(crate) fn credentials(&self) -> Credentials<'_> {
        Credentials {
            ca_bundle: self.ca_bundle.as_ref(),
            authorization: self.authorization.as_ref(),
            basic_auth: self.basic_auth.as_ref(),
            client_tls: self.client_tls.as_ref(),
        }
    }
}

/// ETag use of a webhook (RFC 7232): the hook answers with an `ETag` header, and is asked with
/// `If-None-Match` the next time the same object is synced.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Etag {
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long an answer is remembered, in seconds (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cache_timeout_seconds: Option<i32>,
    /// How often forgotten answers are dropped, in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cache_cleanup_seconds: Option<i32>,
}

/// A Service a webhook is reached through (cluster DNS: `<name>.<namespace>`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ServiceReference {
    /// The Service's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// The Service's namespace.
    #[schemars(length(min = 1))]
    pub namespace: String,
    /// Default 80.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    /// `http` (the default) or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// Trusted CA certificates for a webhook: in the manifest, or in a Secret or ConfigMap key.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    // Arithmetic, not a list filter: cheap enough for the API server's cost budget in a list.
    "rule": "(has(self.inline) ? 1 : 0) + (has(self.secretRef) ? 1 : 0) + (has(self.configMapRef) ? 1 : 0) == 1",
    "message": "a caBundle needs exactly one of inline, secretRef or configMapRef"
}]))]
pub struct CaBundle {
    /// One or more PEM certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub inline: Option<String>,
    /// A key of a Secret holding them (default key `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyRef>,
    /// A key of a ConfigMap holding them (default key `ca.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyRef>,
}

/// A key of a Secret or ConfigMap, whose default depends on what it holds.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct KeyRef {
    /// The object's name.
    pub name: String,
    /// The object's namespace.
    pub namespace: String,
    /// The key in its `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A Secret, by namespace and name.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
    /// The Secret's namespace.
    pub namespace: String,
}

/// A key of a Secret.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    pub name: String,
    /// The Secret's namespace.
    pub namespace: String,
    /// The key in its `data`.
    pub key: String,
}

/// An `Authorization: <type> <credential>` header on every call.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct Authorization {
    /// The scheme, e.g. `Bearer` (the default) or `Token`; not `Basic` (use `basicAuth`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// The Secret key holding the credential.
    pub secret_ref: SecretKeyRef,
}

/// HTTP Basic authentication, the username and password from one Secret.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct BasicAuth {
    /// The Secret holding both.
    pub secret_ref: SecretRef,
    /// The key of the username (default `username`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    /// The key of the password (default `password`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

/// A client certificate presented to the webhook (mutual TLS).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ClientTls {
    /// The Secret holding the certificate and its key.
    pub secret_ref: SecretRef,
    /// The key of the PEM certificate (default `tls.crt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    /// The key of the PEM private key (default `tls.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key_key: Option<String>,
}

/// How to reach and authenticate to every webhook of a controller on one host, unless a hook
/// says otherwise (Metacontroller's `endpointConfigs`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.authorization) && has(self.basicAuth))",
    "message": "authorization and basicAuth are exclusive"
}]))]
pub struct EndpointConfig {
    /// The host, optionally with its port (`hooks.team-a`, `hooks.team-a:8443`), as the
    /// webhook's URL (or `service` as `name.namespace`) names it; case does not matter, and the
    /// scheme's default port is the same as none.
    #[schemars(length(min = 1))]
    pub host: String,
    /// The CAs its certificate is checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<CaBundle>,
    /// An `Authorization` header from a Secret (exclusive with `basicAuth`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization: Option<Authorization>,
    /// HTTP Basic authentication from a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic_auth: Option<BasicAuth>,
    /// A client certificate from a Secret (mutual TLS).
    #[serde(default, rename = "clientTLS", skip_serializing_if = "Option::is_none")]
    pub client_tls: Option<ClientTls>,
}

impl EndpointConfig {
    /// This entry's credentials, in the form a hook's own are.
    pub(crate) fn credentials(&self) -> Credentials<'_> {
        Credentials {
            ca_bundle: self.ca_bundle.as_ref(),
            authorization: self.authorization.as_ref(),
            basic_auth: self.basic_auth.as_ref(),
            client_tls: self.client_tls.as_ref(),
        }
    }
}

/// What a webhook call trusts and presents: its CA bundle, one way to authenticate, and a
/// client certificate; a hook's own, or its host's `endpointConfigs` entry.
#[derive(Clone, Copy, Debug, Default)]
pub struct Credentials<'a> {
    pub ca_bundle: Option<&'a CaBundle>,
    pub authorization: Option<&'a Authorization>,
    pub basic_auth: Option<&'a BasicAuth>,
    pub client_tls: Option<&'a ClientTls>,
}

impl Credentials<'_> {
    pub(crate) fn is_empty(&self) -> bool {
        self.ca_bundle.is_none()
            && self.authorization.is_none()
            && self.basic_auth.is_none()
            && self.client_tls.is_none()
    }

    /// The objects they are read from, each once.
    pub(crate) fn sources(&self) -> Vec<CredentialSource> {
        let secret = |r: &SecretRef| CredentialSource::Secret {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        };
        let bundle = self.ca_bundle.and_then(|bundle| {
            let reference = |r: &KeyRef| (r.namespace.clone(), r.name.clone());
            match (&bundle.secret_ref, &bundle.config_map_ref) {
                (Some(r), _) => {
                    let (namespace, name) = reference(r);
                    Some(CredentialSource::Secret { namespace, name })
                }
                (None, Some(r)) => {
                    let (namespace, name) = reference(r);
                    Some(CredentialSource::ConfigMap { namespace, name })
                }
                (None, None) => None,
            }
        });
        let authorization = self.authorization.map(|a| CredentialSource::Secret {
            namespace: a.secret_ref.namespace.clone(),
            name: a.secret_ref.name.clone(),
        });
        let basic = self.basic_auth.map(|b| secret(&b.secret_ref));
        let tls = self.client_tls.map(|c| secret(&c.secret_ref));
        let mut sources: Vec<CredentialSource> = [bundle, authorization, basic, tls]
            .into_iter()
            .flatten()
            .collect();
        sources.sort();
        sources.dedup();
        sources
    }
}

/// An object webhook credentials are read from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CredentialSource {
    Secret {
        namespace: String,
        name: String,
    },
    /// Only a `caBundle.configMapRef`.
    ConfigMap {
        namespace: String,
        name: String,
    },
}

/// How strictly a webhook's response is read.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum ResponseMode {
    #[default]
    Loose,
    Strict,
}
