//! Hooks served over HTTP(S), as in Metacontroller: a webhook's spec is resolved and checked once,
//! when its controller loads (URL, timeout, trusted CAs, response mode), and each call POSTs the
//! request as JSON and reads the response as the hook's answer, on the calling thread (a
//! blocking one in the operator) through a pooled client: the operator's own, which connects
//! only where `--webhook-allow` says (`egress`), or the one the faces an author runs share.

use super::InvalidResponse;
use super::SourceError;
use super::credentials;
use super::egress::{EgressPolicy, Refused};
use super::source::ConfigMapLookup;
use crate::api::{EndpointConfig, Etag, HookKind, HookVersion, ResponseMode, Webhook};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use sha2::Digest;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use std::time::Instant;
use ureq::http::Uri;
use ureq::tls::{Certificate, ClientCert, RootCerts, TlsConfig};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// How long a call waits for its response when `timeout` is not set (Metacontroller's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest response body read; a hook answering more is failing, not slow.
pub const MAX_RESPONSE_BYTES: u64 = 32 << 20;

/// How much of a failed call's body is kept for the operator's log and the author's tools.
const ERROR_BODY_CHARS: usize = 300;

/// Idle connections kept per host: enough for every worker of a default operator to reuse one.
const IDLE_PER_HOST: usize = 32;

/// The HTTP client webhook calls go through: its connection pool is shared by every call.
#[derive(Debug)]
pub struct WebhookClient {
    agent: ureq::Agent,
}

impl WebhookClient {
    /// Calls go wherever their URL points, through the environment's proxy if one is set: the
    /// client of the faces an author runs on their own machine (`test`, `render`, `diff`,
    /// `explain`, the LSP), shared by the process.
    pub fn unrestricted() -> &'static WebhookClient {
        static CLIENT: LazyLock<WebhookClient> = LazyLock::new(|| WebhookClient {
            agent: agent_config().build().into(),
        });
        &CLIENT
    }

    /// Calls connect only to the addresses `policy` allows (each host resolved, and its
    /// addresses filtered, at every call), and never through a proxy, whose address would be
    /// the one connected to: the operator's client.
    pub fn restricted(policy: EgressPolicy) -> WebhookClient {
        let config = agent_config().proxy(None).build();
        let resolver = AllowedResolver {
            policy: Arc::new(policy),
        };
        WebhookClient {
            agent: ureq::Agent::with_parts(config, DefaultConnector::new(), resolver),
        }
    }
}

/// What every webhook client shares.
fn agent_config() -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        // Statuses are judged here, so an error can say which it was.
        .http_status_as_error(false)
        // A redirect would turn a POST into a GET; a hook that moved must say so.
        .max_redirects(0)
        .max_idle_connections(4 * IDLE_PER_HOST)
        .max_idle_connections_per_host(IDLE_PER_HOST)
        .user_agent(format!("metascript/{}", crate::version::VERSION))
        .tls_config(tls_config(RootCerts::PlatformVerifier))
}

/// Resolves a host as ureq does, then keeps only the addresses the policy allows: ureq
/// connects to one of those, so a name cannot be checked at one address and connected to at
/// another (DNS rebinding). An address URL resolves to itself, checked the same way.
#[derive(Debug)]
struct AllowedResolver {
    policy: Arc<EgressPolicy>,
}

impl Resolver for AllowedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let host = uri.host().unwrap_or_default();
        let refuse = |addresses| {
            let refused = Refused {
                host: host.to_string(),
                addresses,
            };
            ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                refused,
            ))
        };
        // Not even a DNS question for a call nothing could allow.
        if self.policy.entries().is_empty() {
            return Err(refuse(Vec::new()));
        }
        let name = match host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            Ok(_) => None,
            Err(_) => Some(host),
        };
        let mut allowed = self.empty();
        let mut refused = Vec::new();
        for &address in &DefaultResolver::default().resolve(uri, config, timeout)? {
            match self.policy.check(name, address.ip()) {
                Ok(()) => allowed.push(address),
                Err(denial) => refused.push((address.ip(), denial)),
            }
        }
        if allowed.is_empty() {
            return Err(refuse(refused));
        }
        if !refused.is_empty() {
            tracing::debug!(
                host,
                ?refused,
                "some addresses of a webhook's host are not allowed; connecting to the others"
            );
        }
        Ok(allowed)
    }
}

/// TLS with the crypto provider named explicitly, as the rest of the operator does (the process
/// installs no default).
fn tls_config(roots: RootCerts) -> TlsConfig {
    tls_config_with(roots, None)
}

fn tls_config_with(roots: RootCerts, client_cert: Option<ClientCert>) -> TlsConfig {
    static PROVIDER: LazyLock<Arc<rustls::crypto::CryptoProvider>> =
        LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));
    TlsConfig::builder()
        .root_certs(roots)
        .client_cert(client_cert)
        .unversioned_rustls_crypto_provider(PROVIDER.clone())
        .build()
}

/// The `endpointConfigs` entry for a URL's host, and its index: hosts compare without case, and
/// the scheme's default port is the same as none.
fn endpoint_for<'a>(
    uri: &Uri,
    endpoints: &'a [EndpointConfig],
) -> Option<(usize, &'a EndpointConfig)> {
    endpoints
        .iter()
        .enumerate()
        .find(|(_, endpoint)| host_matches(uri, &endpoint.host))
}

