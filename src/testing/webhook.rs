//! Webhook hooks on loopback, for tests, benchmarks and the demo: a small HTTP(S) server whose
//! answers come from a Rust function, and the service-per-pod example written as a webhook
//! service would write it (the counterpart of `scripts/service-per-pod/sync.rhai`).

use axum::body::Bytes;
use axum::http::{StatusCode, Uri};
use axum::response::IntoResponse;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A hook server's answer to one request.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    /// How long to wait before answering (a slow hook).
    pub delay: Duration,
    /// Response headers besides the content type.
    pub headers: Vec<(String, String)>,
}

impl Reply {
    pub fn json(value: &Value) -> Reply {
        Reply {
            status: 200,
            body: value.to_string(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    pub fn status(status: u16, body: impl Into<String>) -> Reply {
        Reply {
            status,
            body: body.into(),
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    pub fn after(self, delay: Duration) -> Reply {
        Reply { delay, ..self }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// One request as a handler sees it.
pub struct Call<'a> {
    pub path: &'a str,
    pub headers: &'a axum::http::HeaderMap,
    pub request: &'a Value,
}

impl Call<'_> {
    /// A request header's value, when it is there and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }
}

type Handler = dyn Fn(&Call) -> Reply + Send + Sync;

/// The requests a server answered: (path, request).
type Requests = Arc<Mutex<Vec<(String, Value)>>>;

#[derive(Debug, thiserror::Error)]
pub enum HookServerError {
    #[error("binding the hook server: {0}")]
    Io(#[from] std::io::Error),
    #[error("making the hook server's certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the hook server's certificate: {0}")]
    Tls(#[from] crate::admission::AdmissionError),
}

/// A server answering every POST with `handler(path, request)`, on its own thread and runtime
/// (so it answers whatever the caller's runtime is doing); stopped when dropped.
pub struct HookServer {
    address: SocketAddr,
    /// The CA that signed the server's certificate, when it serves HTTPS.
    ca_pem: Option<String>,
    /// Every request answered, for tests to inspect; `None` when not kept (a benchmark's
    /// thousands of requests would weigh on the memory it measures).
    requests: Option<Requests>,
    handle: axum_server::Handle<SocketAddr>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HookServer {
    /// Serves HTTP on a free loopback port, keeping every request.
    pub fn start(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Result<HookServer, HookServerError> {
        Self::serve(
            Arc::new(move |call: &Call| handler(call.path, call.request)),
            false,
            true,
        )
    }

    /// Serves HTTP, the handler seeing the request's headers too, keeping every request.
    pub fn start_with_headers(
        handler: impl Fn(&Call) -> Reply + Send + Sync + 'static,
    ) -> Result<HookServer, HookServerError> {
        Self::serve(Arc::new(handler), false, true)
    }

    /// Serves HTTP, keeping no request (benchmarks).
    pub fn start_unrecorded(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Result<HookServer, HookServerError> {
        Self::serve(
            Arc::new(move |call: &Call| handler(call.path, call.request)),
            false,
            false,
        )
    }

    /// Serves HTTPS with a certificate for 127.0.0.1 signed by a CA of its own ([`Self::ca_pem`]).
    pub fn start_tls(
        handler: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static,
    ) -> Result<HookServer, HookServerError> {
        Self::serve(
            Arc::new(move |call: &Call| handler(call.path, call.request)),
            true,
            true,
        )
    }

    /// Serves HTTPS as [`Self::start_tls`], the handler seeing the request's headers too.
    pub fn start_tls_with_headers(
        handler: impl Fn(&Call) -> Reply + Send + Sync + 'static,
    ) -> Result<HookServer, HookServerError> {
        Self::serve(Arc::new(handler), true, true)
    }

    fn serve(
        handler: Arc<Handler>,
        tls: bool,
        record: bool,
    ) -> Result<HookServer, HookServerError> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let (tls, ca_pem) = if tls {
            let cert = crate::admission::generate_serving_cert(&["127.0.0.1".to_string()])?;
            let config = crate::admission::server_config(&cert, None)?;
            (Some(Arc::new(config)), Some(cert.ca_pem))
        } else {
            (None, None)
        };
        let requests = record.then(|| Arc::new(Mutex::new(Vec::new())));
        let recorded = requests.clone();
        let app = axum::Router::new().fallback(
            move |uri: Uri, headers: axum::http::HeaderMap, body: Bytes| {
                let (handler, recorded) = (handler.clone(), recorded.clone());
                async move {
                    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
                        return (StatusCode::BAD_REQUEST, "the body is not JSON").into_response();
                    };
                    let path = uri.path().to_string();
                    let reply = handler(&Call {
                        path: &path,
                        headers: &headers,
                        request: &request,
                    });
                    if let Some(recorded) = &recorded {
                        recorded.lock().push((path, request));
                    }
                    tokio::time::sleep(reply.delay).await;
                    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
                    let mut response = (
                        status,
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        reply.body,
                    )
                        .into_response();
                    for (name, value) in &reply.headers {
                        if let (Ok(name), Ok(value)) = (
                            axum::http::HeaderName::try_from(name.as_str()),
                            axum::http::HeaderValue::try_from(value.as_str()),
                        ) {
                            response.headers_mut().insert(name, value);
                        }
                    }
                    response
                }
            },
        );
        let handle = axum_server::Handle::new();
        let serving = handle.clone();
        let thread = std::thread::Builder::new()
            .name("hook-server".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the hook server's runtime");
                runtime.block_on(async move {
                    let service = app.into_make_service();
                    let served = match tls {
                        Some(config) => {
                            let config = axum_server::tls_rustls::RustlsConfig::from_config(config);
                            match axum_server::tls_rustls::from_tcp_rustls(listener, config) {
                                Ok(server) => server.handle(serving).serve(service).await,
                                Err(error) => Err(error),
                            }
                        }
                        None => match axum_server::from_tcp(listener) {
                            Ok(server) => server.handle(serving).serve(service).await,
                            Err(error) => Err(error),
                        },
                    };
                    if let Err(error) = served {
                        tracing::error!(%error, "the hook server stopped");
                    }
                });
            })?;
        Ok(HookServer {
            address,
            ca_pem,
            requests,
            handle,
            thread: Some(thread),
        })
    }

    /// The URL of a path on this server, e.g. `url("/sync")`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.ca_pem.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}{path}", self.address)
    }

    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The requests answered so far on a path, oldest first (none when not kept).
    pub fn requests(&self, path: &str) -> Vec<Value> {
        let Some(requests) = &self.requests else {
            return Vec::new();
        };
        requests
            .lock()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, request)| request.clone())
            .collect()
    }
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A StatefulSet of `replicas` Pods asking service-per-pod for a Service per Pod on `ports`
/// (`port:targetPort` pairs, comma separated), as the tests and benchmarks of the example make
/// them. Its image is never pulled: no kubelet runs on the planes (kwok's Nodes run nothing).
pub fn service_per_pod_target(namespace: &str, name: &str, replicas: i64, ports: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {
            "name": name, "namespace": namespace,
            "annotations": {
                "service-per-pod-label": "statefulset.kubernetes.io/pod-name",
                "service-per-pod-ports": ports
            }
        },
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "example.invalid/web", "ports": [{"containerPort": 8080}]}]}
            }
        }
    })
}

