//! Hooks served over HTTP(S), as in Metacontroller: a webhook's spec is resolved and checked once,
//! when its controller loads (URL, timeout, trusted CAs, response mode), and each call POSTs the
//! request as JSON and reads the response as the hook's answer, on the calling thread (a
//! blocking one in the operator) through a pooled client: the operator's own, which connects
//! only where `--webhook-allow` says (`egress`), or the one the faces an author runs share.

use super::InvalidResponse;
use super::SourceError;
use super::credentials;
use super::egress::{EgressPolicy, Refused};
use super::json::JsonRules;
use super::source::ConfigMapLookup;
use crate::api::{EndpointConfig, Etag, HookKind, HookVersion, ResponseMode, Webhook};
use crate::script::{HookRequest, Json};
use serde::de::DeserializeSeed;
use serde_json::Value;
use sha2::Digest;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use std::time::Instant;
use ureq::http::Uri;
use ureq::tls::{Certificate, ClientCert, RootCerts, TlsConfig};
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// How long a call waits for its response when `timeout` is not set (Metacontroller's default).
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest response body read unless `metascript run --webhook-max-response-bytes` says
/// otherwise: room for an object as large as the API server takes (3 MiB) and then some. Its
/// parse is drawn from the script memory first ([`parsed_size_bound`]).
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 << 20;

/// How much of a failed call's body is kept for the operator's log and the author's tools.
const ERROR_BODY_CHARS: usize = 300;

/// Idle connections kept per host: enough for every worker of a default operator to reuse one.
const IDLE_PER_HOST: usize = 32;

/// The HTTP client webhook calls go through: its connection pool is shared by every call.
#[derive(Debug)]
pub struct WebhookClient {
    agent: ureq::Agent,
    /// A body longer than this fails the call unread.
    max_response_bytes: u64,
}

impl WebhookClient {
    /// Calls go wherever their URL points, through the environment's proxy if one is set: the
    /// client of the faces an author runs on their own machine (`test`, `render`, `diff`,
    /// `explain`, the LSP), shared by the process.
    pub(crate) fn unrestricted() -> &'static WebhookClient {
        static CLIENT: LazyLock<WebhookClient> = LazyLock::new(|| WebhookClient {
            agent: agent_config().build().into(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        });
        &CLIENT
    }

    /// Calls connect only to the addresses `policy` allows (each host resolved, and its
    /// addresses filtered, at every call), and never through a proxy, whose address would be
    /// the one connected to: the operator's client. It reads bodies of up to
    /// `max_response_bytes`.
    pub(crate) fn restricted(policy: EgressPolicy, max_response_bytes: u64) -> WebhookClient {
        let config = agent_config().proxy(None).build();
        let resolver = AllowedResolver {
            policy: Arc::new(policy),
        };
        WebhookClient {
            agent: ureq::Agent::with_parts(config, DefaultConnector::new(), resolver),
            max_response_bytes,
        }
    }
}

