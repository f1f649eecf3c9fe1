//! Problems in an open file, at their places in it: a manifest is checked by [`validate`] (the
//! checks of `metascript validate` and admission: scripts compile, types resolve, `spec.tests`
//! pass), and each finding is put where it is, inside an inline script when it is about one; a
//! script file is compiled. Also the YAML comment that swallowed a Rhai map literal, where it is.

use super::scripts::{Manifest, Script};
use crate::api::Language;
use crate::hooks::{ConfigMapLookup, ScriptsDir};
use crate::object;
use crate::resources::StaticResolver;
use crate::schema::{SchemaSource, Schemas};
use crate::script::{
    ScriptEngine, ScriptOrigin, ScriptSource, YAML_COMMENT_HINT, misspelled_helpers,
};
use crate::validate::{self, Finding, ScriptSpot, Severity};
use crate::yaml::{Position, Range};
use serde_json::Value;
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

/// One problem, where it is in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct FileProblem {
    pub range: Range,
    pub severity: Severity,
    pub message: String,
}

/// What checks read besides the file: the types and ConfigMaps of the workspace.
pub(super) struct Checks<'a> {
    pub engine: &'a ScriptEngine,
    /// Built-in types and the CustomResourceDefinitions of the workspace and the cluster.
    pub resolver: &'a StaticResolver,
    /// The workspace's ConfigMaps.
    pub config_maps: &'a [Value],
    /// The manifest's directory: a file there named like a `configMapRef` key is the script, as
    /// `metascript test` (`scriptsDir: .`) and `render --scripts-dir` read it.
    pub dir: Option<&'a Path>,
}

/// The problems of a manifest.
pub(super) fn manifest(checks: &Checks, text: &str) -> Vec<FileProblem> {
    let manifest = match Manifest::parse(text) {
        Ok(manifest) => manifest,
        Err(unreadable) => {
            return vec![FileProblem {
                range: Range {
                    start: unreadable.at,
                    end: unreadable.at,
                },
                severity: Severity::Error,
                message: unreadable.message,
            }];
        }
    };
    let scripts = manifest.scripts();
    // The file's own types and ConfigMaps come first: they are what the user is editing. The
    // workspace's resolver, which may hold a whole cluster's types, is copied only when the file
    // adds to it.
    let mut resolver = Cow::Borrowed(checks.resolver);
    let mut config_maps: Vec<Value> = Vec::new();
    let schemas = Schemas::with_builtins();
    for (_, value) in &manifest.documents {
        match object::kind(value) {
            "CustomResourceDefinition" => {
                resolver.to_mut().add_crd(value);
                schemas.add_crd(value);
            }
            "ConfigMap" => config_maps.push(value.clone()),
            _ => {}
        }
    }
    config_maps.extend(checks.config_maps.iter().cloned());
    let beside = checks.dir.map(|dir| ScriptsDir {
        dir: dir.to_path_buf(),
        fallback: &config_maps,
    });
    let lookup: &dyn ConfigMapLookup = match &beside {
        Some(beside) => beside,
        None => &config_maps,
    };
    let schemas: Arc<dyn SchemaSource> = Arc::new(schemas);
    let mut problems = Vec::new();
    for (document, (_, value)) in manifest.documents.iter().enumerate() {
        for finding in validate::validate(checks.engine, &*resolver, &schemas, lookup, value) {
            problems.push(place(&manifest, &scripts, document, finding));
        }
    }
    problems.extend(comment_traps(&manifest, &scripts));
    problems
}

