//! Logs and traces.
//!
//! Logs: `tracing` to stderr (stdout stays free for protocol frames), JSON unless stderr is
//! a terminal. `GATEWAY_LOG` (or `RUST_LOG`) overrides the configured filter.
//!
//! Traces: when an OTLP endpoint is configured (`telemetry.otlp_endpoint`, else the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), the gateway's own
//! `tracing` spans (target `gateway*`, level info and up, whatever the log filter says) become
//! OpenTelemetry spans exported over OTLP HTTP/protobuf. This is the only module that knows
//! OpenTelemetry: the rest of the gateway carries trace context as opaque W3C strings
//! (`gateway_core::trace`), which this module reads from and adopts into spans.
//!
//! Why exporting never slows a turn: a finished span is handed to the batch processor with a
//! non-blocking send into a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default); when
//! the queue is full the span is dropped. Export runs on the processor's own thread with its
//! own HTTP client and timeout, so a slow or dead collector only loses spans.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

use gateway_core::trace::{Propagation, TraceContext};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogConfig;

/// How long shutdown waits for the last spans to be exported.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// `[telemetry]`: OpenTelemetry traces.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TelemetryConfig {
    /// The OTLP HTTP endpoint's base URL (e.g. `http://collector:4318`); spans are posted to
    /// `<base>/v1/traces`. Unset: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) if set, else no traces.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of this gateway's spans. Unset: `OTEL_SERVICE_NAME`, else `gateway`.
    pub service_name: Option<String>,
}

impl TelemetryConfig {
    /// Whether traces are exported, and where: `Some(Some(url))` for the configured base,
    /// `Some(None)` for the standard environment variables.
    fn endpoint(&self) -> Option<Option<String>> {
        if let Some(base) = self.otlp_endpoint.as_deref().filter(|s| !s.is_empty()) {
            return Some(Some(format!("{}/v1/traces", base.trim_end_matches('/'))));
        }
        let set = |v: &str| std::env::var(v).is_ok_and(|s| !s.is_empty());
        (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")).then_some(None)
    }

    fn service_name(&self) -> String {
        self.service_name
            .clone()
            .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "gateway".into())
    }
}

/// What [`init`] started and [`Telemetry::shutdown`] must stop: the trace exporter, if on.
#[must_use = "call shutdown() after the runtime stops, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still queued and stops the exporter's thread (waiting at most
    /// [`SHUTDOWN_GRACE`]: a dead collector must not hold the process). Called once the
    /// runtime has stopped, outside it (the export is a blocking call).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown_with_timeout(SHUTDOWN_GRACE)
        {
            tracing::warn!(error = %e, "could not export the last spans");
        }
    }
}

/// Installs logging and, when configured, tracing. Must run outside the async runtime (the
/// exporter's blocking HTTP client is built here).
pub fn init(log: &LogConfig, telemetry: &TelemetryConfig) -> Telemetry {
    let filter =
        std::env::var("GATEWAY_LOG").or_else(|_| std::env::var("RUST_LOG")).unwrap_or_else(|_| log.level.clone());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match log.format.as_str() {
        "json" => true,
        "text" => false,
        _ => !std::io::stderr().is_terminal(),
    };
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = if json { logs.json().flatten_event(true).boxed() } else { logs.boxed() };
    let (provider, failed) = match telemetry.endpoint().map(|endpoint| provider(endpoint, telemetry.service_name())) {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let traces = provider.as_ref().map(|p| {
        // The gateway's own spans only: a dependency's spans (a connection pool's, an HTTP
        // library's) would bury them.
        let ours = Targets::new().with_target("gateway", LevelFilter::INFO);
        tracing_opentelemetry::layer().with_tracer(p.tracer("gateway")).with_filter(ours)
    });
    // A second initialisation (tests calling twice) is harmless: keep the first.
    let _ = tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).try_init();
    if let Some(e) = failed {
        tracing::warn!(error = %e, "cannot export traces; continuing without them");
    }
    if provider.is_some() {
        gateway_core::trace::install(Box::new(W3c(TraceContextPropagator::new())));
        tracing::info!(service = %telemetry.service_name(), "exporting traces over OTLP");
    }
    Telemetry { provider }
}

fn provider(endpoint: Option<String>, service_name: String) -> Result<SdkTracerProvider, String> {
    let mut exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(endpoint) = endpoint {
        exporter = exporter.with_endpoint(endpoint);
    }
    let exporter = exporter.build().map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service_name).build();
    // The sampler is the SDK's: parent-based, always on for new traces, unless
    // `OTEL_TRACES_SAMPLER` says otherwise.
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

/// W3C Trace Context between the gateway's opaque strings and OpenTelemetry's context.
struct W3c(TraceContextPropagator);

impl Propagation for W3c {
    fn current(&self) -> Option<TraceContext> {
        let cx = tracing::Span::current().context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut headers = HashMap::new();
        self.0.inject_context(&cx, &mut headers);
        TraceContext::from_headers(headers.get("traceparent")?, headers.get("tracestate").map(String::as_str))
    }

    fn adopt(&self, span: &tracing::Span, parent: &TraceContext) {
        let headers: HashMap<String, String> =
            parent.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect();
        let cx = self.0.extract(&headers);
        // An unparseable `traceparent` extracts to no span: the span starts a trace of its own.
        if cx.span().span_context().is_valid() {
            let _ = span.set_parent(cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_are_off_unless_an_endpoint_is_configured() {
        // The environment of the test process has no OTEL_EXPORTER_OTLP_* variables.
        if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        {
            return;
        }
        let cases: &[(Option<&str>, Option<Option<&str>>)] = &[
            (None, None),
            (Some(""), None),
            (Some("http://collector:4318"), Some(Some("http://collector:4318/v1/traces"))),
            (Some("http://collector:4318/"), Some(Some("http://collector:4318/v1/traces"))),
        ];
        for (configured, want) in cases {
            let config = TelemetryConfig { otlp_endpoint: configured.map(Into::into), service_name: None };
            assert_eq!(config.endpoint(), want.map(|w| w.map(String::from)), "{configured:?}");
        }
    }
}
