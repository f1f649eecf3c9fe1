//! Where the operator's log lines and traces go: stderr, as text or JSON lines, and with
//! `--otlp-endpoint` the OpenTelemetry SDK exporting its traces ([`crate::telemetry`]) over
//! OTLP/HTTP in protobuf, in batches from a thread of its own.

use crate::telemetry;
use bytes::Bytes;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::time::Duration;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// What the OTLP/HTTP specification calls the traces path, below the collector's base URL.
const TRACES_PATH: &str = "/v1/traces";

/// The longest one export may take (the SDK's default): a collector that hangs costs the
/// batch, never a worker.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer of a collector read (it should be a few bytes).
const MAX_ANSWER_BYTES: u64 = 1 << 20;

/// Where traces go, and which.
#[derive(Clone, Debug)]
pub struct Traces {
    /// The collector's base URL (`http://collector:4318`), or its traces URL.
    pub endpoint: String,
    /// The share of work items traced, from 0 to 1.
    pub sample_ratio: f64,
    /// The replica's name (`service.instance.id`).
    pub instance: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceSetupError {
    #[error("--otlp-endpoint {url:?}: {why}")]
    Endpoint { url: String, why: String },
    #[error("--trace-sample-ratio {0}: a number from 0 to 1")]
    Ratio(f64),
    #[error("cannot start the trace exporter: {0}")]
    Exporter(String),
}

/// The traces' URL from the collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it:
/// `http://collector:4318`), or the traces URL itself when given.
fn traces_url(endpoint: &str) -> Result<String, TraceSetupError> {
    let wrong = |why: &str| TraceSetupError::Endpoint {
        url: without_credentials(endpoint),
        why: why.to_string(),
    };
    // It is logged and shown in errors; a collector's credentials go in OTEL_EXPORTER_OTLP_HEADERS.
    // Any `@` is taken for them: a password may hold `/`, `?` or `#`, which would otherwise
    // end the URL's authority before it.
    if endpoint.contains('@') {
        return Err(wrong(
            "credentials in the URL would be logged; give them as OTEL_EXPORTER_OTLP_HEADERS",
        ));
    }
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|error: http::uri::InvalidUri| wrong(&error.to_string()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(wrong("expected an http:// or https:// URL"));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(wrong("no host"));
    }
    if uri.query().is_some() {
        return Err(wrong("a query has no place in a collector's URL"));
    }
    let base = endpoint.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        Ok(base.to_string())
    } else {
        Ok(format!("{base}{TRACES_PATH}"))
    }
}

/// `endpoint` with everything from its scheme to its last `@` (a user and password, whatever
/// they hold) masked, for messages.
fn without_credentials(endpoint: &str) -> String {
    let Some(at) = endpoint.rfind('@') else {
        return endpoint.to_string();
    };
    let scheme = endpoint
        .find("://")
        .filter(|&end| end < at)
        .map_or("", |end| &endpoint[..end + 3]);
    format!("{scheme}***@{}", &endpoint[at + 1..])
}

/// `--trace-sample-ratio`: a share, from 0 to 1.
pub(crate) fn parse_ratio(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|ratio| (0.0..=1.0).contains(ratio))
        .ok_or_else(|| format!("{text:?} is not a number from 0 to 1"))
}

/// The sampler of `--trace-sample-ratio`: that share of work items, chosen by trace id; the
/// spans inside an item go with its root.
fn sampler(ratio: f64) -> Result<Sampler, TraceSetupError> {
    if !(0.0..=1.0).contains(&ratio) {
        return Err(TraceSetupError::Ratio(ratio));
    }
    Ok(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        ratio,
    ))))
}

/// The installed exporter: dropping it sends what is still batched and stops it.
pub struct TraceExporter {
    provider: SdkTracerProvider,
}

impl Drop for TraceExporter {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last traces may not have been sent");
        }
    }
}