/// A client for the operator's own calls out (the trace exporter): as the webhooks' (TLS with
/// the platform's roots, statuses returned not raised, no redirects), through the environment's
/// proxy, each call at most `timeout`.
pub(crate) fn plain_agent(timeout: std::time::Duration) -> ureq::Agent {
    agent_config().timeout_global(Some(timeout)).build().into()
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
pub(crate) struct WebhookEndpoint {
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

/// The most answers one hook remembers (`webhook.etag`); past it, the oldest are forgotten.
const ETAG_MAX_ENTRIES: usize = 10_000;
/// The most bytes of answers one hook remembers (each its body, ETag and object key).
const ETAG_MAX_BYTES: usize = 8 << 20;
/// The longest `etag.cacheTimeoutSeconds` (an hour): longer is refused when the hook loads.
const ETAG_MAX_TIMEOUT_SECONDS: i32 = 3600;

/// A webhook's last answer per object and its ETag, remembered for a while, within an entry
/// and a byte ceiling (the oldest forgotten first). Bodies are kept as they came, not parsed:
/// they count exactly, take a fraction of a parsed answer's memory, and a `304` reads its
/// body again, drawn from the script memory like a fresh one.
#[derive(Debug)]
struct Etags {
    timeout: Duration,
    cleanup: Duration,
    max_entries: usize,
    max_bytes: usize,
    entries: parking_lot::Mutex<EtagEntries>,
}

#[derive(Debug)]
struct EtagEntries {
    by_object: HashMap<String, Remembered>,
    /// The objects in the order their answers were remembered, oldest first.
    order: BTreeMap<u64, String>,
    next: u64,
    bytes: usize,
    cleaned: Instant,
}

#[derive(Debug)]
struct Remembered {
    tag: String,
    body: Arc<[u8]>,
    at: Instant,
    /// Its key in `order`.
    order: u64,
}

impl Remembered {
    fn size(&self, object: &str) -> usize {
        object.len() + self.tag.len() + self.body.len()
    }
}

impl Etags {
    /// The cache `config` asks for, if any; a refusal says why `cacheTimeoutSeconds` cannot be.
    fn new(config: &Etag) -> Result<Option<Etags>, String> {
        if let Some(seconds) = config.cache_timeout_seconds
            && seconds > ETAG_MAX_TIMEOUT_SECONDS
        {
            return Err(format!(
                "{seconds}: at most {ETAG_MAX_TIMEOUT_SECONDS} (an hour), since every answer \
                 remembered is held in the operator's memory"
            ));
        }
        let seconds = |value: Option<i32>, default: u64| {
            Duration::from_secs(value.and_then(|v| u64::try_from(v).ok()).unwrap_or(default))
        };
        Ok(config.enabled.unwrap_or(false).then(|| Etags {
            timeout: seconds(config.cache_timeout_seconds, 600),
            cleanup: seconds(config.cache_cleanup_seconds, 60),
            max_entries: ETAG_MAX_ENTRIES,
            max_bytes: ETAG_MAX_BYTES,
            entries: parking_lot::Mutex::new(EtagEntries {
                by_object: HashMap::new(),
                order: BTreeMap::new(),
                next: 0,
                bytes: 0,
                cleaned: Instant::now(),
            }),
        }))
    }

    /// The ETag and body of the remembered answer about an object, while it is fresh.
    fn fresh(&self, object: &str) -> Option<(String, Arc<[u8]>)> {
        let entries = self.entries.lock();
        let remembered = entries.by_object.get(object)?;
        (remembered.at.elapsed() < self.timeout)
            .then(|| (remembered.tag.clone(), remembered.body.clone()))
    }

    fn remember(&self, object: String, tag: String, body: &[u8]) {
        let mut entries = self.entries.lock();
        if entries.cleaned.elapsed() >= self.cleanup {
            // Remembered in order, so the stale ones come first.
            while let Some((_, oldest)) = entries.order.first_key_value()
                && entries
                    .by_object
                    .get(oldest)
                    .is_none_or(|remembered| remembered.at.elapsed() >= self.timeout)
            {
                entries.forget_oldest();
            }
            entries.cleaned = Instant::now();
        }
        entries.forget(&object);
        let size = object.len() + tag.len() + body.len();
        if size > self.max_bytes {
            return;
        }
        while (entries.by_object.len() >= self.max_entries || entries.bytes + size > self.max_bytes)
            && entries.forget_oldest()
        {}
        let order = entries.next;
        entries.next += 1;
        entries.bytes += size;
        entries.order.insert(order, object.clone());
        entries.by_object.insert(
            object,
            Remembered {
                tag,
                body: body.into(),
                at: Instant::now(),
                order,
            },
        );
    }
}

impl EtagEntries {
    fn forget(&mut self, object: &str) {
        if let Some(remembered) = self.by_object.remove(object) {
            self.order.remove(&remembered.order);
            self.bytes -= remembered.size(object);
        }
    }

    /// Whether there was one to forget.
    fn forget_oldest(&mut self) -> bool {
        let Some((_, object)) = self.order.pop_first() else {
            return false;
        };
        if let Some(remembered) = self.by_object.remove(&object) {
            self.bytes -= remembered.size(&object);
        }
        true
    }
}

/// The object a request is about, as the ETag cache names it: its uid, else where it is.
fn subject_of(hook: HookKind, request: HookRequest) -> String {
    // Of an object lent as text only the uid is read; one without a uid is decoded.
    let subject = match request.get(hook.contract().subject) {
        None => Cow::Owned(Value::Null),
        Some(Json::Tree(subject)) => Cow::Borrowed(subject),
        Some(text) => {
            if let Some(Value::String(uid)) = text.at(&["metadata".into(), "uid".into()])
                && !uid.is_empty()
            {
                return uid;
            }
            text.tree()
        }
    };
    match crate::object::uid(&subject) {
        Some(uid) => uid.to_string(),
        None => crate::object::ObjectKey::of(&subject).to_string(),
    }
}

/// Why a call produced no usable response.
#[derive(Debug)]
pub(crate) enum CallFailure {
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
    #[error(
        "the response body is larger than {limit} bytes (metascript run \
         --webhook-max-response-bytes)"
    )]
    TooLarge { limit: u64 },
    /// Reading the body as JSON would take more of the script memory than is free.
    #[error("{}", memory_message(.body, .short))]
    NoMemory {
        /// The body's length.
        body: usize,
        short: crate::script::memory::PoolShort,
    },
    /// `--webhook-allow` allows none of the host's addresses: nothing was sent.
    #[error(transparent)]
    NotAllowed(Refused),
    #[error("{0}")]
    Transport(String),
}