/// The problems of a script file: it compiles, and calls no misspelled helper (which only a
/// run would otherwise find, and a script file has no `spec.tests` of its own).
pub(super) fn script_file(
    engine: &ScriptEngine,
    path: &Path,
    language: Language,
    text: &str,
) -> Vec<FileProblem> {
    let source = ScriptSource::new(
        language,
        text,
        ScriptOrigin::File {
            path: path.to_path_buf(),
        },
    );
    let Err(error) = engine.compile(&source) else {
        return misspelled_helpers(language, text)
            .into_iter()
            .map(|misspelled| {
                let line = misspelled.line.saturating_sub(1);
                let line_text = text.lines().nth(line as usize).unwrap_or_default();
                FileProblem {
                    range: word_at(
                        line_text,
                        Position {
                            line,
                            column: misspelled.column.saturating_sub(1),
                        },
                    ),
                    severity: Severity::Warning,
                    message: misspelled.to_string(),
                }
            })
            .collect();
    };
    let line = error.line.unwrap_or(1).saturating_sub(1);
    let line_text = text.lines().nth(line as usize).unwrap_or_default();
    let start = match error.column {
        Some(column) => column.saturating_sub(1),
        None => first_non_blank(line_text),
    };
    vec![FileProblem {
        range: word_at(
            line_text,
            Position {
                line,
                column: start,
            },
        ),
        severity: Severity::Error,
        message: without_excerpt(&error.to_string()),
    }]
}

/// Where a place in a script is in an open file: a manifest holding the script, or the script's
/// own file.
pub(super) fn spot_range(
    text: &str,
    file: &Path,
    manifest: bool,
    spot: &ScriptSpot,
) -> Option<Range> {
    if manifest {
        let parsed = Manifest::parse(text).ok()?;
        return in_script(&parsed, &parsed.scripts(), spot);
    }
    let ScriptOrigin::File { path } = &spot.origin else {
        return None;
    };
    if path != file && path.canonicalize().ok() != file.canonicalize().ok() {
        return None;
    }
    let line = spot.line.unwrap_or(1).saturating_sub(1);
    let line_text = text.lines().nth(line as usize).unwrap_or_default();
    let column = spot
        .column
        .map_or_else(|| first_non_blank(line_text), |c| c.saturating_sub(1));
    Some(word_at(line_text, Position { line, column }))
}

/// Where a finding goes: at its place in a script of this file when it has one, else at the
/// field it names.
fn place(
    manifest: &Manifest,
    scripts: &[Script],
    document: usize,
    finding: Finding,
) -> FileProblem {
    let range = finding
        .script
        .as_ref()
        .and_then(|spot| in_script(manifest, scripts, spot))
        .or_else(|| at_field(manifest, document, &finding.path))
        .unwrap_or_default();
    FileProblem {
        range,
        severity: finding.severity,
        message: without_excerpt(&finding.to_string()),
    }
}

/// The range a spot in a script of this file is at.
fn in_script(manifest: &Manifest, scripts: &[Script], spot: &ScriptSpot) -> Option<Range> {
    let script = manifest.script_of(scripts, &spot.origin)?;
    let node = manifest.node(script.document, &script.path)?;
    let text = manifest.text(script);
    let (line, column) = match (spot.line, &spot.name) {
        (Some(line), _) => (line, spot.column),
        (None, Some(name)) => match find_word(text, name) {
            Some((line, column)) => (line, Some(column)),
            None => (1, None),
        },
        (None, None) => (1, None),
    };
    let at = manifest.index.file_position(node, line, column)?;
    let line_text = manifest.index.line_text(at.line);
    Some(match column {
        Some(_) => word_at(&line_text, at),
        None => Range {
            start: at,
            end: Position {
                line: at.line,
                column: line_text.trim_end().chars().count() as u32,
            },
        },
    })
}

/// The range of the field a finding names (`spec.hooks.sync`, `spec.tests[1] (its name)`):
/// its key, or the first line of its value.
fn at_field(manifest: &Manifest, document: usize, path: &str) -> Option<Range> {
    let path = path.split(" (").next().unwrap_or(path);
    let node = manifest
        .node(document, path)
        .or_else(|| manifest.node(document, ""))?;
    Some(
        node.key.unwrap_or(Range {
            start: node.value.start,
            end: Position {
                line: node.value.start.line,
                column: manifest
                    .index
                    .line_text(node.value.start.line)
                    .trim_end()
                    .chars()
                    .count() as u32,
            },
        }),
    )
}