/// Whether an `endpointConfigs` entry's `host` is the host (and port) of `uri`.
fn host_matches(uri: &Uri, wanted: &str) -> bool {
    let default_port = match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    };
    let Some(host) = uri.host().map(str::to_ascii_lowercase) else {
        return false;
    };
    let port = uri.port_u16().unwrap_or(default_port);
    let wanted = wanted.to_ascii_lowercase();
    let (wanted_host, wanted_port) = match wanted.rsplit_once(':') {
        Some((name, port)) => (name.to_string(), port.parse().unwrap_or(default_port)),
        None => (wanted.clone(), default_port),
    };
    wanted_host == host && wanted_port == port
}

/// Whether a `spec.endpointConfigs` entry for `host` applies to a hook calling `url` (as when
/// the operator loads it); false for a URL that does not parse.
pub(crate) fn endpoint_host_matches(url: &str, host: &str) -> bool {
    url.parse::<Uri>().is_ok_and(|uri| host_matches(&uri, host))
}

/// A webhook, resolved and checked.
pub struct WebhookEndpoint {
    url: String,
    timeout: Duration,
    /// Only for a `caBundle` or a client certificate; otherwise the client's platform roots
    /// apply. The same value (and so the same pool key) for every call of this endpoint.
    tls: Option<TlsConfig>,
    /// The `Authorization` header, from a Secret: never printed.
    authorization: Option<String>,
    mode: ResponseMode,
    digest: String,
    /// The answers remembered by object, with their ETags (`webhook.etag`).
    etags: Option<Etags>,
}

/// Everything but the credentials, which must never reach a log.
impl fmt::Debug for WebhookEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookEndpoint")
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

/// A webhook's last answer per object and its ETag, remembered for a while.
#[derive(Debug)]
struct Etags {
    timeout: Duration,
    cleanup: Duration,
    entries: parking_lot::Mutex<EtagEntries>,
}

#[derive(Debug)]
struct EtagEntries {
    by_object: HashMap<String, (String, Value, Instant)>,
    cleaned: Instant,
}

impl Etags {
    fn new(config: &Etag) -> Option<Etags> {
        let seconds = |value: Option<i32>, default: u64| {
            Duration::from_secs(value.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
        };
        config.enabled.unwrap_or(false).then(|| Etags {
            timeout: seconds(config.cache_timeout_seconds, 600),
            cleanup: seconds(config.cache_cleanup_seconds, 60),
            entries: parking_lot::Mutex::new(EtagEntries {
                by_object: HashMap::new(),
                cleaned: Instant::now(),
            }),
        })
    }

    /// The ETag of the remembered answer about an object, while it is fresh.
    fn tag(&self, object: &str) -> Option<String> {
        let entries = self.entries.lock();
        let (tag, _, at) = entries.by_object.get(object)?;
        (at.elapsed() < self.timeout).then(|| tag.clone())
    }

    fn answer(&self, object: &str) -> Option<Value> {
        self.entries
            .lock()
            .by_object
            .get(object)
            .map(|(_, answer, _)| answer.clone())
    }

    fn remember(&self, object: String, tag: String, answer: Value) {
        let mut entries = self.entries.lock();
        if entries.cleaned.elapsed() >= self.cleanup {
            let timeout = self.timeout;
            entries
                .by_object
                .retain(|_, (_, _, at)| at.elapsed() < timeout);
            entries.cleaned = Instant::now();
        }
        entries
            .by_object
            .insert(object, (tag, answer, Instant::now()));
    }
}

/// The object a request is about, as the ETag cache names it: its uid, else where it is.
fn subject_of(hook: HookKind, request: &Value) -> String {
    let subject = &request[hook.contract().subject];
    match crate::object::uid(subject) {
        Some(uid) => uid.to_string(),
        None => crate::object::ObjectKey::of(subject).to_string(),
    }
}

/// Why a call produced no usable response.
#[derive(Debug)]
pub enum CallFailure {
    /// The call itself failed: nothing came back that could be a response.
    Failed(WebhookFailure),
    /// A body came back, but it is not a response.
    Invalid(InvalidResponse),
}

/// Why a webhook call brought back nothing. The message says what kind of failure it was, never
/// what the webhook answered: it lands in Events and status the controller's author reads, and
/// the URL is the author's choice, so quoting the answer would let them read any service the
/// operator can reach. The start of the answer is kept beside it for the operator's log and the
/// faces an author runs (`excerpt`).
#[derive(Debug, thiserror::Error)]
pub enum WebhookFailure {
    #[error("no response within {timeout:?} (webhook.timeout)")]
    Timeout { timeout: Duration },
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("answered HTTP {status}")]
    Status {
        status: u16,
        /// The start of the body, on one line (empty for none).
        excerpt: String,
    },
    #[error("the response body is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    /// `--webhook-allow` allows none of the host's addresses: nothing was sent.
    #[error(transparent)]
    NotAllowed(Refused),
    #[error("{0}")]
    Transport(String),
}

