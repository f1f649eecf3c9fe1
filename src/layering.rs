//! The crate's layers (see the table in `lib.rs`), kept by reading the source: every
//! `use crate::…` and `crate::…` path outside test code must name a layer below the module's own.

use std::path::Path;

/// The top-level modules from the bottom up; a module may use only those before it.
const LAYERS: &[&str] = &[
    "object",
    "reasons",
    "version",
    "selector",
    "yaml",
    "api",
    "tenancy",
    "resources",
    "store",
    "reads",
    "script",
    "hooks",
    "plan",
    "cases",
    "runtime",
    "kinds",
    "validate",
    "lsp",
    "admission",
    "cli",
    "testing",
];

/// The top-level modules a file's non-test code names with `crate::`.
fn crate_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        // Test modules sit at the end of a file, after their `#[cfg(test)]`.
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let after = &rest[at + "crate::".len()..];
            let preceded_by_ident = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            if !preceded_by_ident {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push(name);
                }
                // `use crate::{a, b::c}`
                if let Some(group) = after.strip_prefix('{') {
                    let group = group.split('}').next().unwrap_or_default();
                    found.extend(
                        group
                            .split(',')
                            .map(|item| item.trim().split("::").next().unwrap_or_default())
                            .filter(|name| !name.is_empty())
                            .map(str::to_string),
                    );
                }
            }
            rest = after;
        }
    }
    found
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            // Test-only modules (`tests/`) may reach anywhere.
            if path.file_name().is_some_and(|n| n != "tests") {
                visit(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn no_module_uses_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut upward = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let stem = relative.file_stem().unwrap().to_string_lossy();
        if matches!(top.as_str(), "lib" | "main" | "layering" | "fuzzing")
            || stem == "tests"
            || stem.ends_with("_tests")
        {
            continue;
        }
        let Some(own) = LAYERS.iter().position(|layer| *layer == top) else {
            upward.push(format!(
                "{}: the module {top} is not in LAYERS",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for used in crate_paths(&text) {
            match LAYERS.iter().position(|layer| *layer == used) {
                Some(layer) if layer > own => upward.push(format!(
                    "{}: {top} uses crate::{used}, a layer above it",
                    relative.display()
                )),
                Some(_) => {}
                None => upward.push(format!(
                    "{}: crate::{used} is not a layer",
                    relative.display()
                )),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports going up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_finds_every_form_of_crate_path() {
    let text = "use crate::api::Hook;\nuse crate::{object, plan::Plan};\nlet x = crate::kinds::ALL; // crate::cli\nfoo_crate::bar;\n#[cfg(test)]\nuse crate::testing;";
    assert_eq!(crate_paths(text), ["api", "object", "plan", "kinds"]);
}
