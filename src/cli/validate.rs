//! `metascript validate`: the admission webhook's checks, offline, over manifest files.

use super::manifests;
use super::places::Places;
use crate::hooks::{ConfigMapLookup, ScriptsDir};
use crate::object;
use crate::schema::SchemaSource;
use crate::script::ScriptEngine;
use crate::validate::{self, Severity, Unchecked};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    /// Manifest files or directories: controllers, labelled ConfigMaps of scripts, and the
    /// CRDs and ConfigMaps the controllers need.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// A directory of hook scripts: a file named like a hook's ConfigMap key is used instead of
    /// that key (the same rule as `metascript run --scripts-dir`).
    #[arg(long)]
    pub scripts_dir: Option<PathBuf>,
}

/// Exit code 0 when nothing must be refused (warnings are printed), 1 when something would be
/// refused, 2 when the files cannot be read.
pub(super) fn run(args: ValidateArgs) -> ExitCode {
    let documents = match manifests::load_objects(&args.files) {
        Ok(documents) => documents,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let (resolver, schemas) = super::offline::given_types(&documents);
    let schemas: Arc<dyn SchemaSource> = Arc::new(schemas);
    let config_maps: Vec<Value> = documents
        .iter()
        .filter(|d| object::kind(&d.value) == "ConfigMap")
        .map(|d| d.value.clone())
        .collect();
    let local;
    let lookup: &dyn ConfigMapLookup = match args.scripts_dir {
        Some(dir) => {
            local = ScriptsDir {
                dir,
                fallback: &config_maps,
            };
            &local
        }
        None => &config_maps,
    };
    let engine = ScriptEngine::new();
    let mut places = Places::default();
    let mut tally = Tally::default();
    for document in &documents {
        let object = &document.value;
        let findings = validate::validate(&engine, &resolver, &schemas, lookup, object);
        let is_subject = object::api_version(object).starts_with("metascript.dev/")
            || object::label(object, validate::SCRIPTS_LABEL) == Some("true");
        tally.checked += usize::from(is_subject);
        for finding in findings {
            let severity = match finding.severity {
                Severity::Error => {
                    tally.errors += 1;
                    "error"
                }
                Severity::Warning => {
                    tally.warnings += 1;
                    "warning"
                }
            };
            if let Some(unchecked) = finding.unchecked {
                *tally.unchecked.entry(unchecked).or_default() += 1;
            }
            // A script's line is also given as the file's (`FILE:LINE:COLUMN`, which terminals
            // and editors open), with the script's own line in the message.
            let path = document.path.as_path();
            let place = finding
                .script
                .as_ref()
                .and_then(|spot| places.find([path], spot))
                .unwrap_or_else(|| path.display().to_string());
            println!(
                "{place} (document {}) {}/{}: {severity}: {finding}",
                document.index,
                object::kind(object),
                object::name(object),
            );
        }
    }
    println!("{}", tally.summary());
    if tally.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What the findings came to.
#[derive(Debug, Default)]
struct Tally {
    checked: usize,
    errors: usize,
    warnings: usize,
    /// The checks warnings said could not be made.
    unchecked: BTreeMap<Unchecked, usize>,
}

impl Tally {
    /// The last line: what "no errors" covers, never a check a warning said was not made (a
    /// hook that fails on every object still compiles, so it says no hook ran either).
    fn summary(&self) -> String {
        let counts = format!(
            "{} checked, {} error(s), {} warning(s)",
            self.checked, self.errors, self.warnings
        );
        let ran = "no hook ran on your objects (`metascript render` does that)";
        if self.errors > 0 {
            return format!("{counts}: the errors above would be refused at admission; {ran}");
        }
        let claims = [
            (Unchecked::Hook, "hooks compile"),
            (Unchecked::Types, "types resolve"),
            (Unchecked::Test, "spec.tests pass"),
        ];
        let holds: Vec<&str> = claims
            .iter()
            .filter(|(check, _)| !self.unchecked.contains_key(check))
            .map(|(_, claim)| *claim)
            .collect();
        let open: Vec<String> = self
            .unchecked
            .iter()
            .map(|(check, count)| match check {
                Unchecked::Hook => format!("{count} hook(s) whose script was not found"),
                Unchecked::Types => format!("{count} controller(s) whose types do not resolve"),
                Unchecked::Test => format!("{count} spec.tests case(s) not run"),
            })
            .collect();
        let mut line = counts;
        match holds.as_slice() {
            [] => {}
            [one] => line.push_str(&format!(": {one}")),
            [first @ .., last] => line.push_str(&format!(": {} and {last}", first.join(", "))),
        }
        if !open.is_empty() {
            let separator = if holds.is_empty() { ": " } else { "; " };
            line.push_str(&format!(
                "{separator}not checked (see the warnings): {}",
                open.join(", ")
            ));
        }
        format!("{line}; {ran}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(errors: usize, unchecked: &[Unchecked]) -> Tally {
        let mut tally = Tally {
            checked: 2,
            errors,
            warnings: unchecked.len(),
            ..Tally::default()
        };
        for check in unchecked {
            *tally.unchecked.entry(*check).or_default() += 1;
        }
        tally
    }

    #[test]
    fn the_summary_claims_only_what_was_checked() {
        assert_eq!(
            tally(0, &[]).summary(),
            "2 checked, 0 error(s), 0 warning(s): hooks compile, types resolve and spec.tests \
             pass; no hook ran on your objects (`metascript render` does that)"
        );
        let types = tally(0, &[Unchecked::Types]).summary();
        assert!(
            types.starts_with(
                "2 checked, 0 error(s), 1 warning(s): hooks compile and spec.tests pass; not \
                 checked (see the warnings): 1 controller(s) whose types do not resolve;"
            ),
            "{types}"
        );
        let all = tally(
            0,
            &[
                Unchecked::Hook,
                Unchecked::Types,
                Unchecked::Test,
                Unchecked::Test,
            ],
        )
        .summary();
        for claim in ["hooks compile", "types resolve", "spec.tests pass"] {
            assert!(!all.contains(claim), "{claim} in {all}");
        }
        assert!(all.contains("2 spec.tests case(s) not run"), "{all}");
        let refused = tally(1, &[]).summary();
        assert!(refused.contains("would be refused"), "{refused}");
        assert!(!refused.contains("hooks compile"), "{refused}");
    }
}