impl WebhookEndpoint {
    /// Resolves a hook's webhook spec; every problem names the field and why. A `v2` hook reads
    /// its responses strictly unless told otherwise, as in Metacontroller.
    pub fn new(
        controller: &str,
        hook: HookKind,
        webhook: &Webhook,
        version: HookVersion,
        endpoints: &[EndpointConfig],
        lookup: &dyn ConfigMapLookup,
    ) -> Result<WebhookEndpoint, SourceError> {
        let invalid = |field: &str, reason: String| SourceError::Webhook {
            controller: controller.to_string(),
            hook,
            field: format!("webhook{field}"),
            reason,
        };
        let url = match (&webhook.url, &webhook.service) {
            (Some(url), None) => {
                if webhook.path.is_some() {
                    return Err(invalid(
                        ".path",
                        "path goes with service; with url, put the path in the url".into(),
                    ));
                }
                url.clone()
            }
            (None, Some(service)) => {
                let field = |name: &str| format!(".service.{name}");
                if service.name.is_empty() || service.namespace.is_empty() {
                    return Err(invalid(".service", "needs both name and namespace".into()));
                }
                let port = service.port.unwrap_or(80);
                if !(1..=65535).contains(&port) {
                    return Err(invalid(&field("port"), format!("{port} is not a port")));
                }
                let protocol = service.protocol.as_deref().unwrap_or("http");
                if !matches!(protocol, "http" | "https") {
                    return Err(invalid(
                        &field("protocol"),
                        format!("{protocol:?} is neither http nor https"),
                    ));
                }
                let path = webhook.path.as_deref().unwrap_or("");
                if !path.is_empty() && !path.starts_with('/') {
                    return Err(invalid(".path", format!("{path:?} must start with /")));
                }
                // Metacontroller's form exactly, so a certificate issued for it still matches.
                format!(
                    "{protocol}://{}.{}:{port}{path}",
                    service.name, service.namespace
                )
            }
            _ => {
                return Err(invalid("", "needs exactly one of url or service".into()));
            }
        };
        let uri: Uri = url
            .parse()
            .map_err(|error| invalid(".url", format!("{url:?} is not a URL: {error}")))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(invalid(
                    ".url",
                    format!("{url:?} must start with http:// or https://"),
                ));
            }
        };
        match uri.authority() {
            None => return Err(invalid(".url", format!("{url:?} has no host"))),
            // Credentials would be printed in every error naming the URL.
            Some(authority) if authority.as_str().contains('@') => {
                return Err(invalid(
                    ".url",
                    "must not carry credentials (user:password@)".into(),
                ));
            }
            Some(_) => {}
        }
        let timeout = match &webhook.timeout {
            None => DEFAULT_TIMEOUT,
            Some(text) => parse_timeout(text).map_err(|reason| invalid(".timeout", reason))?,
        };
        // The hook's own credentials, else its host's `endpointConfigs` entry (no merging).
        let (credentials, prefix) = match webhook.credentials() {
            own if !own.is_empty() => (own, String::new()),
            _ => match endpoint_for(&uri, endpoints) {
                Some((index, endpoint)) => (
                    endpoint.credentials(),
                    format!("spec.endpointConfigs[{index}]"),
                ),
                None => (webhook.credentials(), String::new()),
            },
        };
        let field = |name: &str| match prefix.is_empty() {
            true => format!("webhook.{name}"),
            false => format!("{prefix}.{name}"),
        };
        let refuse = |refusal: credentials::Refusal| match refusal {
            credentials::Refusal::Invalid {
                field: name,
                reason,
            } => SourceError::Webhook {
                controller: controller.to_string(),
                hook,
                field: field(name),
                reason,
            },
            credentials::Refusal::Unavailable {
                field: name,
                reason,
            } => SourceError::MissingCredential {
                controller: controller.to_string(),
                hook,
                field: field(name),
                reason,
            },
        };
        credentials::check(&credentials).map_err(refuse)?;
        // Before anything is read, so a check without Secrets finds it too.
        for (name, given) in [
            ("caBundle", credentials.ca_bundle.is_some()),
            ("clientTLS", credentials.client_tls.is_some()),
        ] {
            if given && !https {
                return Err(refuse(credentials::Refusal::Invalid {
                    field: name,
                    reason: format!("is only used for https, and {url:?} is not"),
                }));
            }
        }
        let resolved = credentials::resolve(&credentials, lookup).map_err(refuse)?;
        let tls = match (&resolved.ca_pem, &resolved.client_cert) {
            (None, None) => None,
            (ca_pem, client_cert) => {
                let roots = match ca_pem {
                    Some((field, pem)) => trusted_certificates(pem).map_err(|reason| {
                        refuse(credentials::Refusal::Invalid { field, reason })
                    })?,
                    None => RootCerts::PlatformVerifier,
                };
                Some(tls_config_with(roots, client_cert.clone()))
            }
        };
        let mode = webhook.response_unmarshall_mode.unwrap_or(match version {
            HookVersion::V1 => ResponseMode::Loose,
            HookVersion::V2 => ResponseMode::Strict,
        });
        // A token or client certificate is left out: it changes nothing the hook decides, so its
        // rotation re-syncs only what may have failed with the old one (see the registry). The
        // CA bundle stays, as it always was part of it.
        let digest = hex::encode(sha2::Sha256::digest(
            serde_json::json!({
                "url": url,
                "timeoutNanos": timeout.as_nanos() as u64,
                "caBundle": resolved.ca_pem.as_ref().map(|(_, pem)| pem),
                "mode": mode,
            })
            .to_string(),
        ));
        Ok(WebhookEndpoint {
            url,
            timeout,
            tls,
            authorization: resolved.authorization,
            mode,
            digest,
            etags: webhook.etag.as_ref().and_then(Etags::new),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes with anything that changes what is called or how its answer is read, so a
    /// changed endpoint re-syncs everything, as a changed script does.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// POSTs the request through `client` and reads the response. With ETags on, a `304` (or
    /// `412`) to the `If-None-Match` of the last answer about the same object is that answer
    /// again.
    pub fn call(
        &self,
        client: &WebhookClient,
        hook: HookKind,
        request: &Value,
    ) -> Result<Value, CallFailure> {
        let body = serde_json::to_vec(request).expect("a JSON value serializes");
        let subject = self.etags.as_ref().map(|_| subject_of(hook, request));
        let tag = self
            .etags
            .as_ref()
            .zip(subject.as_deref())
            .and_then(|(etags, subject)| etags.tag(subject));
        let mut post = client
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(tag) = &tag {
            post = post.header("If-None-Match", tag);
        }
        if let Some(authorization) = &self.authorization {
            post = post.header("Authorization", authorization);
        }
        let mut config = post.config().timeout_global(Some(self.timeout));
        if let Some(tls) = &self.tls {
            config = config.tls_config(tls.clone());
        }
        let mut response = config
            .build()
            .send(&body[..])
            .map_err(|error| CallFailure::Failed(self.failure(error)))?;
        let status = response.status();
        if let (Some(etags), Some(subject), Some(_), 304 | 412) =
            (&self.etags, &subject, &tag, status.as_u16())
            && let Some(answer) = etags.answer(subject)
        {
            return Ok(answer);
        }
        let etag = response
            .headers()
            .get("ETag")
            .and_then(|value| value.to_str().ok())
            .map(str::to_string);
        if !status.is_success() {
            // The first bytes of a body of any length (a size limit would fail the whole read).
            let mut body = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(
                    response.body_mut().as_reader(),
                    4 * ERROR_BODY_CHARS as u64,
                ),
                &mut body,
            );
            return Err(CallFailure::Failed(WebhookFailure::Status {
                status: status.as_u16(),
                excerpt: excerpt(&body),
            }));
        }
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_vec()
            .map_err(|error| CallFailure::Failed(self.failure(error)))?;
        let answer = parse_response(hook, self.mode, &body).map_err(CallFailure::Invalid)?;
        if let (Some(etags), Some(subject), Some(etag)) = (&self.etags, subject, etag) {
            etags.remember(subject, etag, answer.clone());
        }
        Ok(answer)
    }

    fn failure(&self, error: ureq::Error) -> WebhookFailure {
        if let ureq::Error::Io(io) = &error
            && let Some(refused) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<Refused>())
        {
            return WebhookFailure::NotAllowed(refused.clone());
        }
        let tls = match &error {
            ureq::Error::Rustls(tls) => Some(tls),
            // A failed handshake surfaces as the I/O error of the connection it ended.
            ureq::Error::Io(io) => io.get_ref().and_then(|inner| inner.downcast_ref()),
            _ => None,
        };
        if let Some(tls) = tls {
            let hint = match tls {
                rustls::Error::InvalidCertificate(_) => {
                    " (webhook.caBundle must hold the CA that signed the server's certificate)"
                }
                _ => "",
            };
            return WebhookFailure::Tls(format!("{tls}{hint}"));
        }
        match error {
            ureq::Error::Timeout(_) => WebhookFailure::Timeout {
                timeout: self.timeout,
            },
            ureq::Error::BodyExceedsLimit(_) => WebhookFailure::TooLarge,
            ureq::Error::Io(error) if error.kind() == std::io::ErrorKind::TimedOut => {
                WebhookFailure::Timeout {
                    timeout: self.timeout,
                }
            }
            error @ (ureq::Error::HostNotFound
            | ureq::Error::ConnectionFailed
            | ureq::Error::Io(_)) => WebhookFailure::Connect(error.to_string()),
            error => WebhookFailure::Transport(error.to_string()),
        }
    }
}

