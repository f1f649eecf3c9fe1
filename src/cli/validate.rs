//! `metascript validate`: the admission webhook's checks, offline, over manifest files.

use super::manifests;
use super::places::Places;
use crate::hooks::{ConfigMapLookup, ScriptsDir};
use crate::object;
use crate::resources::StaticResolver;
use crate::script::ScriptEngine;
use crate::validate::{self, Severity};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
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
pub fn run(args: ValidateArgs) -> ExitCode {
    let documents = match manifests::load_objects(&args.files) {
        Ok(documents) => documents,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let mut resolver = StaticResolver::with_builtins();
    for document in &documents {
        if object::kind(&document.value) == "CustomResourceDefinition" {
            resolver.add_crd(&document.value);
        }
    }
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
    let (mut checked, mut errors, mut warnings) = (0, 0, 0);
    for document in &documents {
        let object = &document.value;
        let findings = validate::validate(&engine, &resolver, lookup, object);
        let is_subject = object::api_version(object).starts_with("metascript.dev/")
            || object::label(object, validate::SCRIPTS_LABEL) == Some("true");
        checked += usize::from(is_subject);
        for finding in findings {
            let severity = match finding.severity {
                Severity::Error => {
                    errors += 1;
                    "error"
                }
                Severity::Warning => {
                    warnings += 1;
                    "warning"
                }
            };
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
    // Say what "no errors" covers: a hook that fails on every object still compiles.
    println!(
        "{checked} checked, {errors} error(s), {warnings} warning(s): hooks compile, types \
         resolve and spec.tests pass; no hook ran on your objects (`metascript render` does that)"
    );
    if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