/// The label service-per-pod puts on the StatefulSets it serves.
pub const SERVICE_PER_POD_MARKER: &str = "metascript.dev/service-per-pod";

/// The service-per-pod hook (sync, and finalize through the same handler, as the example's
/// controller uses it) as a webhook service implements it: the same answers as
/// `scripts/service-per-pod/sync.rhai`, except that the marker label is set to `marker`. An
/// error is what the service answers with HTTP 500.
pub fn service_per_pod(request: &Value, marker: &str) -> Result<Value, String> {
    let sts = &request["object"];
    if request["finalizing"] == true {
        let remaining = request["attachments"]["Service.v1"]
            .as_object()
            .is_some_and(|services| !services.is_empty());
        return Ok(if remaining {
            // Services are still being deleted: keep asking for none, and wait to be called again.
            json!({"attachments": [], "finalized": false})
        } else {
            json!({"labels": {SERVICE_PER_POD_MARKER: null}, "attachments": [], "finalized": true})
        });
    }
    let annotation = |key: &str| sts["metadata"]["annotations"][key].as_str();
    let (Some(pod_label), Some(port_spec)) = (
        annotation("service-per-pod-label"),
        annotation("service-per-pod-ports"),
    ) else {
        return Err(
            "the StatefulSet needs the service-per-pod-label and service-per-pod-ports annotations"
                .into(),
        );
    };
    let ports = port_spec
        .split(',')
        .map(|entry| {
            let invalid = || {
                format!("service-per-pod-ports: invalid entry '{entry}' (expected port:targetPort)")
            };
            // 1 to 65535, in decimal digits only.
            let port = |text: &str| {
                let text = text.trim();
                (!text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| text.parse::<u32>().ok())
                    .flatten()
                    .filter(|port| (1..=65535).contains(port))
                    .ok_or_else(invalid)
            };
            let (port_text, target_text) = entry.split_once(':').ok_or_else(invalid)?;
            if target_text.contains(':') {
                return Err(invalid());
            }
            let (port, target) = (port(port_text)?, port(target_text)?);
            Ok(json!({"name": format!("port-{port}"), "port": port, "targetPort": target}))
        })
        .collect::<Result<Vec<Value>, String>>()?;
    let name = sts["metadata"]["name"].as_str().unwrap_or_default();
    let replicas = sts["spec"]["replicas"].as_i64().unwrap_or(1);
    let services: Vec<Value> = (0..replicas)
        .map(|i| {
            let pod = format!("{name}-{i}");
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": pod, "namespace": sts["metadata"]["namespace"]},
                "spec": {"selector": {pod_label: pod}, "ports": ports},
            })
        })
        .collect();
    Ok(json!({"labels": {SERVICE_PER_POD_MARKER: marker}, "attachments": services}))
}