/// The start of a body on one line (empty for an empty body).
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(ERROR_BODY_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// A Go duration (`10s`, `1m30s`, `1.5s`, `500ms`), positive.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let duration: jiff::SignedDuration = text
        .parse()
        .map_err(|error| format!("{text:?} is not a duration like 10s, 1m30s or 500ms: {error}"))?;
    if duration.is_negative() || duration.is_zero() {
        return Err(format!("{text:?}: must be longer than zero"));
    }
    let duration = duration.unsigned_abs();
    // A call holds one of the operator's workers, which every controller shares.
    if duration > MAX_TIMEOUT {
        return Err(format!(
            "{text:?}: at most {}s, since a call holds one of the workers every controller shares",
            MAX_TIMEOUT.as_secs()
        ));
    }
    Ok(duration)
}

/// The longest a webhook call may take.
const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// The certificates of a PEM bundle, each checked to be one a TLS client can trust.
fn trusted_certificates(pem: &str) -> Result<RootCerts, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let certificates = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("not PEM: {error}"))?;
    if certificates.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    let mut store = rustls::RootCertStore::empty();
    for (index, certificate) in certificates.iter().enumerate() {
        store
            .add(certificate.clone())
            .map_err(|error| format!("certificate {index}: {error}"))?;
    }
    Ok(RootCerts::new_with_certs(
        &certificates
            .iter()
            .map(|der| Certificate::from_der(der).to_owned())
            .collect::<Vec<_>>(),
    ))
}

