//! Log lines written by scripts (`log(...)`, Rhai `print`/`debug`, Lua `print`): always emitted
//! to tracing with the controller and hook, and optionally collected for the test harness.

use crate::api::{HookKind, Language};
use serde_json::{Map, Value};
use std::fmt;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub(crate) fn parse(level: &str) -> Option<LogLevel> {
        Some(match level.to_ascii_lowercase().as_str() {
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line logged by a script.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LogLine {
    pub level: LogLevel,
    pub message: String,
    /// Structured fields passed as the third argument of `log` (empty when none).
    pub fields: Map<String, Value>,
}

/// Collects the log lines of the calls it is passed to; cheap to clone (shared buffer).
#[derive(Clone, Debug, Default)]
pub struct LogSink(Arc<Mutex<Vec<LogLine>>>);

impl LogSink {
    pub(crate) fn new() -> LogSink {
        LogSink::default()
    }

    pub(crate) fn push(&self, line: LogLine) {
        // A poisoned buffer only means another call panicked mid-push; the lines are still valid.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }

    /// A copy of every line collected so far.
    pub(crate) fn lines(&self) -> Vec<LogLine> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Where a script's log line came from, for the tracing event.
pub(crate) struct LogTarget<'a> {
    pub controller: &'a str,
    pub hook: HookKind,
    pub language: Language,
    pub sink: Option<&'a LogSink>,
}

impl LogTarget<'_> {
    pub(super) fn emit(&self, line: LogLine) {
        let controller = self.controller;
        let hook = self.hook.as_str();
        let language = self.language.as_str();
        let fields = Value::Object(line.fields.clone());
        let message = line.message.as_str();
        // tracing needs the level at compile time, hence one arm per level.
        match line.level {
            LogLevel::Error => {
                tracing::error!(target: "metascript::script", controller, hook, language, %fields, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "metascript::script", controller, hook, language, %fields, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "metascript::script", controller, hook, language, %fields, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "metascript::script", controller, hook, language, %fields, "{message}")
            }
            LogLevel::Trace => {
                tracing::trace!(target: "metascript::script", controller, hook, language, %fields, "{message}")
            }
        }
        if let Some(sink) = self.sink {
            sink.push(line);
        }
    }
}