impl WebhookEndpoint {
    /// Resolves a hook's webhook spec; every problem names the field and why. A `v2` hook reads
    /// its responses strictly unless told otherwise, as in Metacontroller.
    pub(crate) fn new(
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
        let refuse = |refusal: credentials::CredentialRefusal| match refusal {
            credentials::CredentialRefusal::Invalid {
                field: name,
                reason,
            } => SourceError::Webhook {
                controller: controller.to_string(),
                hook,
                field: field(name),
                reason,
            },
            credentials::CredentialRefusal::Unavailable {
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
                return Err(refuse(credentials::CredentialRefusal::Invalid {
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
                        refuse(credentials::CredentialRefusal::Invalid { field, reason })
                    })?,
                    None => RootCerts::PlatformVerifier,
                };
                Some(tls_config_with(roots, client_cert.clone()))
            }
        };
        let etags = match &webhook.etag {
            Some(etag) => {
                Etags::new(etag).map_err(|reason| invalid(".etag.cacheTimeoutSeconds", reason))?
            }
            None => None,
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
            etags,
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    #[cfg(test)]
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes with anything that changes what is called or how its answer is read, so a
    /// changed endpoint re-syncs everything, as a changed script does.
    pub(crate) fn digest(&self) -> &str {
        &self.digest
    }

    /// POSTs the request through `client` and reads the response. With ETags on, a `304` (or
    /// `412`) to the `If-None-Match` of the last answer about the same object is that answer
    /// again.
    pub(crate) fn call(
        &self,
        client: &WebhookClient,
        hook: HookKind,
        request: HookRequest,
    ) -> Result<Value, CallFailure> {
        let body = serde_json::to_vec(&request).expect("a JSON value serializes");
        let subject = self.etags.as_ref().map(|_| subject_of(hook, request));
        // Taken whole now: the answer may be forgotten while the call runs.
        let remembered = self
            .etags
            .as_ref()
            .zip(subject.as_deref())
            .and_then(|(etags, subject)| etags.fresh(subject));
        let mut post = client
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some((tag, _)) = &remembered {
            post = post.header("If-None-Match", tag);
        }
        if let Some(authorization) = &self.authorization {
            post = post.header("Authorization", authorization);
        }
        if let Some(traceparent) = crate::telemetry::traceparent() {
            post = post.header("traceparent", traceparent);
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
        if let (Some((_, body)), 304 | 412) = (&remembered, status.as_u16()) {
            return read_answer(hook, self.mode, body);
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
            .limit(client.max_response_bytes)
            .read_to_vec()
            .map_err(|error| CallFailure::Failed(self.failure(error)))?;
        let answer = read_answer(hook, self.mode, &body)?;
        if let (Some(etags), Some(subject), Some(etag)) = (&self.etags, subject, etag) {
            etags.remember(subject, etag, &body);
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
            ureq::Error::BodyExceedsLimit(limit) => WebhookFailure::TooLarge { limit },
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
    // Only the start is read: a body may be megabytes, and its words would take more.
    let mut end = body.len().min(4 * ERROR_BODY_CHARS);
    // Not in the middle of a character (at most three continuation bytes back).
    for _ in 0..3 {
        match body.get(end) {
            Some(byte) if byte & 0xC0 == 0x80 => end -= 1,
            _ => break,
        }
    }
    let mut text = String::new();
    for word in String::from_utf8_lossy(&body[..end]).split_whitespace() {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(word);
    }
    match text.char_indices().nth(ERROR_BODY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if end < body.len() => format!("{text}…"),
        None => text,
    }
}

/// Why a body could not be read for want of script memory, and what can be done about it.
fn memory_message(body: &usize, short: &crate::script::memory::PoolShort) -> String {
    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    let needs = format!(
        "reading the {body}-byte response body as JSON takes up to {:.1} MiB of the operator's \
         script memory beyond the {} MiB every call has (metascript run --script-memory)",
        mib(short.wanted),
        crate::script::memory::FLOOR_BYTES >> 20
    );
    if short.wanted > short.limit {
        format!(
            "{needs}, more than all of it ({:.1} MiB): the webhook must answer less, or the \
             operator's admin raise --script-memory",
            mib(short.limit)
        )
    } else {
        format!(
            "{needs}, and the calls running now leave only {:.1} of its {:.1} MiB: a later \
             attempt may succeed; if this recurs, the operator's admin can raise \
             --script-memory",
            mib(short.free),
            mib(short.limit)
        )
    }
}

/// Reads a body the webhook answered (or answered before, for a `304`), with the memory its
/// parse may take drawn from the script memory first: a parse cannot be stopped midway, and
/// its result can be over a hundred times the body's size.
fn read_answer(hook: HookKind, mode: ResponseMode, body: &[u8]) -> Result<Value, CallFailure> {
    let _reserved =
        crate::script::memory::Reservation::draw(parsed_size_bound(body)).map_err(|short| {
            CallFailure::Failed(WebhookFailure::NoMemory {
                body: body.len(),
                short,
            })
        })?;
    parse_response(hook, mode, body).map_err(CallFailure::Invalid)
}

/// `size_of::<Value>()`, a slot of an array or of a map node.
const VALUE_BYTES: usize = size_of::<Value>();
/// The nodes of a `BTreeMap<String, Value>` (std's B is 6: up to 11 entries a node): a leaf,
/// and an internal node with its 12 edges. Checked by `map_node_sizes_are_stds`.
const MAP_LEAF_BYTES: usize = 632;
const MAP_INTERNAL_BYTES: usize = 728;
/// What reading a body allocates whatever its shape: an error, its message and an excerpt.
const PARSE_OVERHEAD_BYTES: usize = 16 << 10;

/// The most a parse of `body` into a `Value` can allocate, from one pass over its bytes.
/// serde_json copies every string, grows each array's `Vec` by doubling (4 slots once it
/// holds anything, so at most 2n + 2 slots for n items), and builds each object as a
/// `BTreeMap` whose nodes, but for the root, hold at least 5 entries; long numbers and
/// strings with escapes go through a scratch buffer grown by doubling. So, counting what is
/// outside strings: each `[` 4 slots, each `,` 2 (an item of an array, or an over-count),
/// each `{` a leaf, each `:` a fifth of an internal node; and every string byte.
///
/// Bytes allocated per body byte, parsing bodies of one shape (the same at 256 KiB and 4 MiB),
/// and this bound's: `[0,0,…]` 16.0 (bound 32.0), `["a",…]` 8.2 (16.3), `[[0],…]` 40.0 (48.0),
/// `[{"":0},…]` 98.3 (120.2), `{"":{"":…0}}` nested 126 deep and repeated 126.1 (155.1, the
/// worst shape found), a list of ConfigMaps 13.9 (23.8). So a 4 MiB body may take over 500
/// MiB, and one of objects like a hook's usual answer about 60 MiB (bound: 100 MiB).
pub(super) fn parsed_size_bound(body: &[u8]) -> usize {
    let (mut arrays, mut commas, mut objects, mut colons) = (0usize, 0usize, 0usize, 0usize);
    let (mut string_bytes, mut scratch) = (0usize, 0usize);
    // The string or number being read: its length, and whether it goes through the scratch.
    let (mut in_string, mut escaped, mut run, mut scratched) = (false, false, 0usize, false);
    for &byte in body {
        if in_string {
            match (escaped, byte) {
                (false, b'"') => {
                    in_string = false;
                    string_bytes += run;
                    if scratched {
                        scratch = scratch.max(run);
                    }
                    run = 0;
                }
                (false, b'\\') => (escaped, scratched) = (true, true),
                _ => escaped = false,
            }
            if in_string {
                run += 1;
            }
            continue;
        }
        match byte {
            b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E' => {
                run += 1;
                continue;
            }
            b'"' => (in_string, scratched) = (true, false),
            b'[' => arrays += 1,
            b',' => commas += 1,
            b'{' => objects += 1,
            b':' => colons += 1,
            _ => {}
        }
        scratch = scratch.max(run);
        run = 0;
    }
    // A body cut inside a string: the parser fails there, having maybe copied what it read.
    string_bytes += run;
    scratch = scratch.max(run);
    arrays * 4 * VALUE_BYTES
        + commas * 2 * VALUE_BYTES
        + objects * MAP_LEAF_BYTES
        + colons.div_ceil(5) * MAP_INTERNAL_BYTES
        + string_bytes
        + 2 * scratch
        + PARSE_OVERHEAD_BYTES
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
pub(super) fn parse_response(
    hook: HookKind,
    mode: ResponseMode,
    body: &[u8],
) -> Result<Value, InvalidResponse> {
    let not_json = |error: serde_json::Error| match error.classify() {
        // Only the strict reader's own check (a duplicated key) is a data error.
        serde_json::error::Category::Data => InvalidResponse::new("(response)", error.to_string()),
        // JSON, but more than a reader takes; serde_json tells these apart only in its message.
        _ if error.to_string().starts_with("recursion limit exceeded") => InvalidResponse::new(
            "(response)",
            format!("the body nests deeper than a response may (127 levels): {error}"),
        ),
        _ if error.to_string().starts_with("number out of range") => InvalidResponse::new(
            "(response)",
            format!("the body holds a number beyond what a 64-bit float can: {error}"),
        ),
        // Where the parser stopped, not what it read there (see `WebhookFailure`).
        _ => InvalidResponse::new("(response)", format!("the body is not JSON: {error}"))
            .with_excerpt(excerpt(body)),
    };
    let response = match mode {
        ResponseMode::Loose => serde_json::from_slice(body).map_err(not_json)?,
        ResponseMode::Strict => {
            let mut deserializer = serde_json::Deserializer::from_slice(body);
            let response = JsonRules::strict()
                .at(0)
                .deserialize(&mut deserializer)
                .map_err(not_json)?;
            deserializer.end().map_err(not_json)?;
            response
        }
    };
    if mode == ResponseMode::Strict
        && let Some(fields) = response.as_object()
    {
        let known: Vec<&str> = hook.response_fields().collect();
        if let Some(field) = fields.keys().find(|field| !known.contains(&field.as_str())) {
            return Err(InvalidResponse::new(
                super::response::field_path(field),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::hook::ServiceReference;
    use crate::api::{CaBundle, Hook};
    use crate::hooks::tests::fuzz::allocates_within;
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

    /// The ETag cache names a subject lent as text as it names the same object lent as a tree.
    #[test]
    fn a_subject_lent_as_text_is_named_as_its_tree() {
        let rest = json!({"finalizing": false});
        for object in [
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n", "uid": "u-1"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n", "uid": ""}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"}}),
        ] {
            let text = object.to_string();
            let name = |lent: Json| {
                let lent = [("object", lent)];
                subject_of(
                    crate::kinds::decorator::SYNC,
                    HookRequest::lending(&rest, &lent),
                )
            };
            assert_eq!(
                name(Json::Text(&text)),
                name(Json::Tree(&object)),
                "{object}"
            );
        }
        let with_uid = json!({"metadata": {"name": "p", "uid": "u-1"}}).to_string();
        let lent = [("object", Json::Text(&with_uid))];
        let named = subject_of(
            crate::kinds::decorator::SYNC,
            HookRequest::lending(&rest, &lent),
        );
        assert_eq!(named, "u-1");
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
            secret_ref: crate::api::hook::SecretKeyRef {
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
                    secret_ref: crate::api::hook::SecretRef {
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
            secret_ref: crate::api::hook::SecretRef {
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

    fn etags(timeout: Duration, max_entries: usize, max_bytes: usize) -> Etags {
        let config = Etag {
            enabled: Some(true),
            cache_timeout_seconds: Some(60),
            cache_cleanup_seconds: Some(1),
        };
        Etags {
            timeout,
            cleanup: Duration::ZERO,
            max_entries,
            max_bytes,
            ..Etags::new(&config).unwrap().unwrap()
        }
    }

    fn remembered(etags: &Etags) -> Vec<String> {
        let entries = etags.entries.lock();
        entries.order.values().cloned().collect()
    }

    #[test]
    fn the_etag_cache_forgets_the_oldest_past_its_entry_ceiling() {
        let etags = etags(Duration::from_secs(60), 3, usize::MAX);
        for object in ["a", "b", "c"] {
            etags.remember(object.into(), format!("tag-{object}"), b"{}");
        }
        // Remembered again: now the newest.
        etags.remember("a".into(), "tag-a2".into(), b"{}");
        etags.remember("d".into(), "tag-d".into(), b"{}");
        assert_eq!(remembered(&etags), ["c", "a", "d"]);
        assert_eq!(etags.fresh("b"), None);
        assert_eq!(etags.fresh("a").unwrap().0, "tag-a2");
        assert_eq!(etags.fresh("d").unwrap().1.as_ref(), b"{}");
    }

    #[test]
    fn the_etag_cache_counts_bytes_and_forgets_the_oldest_past_its_byte_ceiling() {
        // Each entry: a 1-byte key, a 1-byte tag and its body.
        let etags = etags(Duration::from_secs(60), usize::MAX, 30);
        etags.remember("a".into(), "1".into(), &[b' '; 10]);
        etags.remember("b".into(), "1".into(), &[b' '; 10]);
        assert_eq!(etags.entries.lock().bytes, 24);
        etags.remember("c".into(), "1".into(), &[b' '; 10]);
        assert_eq!(remembered(&etags), ["b", "c"]);
        assert_eq!(etags.entries.lock().bytes, 24);
        // One answer larger than the whole ceiling is not remembered, and evicts nothing.
        etags.remember("d".into(), "1".into(), &[b' '; 40]);
        assert_eq!(remembered(&etags), ["b", "c"]);
        // A smaller answer about the same object replaces the larger one's bytes.
        etags.remember("c".into(), "1".into(), b"{}");
        assert_eq!(etags.entries.lock().bytes, 12 + 4);
        etags.remember("b".into(), "1".into(), &[b' '; 40]);
        assert_eq!(
            remembered(&etags),
            ["c"],
            "the old answer about b is forgotten"
        );
        assert_eq!(etags.entries.lock().bytes, 4);
    }

    #[test]
    fn stale_answers_are_dropped_at_cleanup_and_tags_expire() {
        let etags = etags(Duration::from_millis(50), usize::MAX, usize::MAX);
        etags.remember("a".into(), "1".into(), b"{}");
        assert!(etags.fresh("a").is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(etags.fresh("a"), None, "expired");
        etags.remember("b".into(), "1".into(), b"{}");
        assert_eq!(remembered(&etags), ["b"]);
        assert_eq!(etags.entries.lock().bytes, 4);
    }

    #[test]
    fn an_etag_timeout_longer_than_an_hour_is_refused_when_the_hook_loads() {
        let with_timeout = |seconds| Webhook {
            etag: Some(Etag {
                enabled: Some(true),
                cache_timeout_seconds: Some(seconds),
                cache_cleanup_seconds: None,
            }),
            ..url("http://hooks/sync")
        };
        let hour = endpoint(with_timeout(3600)).unwrap();
        assert_eq!(hour.etags.unwrap().timeout, Duration::from_secs(3600));
        let error = endpoint(with_timeout(3601)).unwrap_err();
        assert!(
            error.ends_with(
                "webhook.etag.cacheTimeoutSeconds: 3601: at most 3600 (an hour), since every \
                 answer remembered is held in the operator's memory"
            ),
            "{error}"
        );
    }

    #[test]
    fn map_node_sizes_are_stds() {
        let read = |body: &'static str| move || serde_json::from_str::<Value>(body).unwrap();
        let leaf = read(r#"{"":0}"#);
        assert!(allocates_within(MAP_LEAF_BYTES, leaf));
        assert!(!allocates_within(MAP_LEAF_BYTES - 1, leaf));
        // Twelve one-letter keys: two leaves under an internal node, and the keys.
        let split =
            read(r#"{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0,"g":0,"h":0,"i":0,"j":0,"k":0,"l":0}"#);
        let bytes = 2 * MAP_LEAF_BYTES + MAP_INTERNAL_BYTES + 12;
        assert!(allocates_within(bytes, split));
        assert!(!allocates_within(bytes - 1, split));
    }

    /// The shapes of the bound's comment, 64 KiB each: each parse stays within the bound, and
    /// the bound within 2.5 times the parse.
    #[test]
    fn the_bound_covers_the_worst_shapes_and_stays_near_them() {
        let size = 64 << 10;
        let repeated = |item: &str| {
            let mut body = String::from("[");
            while body.len() < size {
                body.push_str(item);
                body.push(',');
            }
            body.push_str(item);
            body.push(']');
            body.into_bytes()
        };
        let nested = format!("{}0{}", "{\"\":".repeat(126), "}".repeat(126));
        let config_map = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c",
            "namespace":"team-a","labels":{"app":"web"}},"data":{"key":"some value"}}"#;
        for item in ["0", r#""a""#, "[0]", r#"{"":0}"#, &nested, config_map] {
            let body = repeated(item);
            let bound = parsed_size_bound(&body);
            let parse = || serde_json::from_slice::<Value>(&body).unwrap();
            assert!(allocates_within(bound, parse), "{item}: over its bound");
            assert!(
                !allocates_within(bound * 2 / 5, parse),
                "{item}: the bound is over 2.5 times the parse"
            );
        }
    }

    #[test]
    fn an_excerpt_reads_only_the_start_of_a_body() {
        let body = "word ".repeat(1 << 20);
        let mut kept = String::new();
        assert!(allocates_within(64 << 10, || kept = excerpt(body.as_bytes())));
        assert_eq!(kept.chars().count(), ERROR_BODY_CHARS + 1);
        assert!(kept.ends_with('…'));
        // Cut before a character, not inside it.
        let wide = "é".repeat(4 * ERROR_BODY_CHARS);
        let kept = excerpt(&wide.as_bytes()[..4 * ERROR_BODY_CHARS + 1]);
        assert!(!kept.contains('\u{FFFD}'), "{kept}");
        let spaced = format!("{}x", " ".repeat(4 * ERROR_BODY_CHARS));
        assert_eq!(
            excerpt(spaced.as_bytes()),
            "…",
            "more follows what was read"
        );
    }

    #[test]
    fn a_body_past_the_clients_limit_fails_unread_and_says_which_flag_sets_it() {
        let server = serve(|_| {
            (
                200,
                format!(r#"{{"labels": {{"a": "{}"}}}}"#, "x".repeat(2000)),
                Duration::ZERO,
            )
        });
        let client = WebhookClient::restricted(
            EgressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()], []),
            1024,
        );
        let error = call_through(&hooks(url(&server.url)), &client).unwrap_err();
        assert!(
            error.to_string().ends_with(
                "the response body is larger than 1024 bytes (metascript run \
                 --webhook-max-response-bytes)"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_body_the_script_memory_cannot_cover_is_refused_saying_what_to_change() {
        use crate::script::memory::PoolShort;
        let mib = 1 << 20;
        let never = WebhookFailure::NoMemory {
            body: 4 * mib,
            short: PoolShort {
                wanted: 600 * mib,
                free: 256 * mib,
                limit: 256 * mib,
            },
        };
        assert_eq!(
            never.to_string(),
            "reading the 4194304-byte response body as JSON takes up to 600.0 MiB of the \
             operator's script memory beyond the 4 MiB every call has (metascript run \
             --script-memory), more than all of it (256.0 MiB): the webhook must answer less, \
             or the operator's admin raise --script-memory"
        );
        let busy = WebhookFailure::NoMemory {
            body: mib,
            short: PoolShort {
                wanted: 20 * mib,
                free: 12 * mib,
                limit: 256 * mib,
            },
        };
        assert!(
            busy.to_string().ends_with(
                "and the calls running now leave only 12.0 of its 256.0 MiB: a later attempt \
                 may succeed; if this recurs, the operator's admin can raise --script-memory"
            ),
            "{busy}"
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

    /// Found by `hooks::tests::fuzz`: both read as "the body is not JSON", though they are JSON.
    #[test]
    fn a_body_too_deep_or_with_a_number_out_of_range_says_which() {
        let read =
            |body: &str| parse_response(decorator::SYNC, ResponseMode::Loose, body.as_bytes());
        let deepest = format!("{}{}", "[".repeat(127), "]".repeat(127));
        assert!(read(&deepest).is_ok());
        let deep = format!("{}{}", "[".repeat(128), "]".repeat(128));
        assert_eq!(
            read(&deep).unwrap_err().reason,
            "the body nests deeper than a response may (127 levels): recursion limit exceeded \
             at line 1 column 128"
        );
        assert_eq!(
            read(r#"{"resyncAfterSeconds": 1e400}"#).unwrap_err().reason,
            "the body holds a number beyond what a 64-bit float can: number out of range at \
             line 1 column 28"
        );
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
        WebhookClient::restricted(EgressPolicy::new(entries, []), DEFAULT_MAX_RESPONSE_BYTES)
    }

    fn call_through(hooks: &ControllerHooks, client: &WebhookClient) -> Result<Value, HookError> {
        let request = json!({"object": {"metadata": {"name": "web"}}, "finalizing": false});
        hooks
            .call_through(
                &ScriptEngine::new(),
                client,
                decorator::SYNC,
                (&request).into(),
                &Default::default(),
            )
            .0
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