/// Reads a response body: JSON, and in strict mode with no duplicated keys and no field the
/// hook does not define. What the response means is checked later, as for scripts.
fn parse_response(
    hook: HookKind,
    mode: ResponseMode,
    body: &[u8],
) -> Result<Value, InvalidResponse> {
    let not_json = |error: serde_json::Error| match error.classify() {
        // Only the strict reader's own check (a duplicated key) is a data error.
        serde_json::error::Category::Data => InvalidResponse::new("(response)", error.to_string()),
        // Where the parser stopped, not what it read there (see `WebhookFailure`).
        _ => InvalidResponse::new("(response)", format!("the body is not JSON: {error}"))
            .with_excerpt(excerpt(body)),
    };
    let response = match mode {
        ResponseMode::Loose => serde_json::from_slice(body).map_err(not_json)?,
        ResponseMode::Strict => serde_json::from_slice::<Strict>(body).map_err(not_json)?.0,
    };
    if mode == ResponseMode::Strict
        && let Some(fields) = response.as_object()
    {
        let known: Vec<&str> = hook.response_fields().collect();
        if let Some(field) = fields.keys().find(|field| !known.contains(&field.as_str())) {
            return Err(InvalidResponse::new(
                field.clone(),
                format!(
                    "unknown field of a {hook} response (responseUnMarshallMode is strict; the \
                     fields are {})",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(response)
}

/// A JSON value read with every map's keys checked to be distinct (serde_json keeps the last).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(value.into())
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut fields = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if fields.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{key}` (responseUnMarshallMode is strict)"
                )));
            }
            fields.insert(key, value);
        }
        Ok(Value::Object(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{CaBundle, Hook, ServiceReference};
    use crate::hooks::{ControllerHooks, HookError, NoConfigMaps};
    use crate::kinds::{decorator, map};
    use crate::script::ScriptEngine;
    use serde_json::json;

    fn endpoint(webhook: Webhook) -> Result<WebhookEndpoint, String> {
        WebhookEndpoint::new(
            "echo",
            decorator::SYNC,
            &webhook,
            HookVersion::V1,
            &[],
            &NoConfigMaps,
        )
        .map_err(|e| e.to_string())
    }

    fn url(url: &str) -> Webhook {
        Webhook {
            url: Some(url.into()),
            ..Webhook::default()
        }
    }

    #[test]
    fn a_service_resolves_as_metacontroller_resolves_it() {
        let webhook = Webhook {
            service: Some(ServiceReference {
                name: "hooks".into(),
                namespace: "team-a".into(),
                port: None,
                protocol: None,
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        };
        let resolved = endpoint(webhook.clone()).unwrap();
        assert_eq!(resolved.url(), "http://hooks.team-a:80/sync");
        assert_eq!(resolved.timeout(), DEFAULT_TIMEOUT);
        let mut https = webhook;
        https.service.as_mut().unwrap().port = Some(8443);
        https.service.as_mut().unwrap().protocol = Some("https".into());
        assert_eq!(
            endpoint(https).unwrap().url(),
            "https://hooks.team-a:8443/sync"
        );
    }

    #[test]
    fn bad_specs_name_the_field_and_why() {
        let cases = [
            (
                Webhook::default(),
                "webhook: needs exactly one of url or service",
            ),
            (
                url("ftp://hooks/sync"),
                "webhook.url: \"ftp://hooks/sync\" must start with http:// or https://",
            ),
            (
                url("http://user:secret@hooks/sync"),
                "webhook.url: must not carry credentials",
            ),
            (url("not a url"), "webhook.url: \"not a url\" is not a URL"),
            (
                Webhook {
                    timeout: Some("ten".into()),
                    ..url("http://hooks/sync")
                },
                "webhook.timeout: \"ten\" is not a duration like 10s",
            ),
            (
                Webhook {
                    timeout: Some("0s".into()),
                    ..url("http://hooks/sync")
                },
                "webhook.timeout: \"0s\": must be longer than zero",
            ),
            (
                Webhook {
                    path: Some("/sync".into()),
                    ..url("http://hooks")
                },
                "webhook.path: path goes with service",
            ),
            (
                Webhook {
                    ca_bundle: Some(CaBundle {
                        inline: Some(
                            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".into(),
                        ),
                        ..CaBundle::default()
                    }),
                    ..url("https://hooks/sync")
                },
                "webhook.caBundle.inline: certificate 0:",
            ),
            (
                Webhook {
                    ca_bundle: Some(CaBundle {
                        inline: Some("hello".into()),
                        ..CaBundle::default()
                    }),
                    ..url("https://hooks/sync")
                },
                "webhook.caBundle.inline: holds no PEM certificate",
            ),
            (
                Webhook {
                    ca_bundle: Some(CaBundle {
                        inline: Some("x".into()),
                        ..CaBundle::default()
                    }),
                    ..url("http://hooks/sync")
                },
                "webhook.caBundle: is only used for https",
            ),
        ];
        for (webhook, expected) in cases {
            let error = endpoint(webhook).unwrap_err();
            assert!(
                error.starts_with("hook sync of echo: ") && error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn go_durations_are_read() {
        for (text, expected) in [
            ("10s", Duration::from_secs(10)),
            ("30s", Duration::from_secs(30)),
            ("1.5s", Duration::from_millis(1500)),
            ("500ms", Duration::from_millis(500)),
        ] {
            assert_eq!(parse_timeout(text), Ok(expected), "{text}");
        }
        assert!(parse_timeout("-1s").is_err());
        let too_long = parse_timeout("1m30s").unwrap_err();
        assert!(too_long.contains("at most 30s"), "{too_long}");
    }

    /// Secrets as `render` and `test` read them from files.
    fn secrets(data: &[(&str, &str, &str)]) -> Vec<Value> {
        use base64::Engine as _;
        data.iter()
            .map(|(name, key, value)| {
                let encoded = base64::engine::general_purpose::STANDARD.encode(value);
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": name, "namespace": "hooks"}, "data": {*key: encoded}})
            })
            .collect()
    }

    fn with(
        webhook: Webhook,
        endpoints: &[EndpointConfig],
        lookup: &dyn ConfigMapLookup,
    ) -> Result<WebhookEndpoint, String> {
        WebhookEndpoint::new(
            "echo",
            decorator::SYNC,
            &webhook,
            HookVersion::V1,
            endpoints,
            lookup,
        )
        .map_err(|e| e.to_string())
    }

    fn token_ref(name: &str) -> crate::api::Authorization {
        crate::api::Authorization {
            type_: None,
            secret_ref: crate::api::SecretKeyRef {
                name: name.into(),
                namespace: "hooks".into(),
                key: "token".into(),
            },
        }
    }

    #[test]
    fn an_endpoint_config_applies_to_its_host_unless_the_hook_has_credentials() {
        let lookup = secrets(&[
            ("shared", "token", "shared-token"),
            ("own", "token", "own-token"),
        ]);
        let endpoints = [EndpointConfig {
            host: "Hooks.Team-A".into(),
            authorization: Some(token_ref("shared")),
            ..EndpointConfig::default()
        }];
        let header = |webhook: Webhook| {
            with(webhook, &endpoints, &lookup)
                .unwrap()
                .authorization
                .clone()
        };
        // Case aside, and the scheme's default port the same as none.
        assert_eq!(
            header(url("http://hooks.team-a:80/sync")).as_deref(),
            Some("Bearer shared-token")
        );
        let service = Webhook {
            service: Some(ServiceReference {
                name: "hooks".into(),
                namespace: "team-a".into(),
                port: None,
                protocol: None,
            }),
            path: Some("/sync".into()),
            ..Webhook::default()
        };
        assert_eq!(header(service).as_deref(), Some("Bearer shared-token"));
        assert_eq!(header(url("http://hooks.team-a:8080/sync")), None);
        assert_eq!(header(url("http://hooks.team-b/sync")), None);
        let own = Webhook {
            authorization: Some(token_ref("own")),
            ..url("http://hooks.team-a/sync")
        };
        assert_eq!(header(own).as_deref(), Some("Bearer own-token"));
        // A mistake in the entry names the entry.
        let broken = [EndpointConfig {
            authorization: Some(token_ref("missing")),
            ..endpoints[0].clone()
        }];
        let error = with(url("http://hooks.team-a/sync"), &broken, &lookup).unwrap_err();
        assert!(
            error.contains("spec.endpointConfigs[0].authorization.secretRef: Secret hooks/missing"),
            "{error}"
        );
    }

    #[test]
    fn credentials_never_show_in_debug_output_or_errors() {
        let lookup = secrets(&[("token", "token", "s3cret-value")]);
        let endpoint = with(
            Webhook {
                authorization: Some(token_ref("token")),
                ..url("http://hooks/sync")
            },
            &[],
            &lookup,
        )
        .unwrap();
        let debug = format!("{endpoint:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        let error = with(
            Webhook {
                basic_auth: Some(crate::api::BasicAuth {
                    secret_ref: crate::api::SecretRef {
                        name: "token".into(),
                        namespace: "hooks".into(),
                    },
                    username_key: Some("token".into()),
                    ..crate::api::BasicAuth::default()
                }),
                ..url("http://hooks/sync")
            },
            &[],
            &lookup,
        )
        .unwrap_err();
        assert!(error.contains("has no key \"password\""), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }

    /// `openssl x509 -req` without `-extfile`: an X.509 v1 certificate (and its key).
    const V1_CLIENT_CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBGjCBwQIULaIlQ1US/pk/uyBTx4JMV/+kN0swCgYIKoZIzj0EAwIwDTELMAkG
A1UEAwwCY2EwIBcNMjYxMTI1MDQxMjU4WhgPMjEyNjExMDEwNDEyNThaMBExDzAN
BgNVBAMMBmNsaWVudDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABL+up7c4k7mK
PsoqUQP0kRVmGG3P2kAs+nkRF9gM6JdRMQyohKbKXZyAXCHSFbddkknEhTEyU024
9AKwqpqHrPMwCgYIKoZIzj0EAwIDSAAwRQIhAMHpkuL2HOqRRMf0uXbmFnpvd+pf
j5NuWsBzom0hAd+NAiASKhxKyS0AHr5FmkLpsHxHfvhLogA3/+8j1kY60mdihg==
-----END CERTIFICATE-----
";
    const V1_CLIENT_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgtyIb1Kd2xC+J8CWD
sBxpu8eZ0cEpZV6WVGTEBFcpHKOhRANCAAS/rqe3OJO5ij7KKlED9JEVZhhtz9pA
LPp5ERfYDOiXUTEMqISmyl2cgFwh0hW3XZJJxIUxMlNNuPQCsKqah6zz
-----END PRIVATE KEY-----
";

    #[test]
    fn a_client_certificate_and_a_ca_come_from_secrets_for_https_only() {
        let cert = crate::admission::generate_serving_cert(&["127.0.0.1".to_string()]).unwrap();
        let mut lookup = secrets(&[("ca", "ca.crt", &cert.ca_pem)]);
        lookup.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "client", "namespace": "hooks"},
            "stringData": {"tls.crt": cert.cert_pem, "tls.key": cert.key_pem}}));
        lookup.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "keyless", "namespace": "hooks"},
            "stringData": {"tls.crt": cert.cert_pem, "tls.key": "not a key"}}));
        let client_tls = |name: &str| crate::api::ClientTls {
            secret_ref: crate::api::SecretRef {
                name: name.into(),
                namespace: "hooks".into(),
            },
            ..crate::api::ClientTls::default()
        };
        let bundle = CaBundle {
            secret_ref: Some(crate::api::KeyRef {
                name: "ca".into(),
                namespace: "hooks".into(),
                key: None,
            }),
            ..CaBundle::default()
        };
        let webhook = Webhook {
            ca_bundle: Some(bundle),
            client_tls: Some(client_tls("client")),
            ..url("https://127.0.0.1:8443/sync")
        };
        let endpoint = with(webhook.clone(), &[], &lookup).unwrap();
        assert!(endpoint.tls.is_some());
        let plain = Webhook {
            url: Some("http://127.0.0.1/sync".into()),
            ..webhook.clone()
        };
        let error = with(plain, &[], &NoConfigMaps).unwrap_err();
        assert!(
            error.contains("webhook.caBundle: is only used for https"),
            "refused before anything is read: {error}"
        );
        let keyless = Webhook {
            client_tls: Some(client_tls("keyless")),
            ..webhook.clone()
        };
        let error = with(keyless, &[], &lookup).unwrap_err();
        assert!(
            error.contains("webhook.clientTLS.secretRef: key \"tls.key\" holds no PEM private key"),
            "{error}"
        );
        // Metacontroller's examples/webhook-auth signs its client certificate with `openssl x509
        // -req` and no extensions: X.509 v1, which rustls will not present (ureq panicked on it
        // at every call). It is refused when the hook loads, naming the field.
        lookup.push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "v1", "namespace": "hooks"},
            "stringData": {"tls.crt": V1_CLIENT_CERT, "tls.key": V1_CLIENT_KEY}}));
        let v1 = Webhook {
            client_tls: Some(client_tls("v1")),
            ..webhook
        };
        let error = with(v1, &[], &lookup).unwrap_err();
        assert!(
            error.contains("webhook.clientTLS.secretRef: the certificate in key \"tls.crt\"")
                && error.contains("UnsupportedCertVersion")
                && error.contains("X.509 v1"),
            "{error}"
        );
    }

    #[test]
    fn the_digest_follows_what_is_called() {
        let a = endpoint(url("http://hooks/sync")).unwrap();
        let b = endpoint(url("http://hooks/v2/sync")).unwrap();
        let c = endpoint(Webhook {
            timeout: Some("3s".into()),
            ..url("http://hooks/sync")
        })
        .unwrap();
        assert_ne!(a.digest(), b.digest());
        assert_ne!(a.digest(), c.digest());
        assert_eq!(
            a.digest(),
            endpoint(url("http://hooks/sync")).unwrap().digest()
        );
    }

    /// Metacontroller reads a v2 hook's responses strictly unless told otherwise.
    #[test]
    fn v2_hooks_read_responses_strictly_by_default() {
        let made = |version, mode| {
            let webhook = Webhook {
                response_unmarshall_mode: mode,
                ..url("http://hooks/sync")
            };
            WebhookEndpoint::new(
                "echo",
                decorator::SYNC,
                &webhook,
                version,
                &[],
                &NoConfigMaps,
            )
            .unwrap()
            .mode
        };
        assert_eq!(made(HookVersion::V1, None), ResponseMode::Loose);
        assert_eq!(made(HookVersion::V2, None), ResponseMode::Strict);
        assert_eq!(
            made(HookVersion::V2, Some(ResponseMode::Loose)),
            ResponseMode::Loose
        );
    }

    #[test]
    fn strict_mode_refuses_unknown_fields_and_duplicated_keys() {
        let read = |hook, mode, body: &str| parse_response(hook, mode, body.as_bytes());
        let body = r#"{"labels": {"a": "1"}, "attachment": []}"#;
        assert_eq!(
            read(decorator::SYNC, ResponseMode::Loose, body).unwrap()["labels"],
            json!({"a": "1"})
        );
        let error = read(decorator::SYNC, ResponseMode::Strict, body).unwrap_err();
        assert_eq!(error.path, "attachment");
        assert!(
            error.reason.contains("unknown field of a sync response"),
            "{error}"
        );
        let duplicated = r#"{"labels": {"a": "1", "a": "2"}}"#;
        assert_eq!(
            read(decorator::SYNC, ResponseMode::Loose, duplicated).unwrap()["labels"]["a"],
            "2"
        );
        let error = read(decorator::SYNC, ResponseMode::Strict, duplicated).unwrap_err();
        assert_eq!(
            error.reason,
            "duplicate field `a` (responseUnMarshallMode is strict) at line 1 column 31"
        );
        assert!(
            read(
                decorator::CUSTOMIZE,
                ResponseMode::Strict,
                r#"{"relatedResources": [], "x": 1.5, "y": [null, true]}"#
            )
            .unwrap_err()
            .path
                == "x"
        );
        let error = read(map::MAP, ResponseMode::Loose, "<html>oops</html>").unwrap_err();
        assert_eq!(error.path, "(response)");
        assert_eq!(
            error.reason,
            "the body is not JSON: expected value at line 1 column 1"
        );
        // Kept aside, never in the message.
        assert_eq!(error.excerpt.as_deref(), Some("<html>oops</html>"));
    }

    /// A bare HTTP/1.1 server on loopback answering every request with `reply(body)`: status,
    /// body and a delay before answering. It counts connections, to see keep-alive at work.
    struct RawServer {
        url: String,
        connections: Arc<std::sync::atomic::AtomicUsize>,
    }

    type Reply = (u16, String, Duration);

    fn serve(reply: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> RawServer {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = connections.clone();
        let reply = Arc::new(reply);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counted.fetch_add(1, Ordering::SeqCst);
                let reply = reply.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    loop {
                        let mut length = 0;
                        let mut line = String::new();
                        loop {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let lower = line.to_ascii_lowercase();
                            if let Some(value) = lower.strip_prefix("content-length:") {
                                length = value.trim().parse().unwrap();
                            }
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let mut body = vec![0; length];
                        reader.read_exact(&mut body).unwrap();
                        let request = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let (status, body, delay) = reply(&request);
                        std::thread::sleep(delay);
                        let answer = format!(
                            "HTTP/1.1 {status} Answer\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        RawServer { url, connections }
    }

    fn hooks(webhook: Webhook) -> ControllerHooks {
        let hook = Hook {
            webhook: Some(webhook),
            ..Hook::default()
        };
        ControllerHooks::load(
            &ScriptEngine::new(),
            "echo",
            [(decorator::SYNC, &hook)],
            &[],
            &[],
            &NoConfigMaps,
        )
        .unwrap()
    }

    fn call(hooks: &ControllerHooks) -> Result<Value, HookError> {
        let request = json!({"object": {"metadata": {"name": "web"}}, "finalizing": false});
        hooks.call(
            &ScriptEngine::new(),
            decorator::SYNC,
            &request,
            &Default::default(),
        )
    }

    #[test]
    fn a_call_posts_the_request_as_json_and_keeps_the_connection_alive() {
        let server = serve(|request| {
            let name = request["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or("?");
            let body = json!({"labels": {"seen": name}}).to_string();
            (200, body, Duration::ZERO)
        });
        let hooks = hooks(url(&format!("{}/sync", server.url)));
        for _ in 0..3 {
            assert_eq!(call(&hooks).unwrap(), json!({"labels": {"seen": "web"}}));
        }
        assert_eq!(
            server.connections.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the three calls should share one pooled connection"
        );
    }

    #[test]
    fn a_failed_call_names_the_controller_hook_url_and_what_went_wrong() {
        let failing = serve(|_| (500, "boom: no such template".into(), Duration::ZERO));
        let error = call(&hooks(url(&format!("{}/sync", failing.url)))).unwrap_err();
        assert!(matches!(error, HookError::Webhook(_)), "{error:?}");
        // What the answer said stays out of the message (Events, status): beside it only.
        assert_eq!(
            error.to_string(),
            format!(
                "hook sync of echo (webhook {}/sync): answered HTTP 500",
                failing.url
            )
        );
        assert_eq!(error.body_excerpt(), Some("boom: no such template"));
        assert!(
            error
                .with_body()
                .ends_with("answered HTTP 500\nthe webhook answered: boom: no such template"),
            "{}",
            error.with_body()
        );

        let html = serve(|_| (200, "<html>".into(), Duration::ZERO));
        let error = call(&hooks(url(&html.url))).unwrap_err();
        assert!(
            matches!(error, HookError::Response(_))
                && error.to_string()
                    == format!(
                        "hook sync of echo (webhook {}) returned an invalid hook response: \
                         (response): the body is not JSON: expected value at line 1 column 1",
                        html.url
                    ),
            "{error}"
        );
        assert_eq!(error.body_excerpt(), Some("<html>"));

        let slow = serve(|_| (200, "{}".into(), Duration::from_secs(3)));
        let started = std::time::Instant::now();
        let error = call(&hooks(Webhook {
            timeout: Some("300ms".into()),
            ..url(&slow.url)
        }))
        .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(
            error
                .to_string()
                .ends_with("no response within 300ms (webhook.timeout)"),
            "{error}"
        );

        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = closed.local_addr().unwrap();
        drop(closed);
        let error = call(&hooks(url(&format!("http://{address}/sync")))).unwrap_err();
        assert!(
            error.to_string().contains(&format!(
                "(webhook http://{address}/sync): cannot connect: "
            )),
            "{error}"
        );
    }

    fn restricted(entries: &[&str]) -> WebhookClient {
        let entries = entries.iter().map(|entry| entry.parse().unwrap()).collect();
        WebhookClient::restricted(EgressPolicy::new(entries, []))
    }

    fn call_through(hooks: &ControllerHooks, client: &WebhookClient) -> Result<Value, HookError> {
        let request = json!({"object": {"metadata": {"name": "web"}}, "finalizing": false});
        hooks.call_through(
            &ScriptEngine::new(),
            client,
            decorator::SYNC,
            &request,
            &Default::default(),
        )
    }

    #[test]
    fn the_operators_client_connects_only_to_addresses_the_policy_allows() {
        use std::sync::atomic::Ordering;
        let server = serve(|_| (200, r#"{"labels": {"a": "1"}}"#.into(), Duration::ZERO));
        let port = server.url.rsplit(':').next().unwrap().to_string();
        let by_address = hooks(url(&format!("{}/sync", server.url)));
        let by_name = hooks(url(&format!("http://localhost:{port}/sync")));
        let refused = |hooks: &ControllerHooks, client: &WebhookClient| {
            let error = call_through(hooks, client).unwrap_err();
            assert!(
                matches!(&error, HookError::Webhook(failed)
                    if matches!(failed.failure, WebhookFailure::NotAllowed(_))),
                "{error:?}"
            );
            error.to_string()
        };
        // Nothing allowed: nothing called, and the message says what to set.
        let message = refused(&by_address, &restricted(&[]));
        assert!(
            message.ends_with(
                "/sync): destination not allowed: 127.0.0.1 (the operator calls no webhook \
                 until an admin lists where they may go: metascript run --webhook-allow)"
            ),
            "{message}"
        );
        // A name entry does not open the loopback address the name resolves to, nor does a
        // range around everything.
        let message = refused(&by_name, &restricted(&["localhost", "0.0.0.0/0", "::/0"]));
        assert!(
            message.contains("destination not allowed: localhost resolves to ")
                && message.contains(
                    "loopback address: only an address entry listing it \
                     explicitly allows it (--webhook-allow "
                ),
            "{message}"
        );
        let message = refused(&by_address, &restricted(&["0.0.0.0/0"]));
        assert!(
            message.contains(
                "destination not allowed: 127.0.0.1, loopback address: only an address entry \
                 listing it explicitly allows it (--webhook-allow 127.0.0.1)"
            ),
            "{message}"
        );
        assert_eq!(server.connections.load(Ordering::SeqCst), 0);
        // Listed on purpose, by address or through the name.
        let allowed = restricted(&["127.0.0.0/8", "::1"]);
        assert_eq!(
            call_through(&by_address, &allowed).unwrap(),
            json!({"labels": {"a": "1"}})
        );
        assert!(call_through(&by_name, &allowed).is_ok());
        assert!(server.connections.load(Ordering::SeqCst) >= 1);
        // A proxy's address would be the one connected to: the operator's client uses none.
        assert!(allowed.agent.config().proxy().is_none());
    }
}