/// A `#{` line that YAML read as a comment after a Rhai script: the script lost it.
fn comment_traps(manifest: &Manifest, scripts: &[Script]) -> Vec<FileProblem> {
    let mut problems = Vec::new();
    for script in scripts.iter().filter(|s| s.language == Language::Rhai) {
        let Some(node) = manifest.node(script.document, &script.path) else {
            continue;
        };
        let (number, _) = manifest.documents[script.document];
        let document = &manifest.index.documents()[number];
        for comment in document.comments_after(node) {
            if comment.text.starts_with('{') {
                problems.push(FileProblem {
                    range: comment.range,
                    severity: Severity::Warning,
                    message: format!(
                        "this `#{{` is a YAML comment, not part of the script above it: \
                         {YAML_COMMENT_HINT}"
                    ),
                });
            }
        }
    }
    problems
}

/// A script error's message without the source excerpt under it (`12 | code` and a caret):
/// the editor shows the place itself.
pub(super) fn without_excerpt(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .filter(|line| {
            let trimmed = line.trim_start();
            let after_number = trimmed
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim_start();
            !(after_number.starts_with("| ") || after_number == "|")
        })
        .collect();
    kept.join("\n")
}

/// The 1-based line and column of the first use of `name` as a whole word in `text`.
fn find_word(text: &str, name: &str) -> Option<(u32, u32)> {
    for (index, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let wanted: Vec<char> = name.chars().collect();
        for start in 0..chars.len() {
            let end = start + wanted.len();
            if end <= chars.len()
                && chars[start..end] == wanted[..]
                && (start == 0 || !is_word(chars[start - 1]))
                && chars.get(end).is_none_or(|c| !is_word(*c))
            {
                return Some((index as u32 + 1, start as u32 + 1));
            }
        }
    }
    None
}

pub(super) fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn first_non_blank(line: &str) -> u32 {
    line.chars().take_while(|c| c.is_whitespace()).count() as u32
}

/// The word that starts at `at` (one character when none does).
fn word_at(line: &str, at: Position) -> Range {
    let length = line
        .chars()
        .skip(at.column as usize)
        .take_while(|c| is_word(*c))
        .count()
        .max(1) as u32;
    Range {
        start: at,
        end: Position {
            line: at.line,
            column: at.column + length,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Vec<FileProblem> {
        let engine = ScriptEngine::new();
        let resolver = StaticResolver::with_builtins();
        manifest(
            &Checks {
                engine: &engine,
                resolver: &resolver,
                config_maps: &[],
                dir: None,
            },
            text,
        )
    }

    fn at(line: u32, column: u32) -> Position {
        Position { line, column }
    }

    fn decorator(sync: &str, tests: &str) -> String {
        format!(
            "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {{name: labeller}}
spec:
  resources: [{{apiVersion: v1, resource: configmaps}}]
  hooks:
    sync:
      script:
        language: rhai
        inline: |
{sync}
  tests:{tests}
"
        )
    }

    #[test]
    fn a_syntax_error_is_at_its_place_in_the_yaml() {
        let problems = check(&decorator(
            "          let x = 1;\n          let y = ;",
            " []",
        ));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].severity, Severity::Error);
        // Rhai reports the `;` at line 2, column 9 of the script: line 11, column 18 here.
        assert_eq!(problems[0].range.start, at(11, 18), "{problems:?}");
        assert!(problems[0].message.contains("line 2"), "{problems:?}");
        assert!(
            !problems[0].message.contains(" | "),
            "no excerpt: {problems:?}"
        );
    }

    #[test]
    fn failing_tests_point_into_the_script_or_at_the_test() {
        let request =
            "{object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: n}}}";
        let tests = format!("\n  - name: runs\n    request: {request}\n    expect: {{}}");
        // A misspelled response field: where the script sets it.
        let problems = check(&decorator("          #{ lables: #{} }", &tests));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].range.start, at(10, 13), "{problems:?}");
        assert_eq!(problems[0].range.end, at(10, 19), "{problems:?}");
        assert!(
            problems[0].message.starts_with("spec.tests[0] (runs)"),
            "{problems:?}"
        );
        // An unknown helper: the line that calls it.
        let problems = check(&decorator(
            "          let x = 1;\n          labl(x)",
            &tests,
        ));
        assert_eq!(problems[0].range.start.line, 11, "{problems:?}");
        assert!(
            problems[0].message.contains("did you mean `label`"),
            "{problems:?}"
        );
        // A test whose expectation fails: the test.
        let failing = format!(
            "\n  - name: expects\n    request: {request}\n    expect: {{labels: {{a: b}}}}"
        );
        let problems = check(&decorator("          #{}", &failing));
        assert_eq!(problems[0].range.start, at(12, 4), "{problems:?}");
    }

    #[test]
    fn a_map_literal_lost_to_a_yaml_comment_is_flagged_where_it_is() {
        let problems = check(&decorator(
            "          let x = 1;\n        #{ labels: #{} }",
            " []",
        ));
        let trap = problems
            .iter()
            .find(|p| p.message.contains("is a YAML comment"))
            .unwrap_or_else(|| panic!("{problems:?}"));
        assert_eq!(trap.severity, Severity::Warning);
        assert_eq!(trap.range.start, at(11, 8));
    }

    #[test]
    fn a_config_map_script_beside_the_manifest_is_found_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let text = "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: labeller}
