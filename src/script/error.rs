//! The one error type of the script engines: what went wrong, and where (controller, hook,
//! language, origin, line, column and the offending source line), rendered as a message a user
//! can act on without digging through logs.

use super::ScriptOrigin;
use crate::api::{HookKind, Language};
use std::fmt;
use std::sync::Arc;

/// What kind of failure a [`ScriptError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptErrorKind {
    /// The script does not parse or compile.
    Compile,
    /// The script raised an error while running (including errors raised by helpers).
    Runtime,
    /// The script exceeded one of its budgets.
    Limit { limit: LimitKind },
    /// The request could not be handed to the script, or the script's value is not JSON
    /// (a function, NaN, a Lua table mixing list and map keys, ...).
    Conversion,
    /// The engine itself failed (a panic in a worker thread, a broken Lua state).
    Internal,
}

/// Which budget a script exceeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    Operations,
    Timeout,
    Memory,
    /// The operator-wide pool of script memory (`metascript run --script-memory`).
    ScriptMemory,
    StringSize,
    ArraySize,
    MapSize,
    CallDepth,
    /// The stack a Rhai call evaluates in (`stack::STACK_BUDGET`).
    Stack,
}

impl LimitKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LimitKind::Operations => "operations",
            LimitKind::Timeout => "timeout",
            LimitKind::Memory => "memory",
            LimitKind::ScriptMemory => "script memory",
            LimitKind::StringSize => "string size",
            LimitKind::ArraySize => "array size",
            LimitKind::MapSize => "map size",
            LimitKind::CallDepth => "call depth",
            LimitKind::Stack => "stack",
        }
    }
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A compile, runtime, limit or conversion error of one script, with everything needed to find
/// the offending line. `Display` is multi-line: a headline, then the source line with a caret.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct ScriptError {
    pub kind: ScriptErrorKind,
    /// The engine's message without position decorations, e.g. `unknown variable 'foo'`.
    pub message: String,
    /// The controller whose hook failed; unknown when compiling a script from a file.
    pub controller: Option<String>,
    pub hook: Option<HookKind>,
    pub language: Language,
    /// Shared with the compiled script; an `Arc` keeps the error small enough to pass around.
    pub origin: Arc<ScriptOrigin>,
    /// 1-based line in the script's source, when the engine reported one.
    pub line: Option<u32>,
    /// 1-based column; Rhai reports it, Luau only reports lines.
    pub column: Option<u32>,
    /// The text of `line`, shown under the headline.
    pub source_line: Option<String>,
}

impl ScriptError {
    pub(crate) fn new(
        kind: ScriptErrorKind,
        message: impl Into<String>,
        language: Language,
        origin: Arc<ScriptOrigin>,
    ) -> ScriptError {
        let (controller, hook) = match &*origin {
            ScriptOrigin::Inline { controller, hook } => (Some(controller.clone()), Some(*hook)),
            _ => (None, None),
        };
        ScriptError {
            kind,
            message: message.into(),
            controller,
            hook,
            language,
            origin,
            line: None,
            column: None,
            source_line: None,
        }
    }

    /// Names the controller and hook of the call that failed (they override what the origin
    /// implied: a ConfigMap script can serve several controllers).
    pub(crate) fn in_call(mut self, controller: &str, hook: HookKind) -> ScriptError {
        self.controller = Some(controller.to_string());
        self.hook = Some(hook);
        self
    }

    /// Records the position and copies the offending line out of `code`.
    pub(crate) fn at(mut self, code: &str, line: Option<u32>, column: Option<u32>) -> ScriptError {
        self.line = line.filter(|l| *l > 0);
        self.column = column.filter(|c| *c > 0 && self.line.is_some());
        self.source_line = self.line.and_then(|l| {
            code.lines()
                .nth(l as usize - 1)
                .map(|text| text.trim_end().to_string())
        });
        self
    }

    #[cfg(test)]
    pub(crate) fn limit(&self) -> Option<LimitKind> {
        match self.kind {
            ScriptErrorKind::Limit { limit } => Some(limit),
            _ => None,
        }
    }

    fn headline_kind(&self) -> &'static str {
        match self.kind {
            ScriptErrorKind::Compile => "syntax error",
            ScriptErrorKind::Runtime => "error",
            ScriptErrorKind::Limit { .. } => "limit exceeded",
            ScriptErrorKind::Conversion => "invalid value",
            ScriptErrorKind::Internal => "internal error",
        }
    }
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.headline_kind())?;
        match (&self.hook, &self.controller) {
            (Some(hook), Some(controller)) => {
                write!(f, " in hook {hook} of controller {controller}")?
            }
            (Some(hook), None) => write!(f, " in hook {hook}")?,
            (None, Some(controller)) => write!(f, " in controller {controller}")?,
            (None, None) => {}
        }
        write!(f, " ({}, {})", self.language, self.origin)?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
            if let Some(column) = self.column {
                write!(f, ", column {column}")?;
            }
        }
        write!(f, ": {}", self.message)?;
        // A ConfigMap's line is not quoted: the message reaches status, Events and admission
        // answers that people who may not read that ConfigMap can read, so it says where,
        // not what.
        let quotable = !matches!(*self.origin, ScriptOrigin::ConfigMap { .. });
        if let (Some(line), Some(text), true) = (self.line, &self.source_line, quotable) {
            let gutter = line.to_string();
            write!(f, "\n {gutter} | {text}")?;
            if let Some(column) = self.column {
                // Tabs keep their width so the caret lines up under the offending character.
                let pad: String = text
                    .chars()
                    .take(column as usize - 1)
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                write!(f, "\n {} | {pad}^", " ".repeat(gutter.len()))?;
            }
        }
        Ok(())
    }
}
