//! Line coverage of scripts (`metascript test --coverage`): which lines can run and which did,
//! per script origin, gathered by an engine built with coverage on. A Rhai line counts when a
//! statement starts on it (the debugger reports every statement reached); a Luau line when the
//! compiler emitted code for it (Luau's own statement coverage, level 1).

use super::ScriptOrigin;
use crate::api::Language;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Component;
use std::sync::Mutex;

/// The lines of one script that can run, and those the calls reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LineCoverage {
    pub executable: BTreeSet<u32>,
    pub hit: BTreeSet<u32>,
}

impl LineCoverage {
    /// Executable lines no call reached.
    pub(crate) fn missed(&self) -> impl Iterator<Item = u32> + '_ {
        self.executable.difference(&self.hit).copied()
    }

    /// Lines reached, among the executable ones.
    pub(crate) fn hit_count(&self) -> usize {
        self.executable.intersection(&self.hit).count()
    }
}

/// The coverage of one script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScriptCoverage {
    pub origin: ScriptOrigin,
    /// Kept apart per language: a controller's Rhai and Lua flavours share their origin's name
    /// (`inline script of DecoratorController x hook sync`) but not their lines.
    pub language: Language,
    pub lines: LineCoverage,
}

/// What an engine with coverage on has gathered, by origin.
#[derive(Default)]
pub(crate) struct Recorder {
    scripts: Mutex<BTreeMap<String, ScriptCoverage>>,
}

impl Recorder {
    /// Adds what one call found; `executable` is only computed for a script seen first.
    pub(crate) fn record(
        &self,
        origin: &ScriptOrigin,
        language: Language,
        executable: impl FnOnce() -> BTreeSet<u32>,
        hit: BTreeSet<u32>,
    ) {
        let origin = counted_as(origin);
        let mut scripts = self.scripts.lock().unwrap_or_else(|e| e.into_inner());
        let entry = scripts
            .entry(format!("{origin} ({language})"))
            .or_insert_with(|| ScriptCoverage {
                origin,
                language,
                lines: LineCoverage {
                    executable: executable(),
                    hit: BTreeSet::new(),
                },
            });
        entry.lines.hit.extend(hit);
    }

    pub(crate) fn report(&self) -> Vec<ScriptCoverage> {
        let scripts = self.scripts.lock().unwrap_or_else(|e| e.into_inner());
        scripts.values().cloned().collect()
    }
}

/// The origin a script's lines are counted under. One file reached by two paths (`dir/./x.lua`
/// from a test's `scriptsDir: .`, `dir/x.lua` from another test's `script:`) is one script:
/// counted apart, each half showed as missed the lines only the other's tests reach.
fn counted_as(origin: &ScriptOrigin) -> ScriptOrigin {
    match origin {
        ScriptOrigin::File { path } => ScriptOrigin::File {
            path: path
                .components()
                .filter(|part| !matches!(part, Component::CurDir))
                .collect(),
        },
        other => other.clone(),
    }
}

thread_local! {
    /// Lines the running Rhai call reached, while coverage is gathered for it.
    static RHAI_HITS: RefCell<Option<BTreeSet<u32>>> = const { RefCell::new(None) };
}

/// Gathers the lines `run` reaches on this thread (Rhai's debugger reports them to [`hit`]).
pub(crate) fn gather<R>(run: impl FnOnce() -> R) -> (R, BTreeSet<u32>) {
    let previous = RHAI_HITS.with(|h| h.replace(Some(BTreeSet::new())));
    let result = run();
    let hits = RHAI_HITS.with(|h| h.replace(previous)).unwrap_or_default();
    (result, hits)
}

/// Records a line reached, if coverage is being gathered on this thread.
pub(crate) fn hit(line: u32) {
    RHAI_HITS.with(|h| {
        if let Some(hits) = h.borrow_mut().as_mut() {
            hits.insert(line);
        }
    });
}

/// `lcov` tracefile text (`SF`, `DA`, `LF`, `LH` per script); `name` gives each script's file.
pub(crate) fn lcov(scripts: &[ScriptCoverage], name: impl Fn(&ScriptOrigin) -> String) -> String {
    let mut out = String::new();
    for script in scripts {
        out.push_str("TN:\n");
        out.push_str(&format!("SF:{}\n", name(&script.origin)));
        for line in &script.lines.executable {
            let count = u32::from(script.lines.hit.contains(line));
            out.push_str(&format!("DA:{line},{count}\n"));
        }
        out.push_str(&format!(
            "LF:{}\nLH:{}\nend_of_record\n",
            script.lines.executable.len(),
            script.lines.hit_count()
        ));
    }
    out
}
