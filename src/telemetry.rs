//! Traces of the operator's work for OpenTelemetry (`--otlp-endpoint`): one trace per work item,
//! from the moment it was ready, with its queue wait, the worker's run, and inside that each hook
//! call, each `get` and `list` a script made and each API write.
//!
//! Off unless an exporter is installed ([`enable`], by `metascript run --otlp-endpoint`), and
//! then only a sampled work item makes spans: with tracing off nothing here does more than read
//! one flag, and at a low sample ratio an item not sampled costs one sampler decision. A span
//! inside an item is made with [`span!`], which gives `Span::none()` outside a traced item, so
//! the hooks, reads and writes need not know whether they are traced.

use opentelemetry::trace::{Span as _, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The target of every span made here: the log filter shows them (so a log line inside a
/// traced item names its trace) and the exporter takes only them.
pub const TARGET: &str = "metascript::trace";

/// The tracer of the installed exporter; unset while tracing is off.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();

/// Whether an exporter is installed.
pub(crate) fn on() -> bool {
    TRACER.get().is_some()
}

/// Turns tracing on for the process, with the tracer of the installed exporter (whose
/// `tracing` layer must take the spans of [`TARGET`]). Once: a second call changes nothing.
pub fn enable(tracer: SdkTracer) {
    let _ = TRACER.set(tracer);
}

/// The longest text an attribute carries: names and selectors come from scripts.
const MAX_ATTRIBUTE_BYTES: usize = 256;

/// How many `get`/`list` spans one hook call makes; the reads past them are counted on the
/// call's span (`reads_untraced`). A script's loop of reads would otherwise fill the exporter's
/// queue, dropping every team's spans.
pub(crate) const MAX_READ_SPANS: u32 = 32;

thread_local! {
    /// The running hook call's read spans still allowed, and its reads left without one (the
    /// call and its reads share a thread).
    static READ_SPANS: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// The span the running code is in when that is a traced work item's, to carry into another
/// thread; none otherwise.
pub fn current_span() -> tracing::Span {
    if traced() {
        tracing::Span::current()
    } else {
        tracing::Span::none()
    }
}

/// Whether the running code is inside a traced work item: the span it is in is one of ours
/// (not some library's span a log filter enabled, whose children would be roots of their own).
pub fn traced() -> bool {
    on() && tracing::Span::current()
        .metadata()
        .is_some_and(|span| span.target() == TARGET)
}

/// `text` cut to at most [`MAX_ATTRIBUTE_BYTES`] (at a character boundary), for an attribute.
pub(crate) fn bounded(text: &str) -> &str {
    if text.len() <= MAX_ATTRIBUTE_BYTES {
        return text;
    }
    let mut end = MAX_ATTRIBUTE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Starts counting the read spans of a hook call on this thread.
pub(crate) fn begin_call() {
    READ_SPANS.with(|reads| reads.set((MAX_READ_SPANS, 0)));
}

/// Whether a read of the running call may have a span (spending one of the call's).
pub(crate) fn take_read_span() -> bool {
    on() && READ_SPANS.with(spend_read_span)
}

fn spend_read_span(reads: &std::cell::Cell<(u32, u32)>) -> bool {
    match reads.get() {
        (0, untraced) => {
            reads.set((0, untraced.saturating_add(1)));
            false
        }
        (left, untraced) => {
            reads.set((left - 1, untraced));
            true
        }
    }
}

/// The reads of the running call left without a span; stops counting.
pub(crate) fn end_call() -> u32 {
    READ_SPANS.with(|reads| reads.replace((0, 0)).1)
}

/// A span of the traced work item the code runs in (a child of the current span), or
/// `Span::none()` outside one. Arguments as `tracing::info_span!`'s after the target.
macro_rules! span {
    ($name:expr $(, $($fields:tt)*)?) => {
        if $crate::telemetry::traced() {
            tracing::info_span!(target: "metascript::trace", $name $(, $($fields)*)?)
        } else {
            tracing::Span::none()
        }
    };
}
pub(crate) use span;

/// Marks a span failed, with why (shown as the span's status; nothing when not traced).
pub(crate) fn fail(span: &tracing::Span, why: &dyn std::fmt::Display) {
    if !span.is_none() {
        span.set_status(opentelemetry::trace::Status::error(why.to_string()));
    }
}

/// Marks the span the running code is in failed, with why (nothing outside a traced item).
pub(crate) fn fail_current(why: &dyn std::fmt::Display) {
    if on() {
        fail(&tracing::Span::current(), why);
    }
}

/// The trace of one work item while it runs: its root span started when the item was ready,
/// ended when this is dropped.
pub struct ItemTrace {
    context: Context,
}

impl ItemTrace {
    /// Starts the trace of a work item a worker took after it `waited` (its root, named `name`,
    /// and the root's first child, the queue wait); `None` when tracing is off or the sampler
    /// leaves the item out. `attributes` are asked for only when it is sampled.
    pub fn begin(
        name: &'static str,
        waited: Duration,
        attributes: impl FnOnce() -> Vec<(&'static str, String)>,
    ) -> Option<ItemTrace> {
        let tracer = TRACER.get()?;
        let now = SystemTime::now();
        let ready = now.checked_sub(waited).unwrap_or(now);
        let mut root = tracer
            .span_builder(name)
            .with_start_time(ready)
            .start_with_context(tracer, &Context::new());
        if !root.span_context().is_sampled() {
            return None;
        }
        root.set_attributes(
            attributes()
                .into_iter()
                .map(|(key, value)| KeyValue::new(key, value)),
        );
        let context = Context::new().with_span(root);
        tracer
            .span_builder("queue wait")
            .with_start_time(ready)
            .start_with_context(tracer, &context)
            .end_with_timestamp(now);
        Some(ItemTrace { context })
    }

    /// The trace id, as the W3C trace context writes it (32 hex digits).
    pub fn trace_id(&self) -> String {
        self.context.span().span_context().trace_id().to_string()
    }

    /// Makes `span` (the worker's run of the item) a child of the item's root.
    pub fn adopt(&self, span: &tracing::Span) {
        if let Err(error) = span.set_parent(self.context.clone()) {
            tracing::debug!(%error, "a work item's span is not part of its trace");
        }
    }

    /// Marks the whole item failed, with why.
    pub fn fail(&self, why: &dyn std::fmt::Display) {
        self.context
            .span()
            .set_status(opentelemetry::trace::Status::error(why.to_string()));
    }
}

impl Drop for ItemTrace {
    fn drop(&mut self) {
        self.context.span().end();
    }
}

/// The ids of the span the code runs in, when it is a traced work item's.
fn current_ids() -> Option<opentelemetry::trace::SpanContext> {
    if !traced() {
        return None;
    }
    let context = tracing::Span::current().context();
    let ids = context.span().span_context().clone();
    (ids.is_valid() && ids.is_sampled()).then_some(ids)
}

/// The trace id of the traced work item the code runs in, when there is one (for the Events it
/// publishes).
pub(crate) fn current_trace_id() -> Option<String> {
    current_ids().map(|ids| ids.trace_id().to_string())
}

/// The W3C `traceparent` header naming the span the code runs in, when it is a traced work
/// item's: sent with a webhook call, the webhook's own spans join the item's trace.
pub(crate) fn traceparent() -> Option<String> {
    current_ids().map(|ids| {
        format!(
            "00-{}-{}-{:02x}",
            ids.trace_id(),
            ids.span_id(),
            ids.trace_flags().to_u8()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_makes_its_first_read_spans_and_counts_the_rest() {
        begin_call();
        let spent = (0..MAX_READ_SPANS + 8)
            .filter(|_| READ_SPANS.with(spend_read_span))
            .count();
        assert_eq!(spent, MAX_READ_SPANS as usize);
        assert_eq!(end_call(), 8);
        assert_eq!(end_call(), 0, "counting stopped");
        assert!(!take_read_span(), "tracing is off in unit tests");
    }

    #[test]
    fn attributes_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("reader"), "reader");
        let long = "é".repeat(200);
        let cut = bounded(&long);
        assert!(cut.len() <= MAX_ATTRIBUTE_BYTES && long.starts_with(cut));
        assert_eq!(cut.len(), MAX_ATTRIBUTE_BYTES);
    }
}