spec:
  resources: [{apiVersion: v1, resource: configmaps}]
  hooks:
    sync:
      script:
        configMapRef: {namespace: hooks, name: scripts, key: sync.rhai}
";
        let engine = ScriptEngine::new();
        let resolver = StaticResolver::with_builtins();
        let check = || {
            manifest(
                &Checks {
                    engine: &engine,
                    resolver: &resolver,
                    config_maps: &[],
                    dir: Some(dir.path()),
                },
                text,
            )
        };
        let missing = check();
        assert!(
            missing.iter().any(|p| p.message.contains("not found")),
            "{missing:?}"
        );
        std::fs::write(dir.path().join("sync.rhai"), "#{}").unwrap();
        assert_eq!(check(), []);
        std::fs::write(dir.path().join("sync.rhai"), "let = ;").unwrap();
        let broken = check();
        assert!(
            broken.iter().any(|p| p.severity == Severity::Error
                && p.message.starts_with("spec.hooks.sync")
                && p.message.contains("sync.rhai")),
            "{broken:?}"
        );
    }

    #[test]
    fn invalid_yaml_is_one_problem_where_the_parser_stopped() {
        let problems = check("apiVersion: v1\nkind: [\n");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].message.contains("invalid YAML"));
    }

    #[test]
    fn a_script_file_that_does_not_compile_is_marked_at_the_error() {
        let engine = ScriptEngine::new();
        let problems = script_file(
            &engine,
            Path::new("sync.rhai"),
            Language::Rhai,
            "let x = 1;\nlet = 2;",
        );
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].range.start.line, 1, "{problems:?}");
        let problems = script_file(&engine, Path::new("sync.lua"), Language::Lua, "return {\n");
        assert_eq!(problems.len(), 1);
        assert!(script_file(&engine, Path::new("ok.lua"), Language::Lua, "return {}").is_empty());
    }

    #[test]
    fn a_misspelled_helper_in_a_script_file_is_a_warning_on_its_name() {
        let engine = ScriptEngine::new();
        for (language, text) in [
            (Language::Rhai, "let x = 1;\n  lable(request.object, \"a\")"),
            (
                Language::Lua,
                "local x = 1\n  return lable(request.object, \"a\")",
            ),
        ] {
            let problems = script_file(&engine, Path::new("sync"), language, text);
            let [problem] = problems.as_slice() else {
                panic!("{language:?}: {problems:?}");
            };
            assert_eq!(problem.severity, Severity::Warning);
            let column = text.lines().nth(1).unwrap().find("lable").unwrap() as u32;
            assert_eq!(problem.range.start, at(1, column), "{language:?}");
            assert_eq!(problem.range.end, at(1, column + 5), "{language:?}");
            assert!(
                problem.message.contains("did you mean `label`"),
                "{problem:?}"
            );
        }
    }
}