/// Logs to stderr as `filter` (tracing's env-filter syntax) says, as JSON lines when `json`;
/// with `traces`, also exports the work's traces, and the log lines of a traced work item name
/// its trace. The exporter returned sends what is left when dropped. Once per process.
pub fn init(
    filter: &str,
    json: bool,
    traces: Option<Traces>,
) -> Result<Option<TraceExporter>, TraceSetupError> {
    let mut filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if traces.is_some() {
        // The work item's span (with its trace id) shows in every log line inside it, whatever
        // the level asked for.
        let directive = format!("{}=info", telemetry::TARGET);
        filter = filter.add_directive(directive.parse().expect("a valid directive"));
    }
    // Colours only for a terminal: a pod's log, a file or an editor's LSP log would show the
    // escape codes.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(colours)
        .with_writer(std::io::stderr);
    let lines = if json {
        lines.json().boxed()
    } else {
        lines.boxed()
    };
    let logging = tracing_subscriber::registry().with(lines.with_filter(filter));
    let Some(traces) = traces else {
        logging.init();
        return Ok(None);
    };
    let (exporter, layer) = install(&traces)?;
    // The trace spans only: what the log says inside them stays in the log (a webhook's answer
    // or a panic's message is for the operator's log alone), and the spans say what failed.
    let traced = tracing_subscriber::filter::Targets::new()
        .with_target(telemetry::TARGET, tracing::Level::INFO);
    logging.with(layer.with_filter(traced)).init();
    Ok(Some(exporter))
}

/// Starts the exporter `traces` says and turns tracing on; returns it with the `tracing` layer
/// that turns the spans into OpenTelemetry's.
fn install<S>(
    traces: &Traces,
) -> Result<
    (
        TraceExporter,
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::SdkTracer>,
    ),
    TraceSetupError,
>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let url = traces_url(&traces.endpoint)?;
    let sampler = sampler(traces.sample_ratio)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(UreqClient(crate::hooks::plain_agent(EXPORT_TIMEOUT)))
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|error| TraceSetupError::Exporter(error.to_string()))?;
    let mut resource = Resource::builder()
        .with_service_name("metascript")
        .with_attribute(KeyValue::new("service.version", crate::version::VERSION));
    if let Some(instance) = &traces.instance {
        resource =
            resource.with_attribute(KeyValue::new("service.instance.id", instance.to_string()));
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("metascript");
    telemetry::enable(tracer.clone());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // What a span is comes from its fields; where in the source it was made, on which
        // thread and how long it sat idle would only weigh every span down.
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        .with_level(false);
    Ok((TraceExporter { provider }, layer))
}

/// The SDK's HTTP client trait over the blocking `ureq` client the webhooks use: the batch
/// exporter runs on a thread of its own, where blocking is what it expects.
#[derive(Debug)]
struct UreqClient(ureq::Agent);

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let response = self
            .0
            .run(http::Request::from_parts(parts, body.to_vec()))?;
        let (parts, mut body) = response.into_parts();
        let answer = body.with_config().limit(MAX_ANSWER_BYTES).read_to_vec()?;
        Ok(http::Response::from_parts(parts, Bytes::from(answer)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_collectors_base_url_as_otel_exporter_otlp_endpoint_is() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://collector.example/otlp/").unwrap(),
            "https://collector.example/otlp/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/v1/traces").unwrap(),
            "http://collector:4318/v1/traces"
        );
        for (bad, why) in [
            ("collector:4318", "http://"),
            ("grpc://collector:4317", "http://"),
            ("http://", "http://"),
            ("http://:4318", "host"),
            ("http://collector:4318/?x=1", "query"),
            ("http://col lector", "invalid"),
        ] {
            let error = traces_url(bad).unwrap_err().to_string();
            assert!(error.contains(bad) && error.contains(why), "{bad}: {error}");
        }
        // Refused, and not repeated: the message is logged. A password may hold what ends an
        // authority, and a URL may lack its scheme.
        for (with_credentials, shown) in [
            (
                "https://user:secret@collector:4318/otlp",
                "https://***@collector:4318/otlp",
            ),
            ("user:secret@collector:4318", "***@collector:4318"),
            (
                "https://user:sec?ret@collector:4318",
                "https://***@collector:4318",
            ),
            (
                "https://user:sec/ret@collector:4318",
                "https://***@collector:4318",
            ),
            (
                "https://user:sec#ret@collector:4318",
                "https://***@collector:4318",
            ),
        ] {
            let error = traces_url(with_credentials).unwrap_err().to_string();
            assert!(
                error.contains(shown)
                    && error.contains("OTEL_EXPORTER_OTLP_HEADERS")
                    && !error.contains("sec"),
                "{with_credentials}: {error}"
            );
        }
    }

    #[test]
    fn the_sample_ratio_is_a_share() {
        assert_eq!(parse_ratio("0.01"), Ok(0.01));
        for bad in ["-0.1", "1.5", "NaN", "inf", "half"] {
            assert!(parse_ratio(bad).unwrap_err().contains(bad), "{bad}");
        }
        assert!(sampler(0.0).is_ok() && sampler(0.01).is_ok() && sampler(1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let error = sampler(bad).unwrap_err().to_string();
            assert!(error.contains("--trace-sample-ratio"), "{error}");
        }
    }
}
