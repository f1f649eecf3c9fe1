//! `metascript test`: runs hook scripts against recorded requests, with the production engine,
//! helpers, sandbox and limits, and compares the responses with expectations.

use super::manifests::{self, ManifestError, to_yaml};
use super::offline::{OfflineCluster, OfflineController};
use crate::api::{HookKind, Language};
use crate::cases::{Case, Subject, TestFile, describe_events, judge, published};
use crate::hooks::{
    ConfigMapLookup, ControllerHooks, HookError, LoadedHook, ScriptsDir, SourceError,
};
use crate::kinds;
use crate::schema::Schemas;
use crate::script::{
    CallScope, LibrarySource, LogSink, ScriptCoverage, ScriptEngine, ScriptOrigin, ScriptSource,
    check_library_names, lcov, shown_path,
};
use crate::validate::ScriptSpot;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub(crate) struct TestArgs {
    /// Test files, or directories searched for `*.test.yaml` (default: the current directory).
    pub paths: Vec<PathBuf>,
    /// Run only cases whose name (or `file :: name`) contains this text.
    #[arg(short = 'k', long)]
    pub filter: Option<String>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Rewrite each case's `expect` from the actual response (comments in the file are lost).
    #[arg(long)]
    pub update: bool,
    /// Report, per script, the lines the cases executed (statements reached).
    #[arg(long)]
    pub coverage: bool,
    /// Write the coverage as an lcov tracefile here (implies --coverage).
    #[arg(long, value_name = "FILE")]
    pub lcov: Option<PathBuf>,
}

/// A test file that cannot be used: bad YAML, a missing file, an unknown hook.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub(crate) struct UnusableTest {
    pub path: PathBuf,
    pub message: String,
}

struct Outcome {
    name: String,
    failure: Option<String>,
    /// Where in a script the hook failed, when it did.
    spot: Option<ScriptSpot>,
    time: Duration,
}

/// The harness as the language server runs it: one test file's cases, for a code lens.
pub(crate) struct LensRunner;

impl crate::lsp::CaseRunner for LensRunner {
    fn run(&self, test_file: &Path) -> Result<Vec<crate::lsp::CaseOutcome>, String> {
        let args = TestArgs {
            paths: vec![test_file.to_path_buf()],
            filter: None,
            junit: None,
            update: false,
            coverage: false,
            lcov: None,
        };
        let outcomes =
            run_file(&ScriptEngine::new(), test_file, &args).map_err(|e| e.to_string())?;
        Ok(outcomes
            .into_iter()
            .map(|outcome| crate::lsp::CaseOutcome {
                name: outcome.name,
                failure: outcome.failure,
                spot: outcome.spot,
            })
            .collect())
    }
}

pub(crate) fn run(args: TestArgs) -> ExitCode {
    let roots = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    let mut unusable: Vec<UnusableTest> = Vec::new();
    for root in &roots {
        match find_test_files(root) {
            Ok(found) => files.extend(found),
            Err(error) => unusable.push(error),
        }
    }
    if files.is_empty() && unusable.is_empty() {
        unusable.push(UnusableTest {
            path: roots[0].clone(),
            message: "no *.test.yaml files found".into(),
        });
    }
    let coverage = args.coverage || args.lcov.is_some();
    let engine = if coverage {
        ScriptEngine::with_coverage()
    } else {
        ScriptEngine::new()
    };
    let mut report = quick_junit::Report::new("metascript");
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in &files {
        match run_file(&engine, file, &args) {
            Ok(outcomes) => {
                let mut suite = quick_junit::TestSuite::new(file.display().to_string());
                for outcome in outcomes {
                    let status = match &outcome.failure {
                        None => {
                            passed += 1;
                            println!("ok      {} :: {}", file.display(), outcome.name);
                            quick_junit::TestCaseStatus::success()
                        }
                        Some(details) => {
                            failed += 1;
                            println!("FAILED  {} :: {}", file.display(), outcome.name);
                            for line in details.lines() {
                                println!("    {line}");
                            }
                            let mut status = quick_junit::TestCaseStatus::non_success(
                                quick_junit::NonSuccessKind::Failure,
                            );
                            status.set_message(details.lines().next().unwrap_or_default());
                            status.set_description(details.as_str());
                            status
                        }
                    };
                    let mut case = quick_junit::TestCase::new(outcome.name, status);
                    case.set_time(outcome.time);
                    suite.add_test_case(case);
                }
                report.add_test_suite(suite);
            }
            Err(error) => unusable.push(error),
        }
    }
    for error in &unusable {
        eprintln!("error: {error}");
    }
    if let Some(path) = &args.junit {
        let written = report
            .to_string()
            .map_err(|e| e.to_string())
            .and_then(|xml| std::fs::write(path, xml).map_err(|e| e.to_string()));
        if let Err(message) = written {
            eprintln!(
                "error: cannot write JUnit report {}: {message}",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    println!("{passed} passed, {failed} failed");
    if coverage {
        let scripts = engine.coverage();
        print!("{}", coverage_table(&scripts));
        if let Some(path) = &args.lcov
            && let Err(error) = std::fs::write(path, lcov(&scripts, script_file))
        {
            eprintln!("error: cannot write lcov file {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    if let Some(filter) = &args.filter
        && passed + failed == 0
        && unusable.is_empty()
    {
        eprintln!("error: no case matches -k {filter:?}");
        return ExitCode::from(2);
    }
    if !unusable.is_empty() {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A script's file for coverage reports: its path, or where it came from when it has none.
fn script_file(origin: &ScriptOrigin) -> String {
    match origin {
        ScriptOrigin::File { path } => shown_path(path).display().to_string(),
        other => other.to_string(),
    }
}

/// The coverage summary: per script, lines hit of executable lines, and which were missed.
fn coverage_table(scripts: &[ScriptCoverage]) -> String {
    let rows: Vec<(String, String, String, String)> = scripts
        .iter()
        .map(|script| {
            let lines = &script.lines;
            let percent = match lines.executable.len() {
                0 => 100.0,
                total => 100.0 * lines.hit_count() as f64 / total as f64,
            };
            let missed: Vec<String> = lines.missed().map(|l| l.to_string()).collect();
            let name = match &script.origin {
                ScriptOrigin::File { .. } => script_file(&script.origin),
                // Inline flavours of one controller share a name: the language tells them apart.
                other => format!("{} ({})", script_file(other), script.language),
            };
            (
                name,
                format!("{}/{}", lines.hit_count(), lines.executable.len()),
                format!("{percent:.1}%"),
                missed.join(","),
            )
        })
        .collect();
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let mut out = format!(
        "\ncoverage (statements reached)\n{:width$}  {:>9}  {:>6}  missed lines\n",
        "script", "lines", "%"
    );
    for (file, lines, percent, missed) in rows {
        out.push_str(&format!(
            "{file:width$}  {lines:>9}  {percent:>6}  {missed}\n"
        ));
    }
    out
}

fn find_test_files(root: &Path) -> Result<Vec<PathBuf>, UnusableTest> {
    let metadata = std::fs::metadata(root).map_err(|e| UnusableTest {
        path: root.to_path_buf(),
        message: e.to_string(),
    })?;
    if metadata.is_file() {
        return Ok(vec![root.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| UnusableTest {
            path: root.to_path_buf(),
            message: e.to_string(),
        })?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if entry.is_dir() && !name.starts_with('.') && name != "target" {
            found.extend(find_test_files(&entry)?);
        } else if name.ends_with(".test.yaml") || name.ends_with(".test.yml") {
            found.push(entry);
        }
    }
    Ok(found)
}

fn run_file(
    engine: &ScriptEngine,
    path: &Path,
    args: &TestArgs,
) -> Result<Vec<Outcome>, UnusableTest> {
    let unusable = |message: String| UnusableTest {
        path: path.to_path_buf(),
        message,
    };
    let text = manifests::read_file(path).map_err(|e| unusable(strip_path(e)))?;
    let mut spec: TestFile =
        serde_saphyr::from_str(&text).map_err(|e| unusable(format!("invalid test file: {e}")))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let subjects = load_subjects(engine, dir, &spec).map_err(unusable)?;
    let mut outcomes = Vec::new();
    let mut updated = 0;
    for case in &mut spec.cases {
        let request =
            case_request(dir, case).map_err(|m| unusable(format!("case {:?}: {m}", case.name)))?;
        for (index, subject) in subjects.iter().enumerate() {
            let name = if subjects.len() > 1 {
                format!("{} [{}]", case.name, subject.label)
            } else {
                case.name.clone()
            };
            let qualified = format!("{} :: {name}", path.display());
            if let Some(filter) = &args.filter
                && !qualified.contains(filter.as_str())
            {
                continue;
            }
            let started = Instant::now();
            let logs = LogSink::new();
            let cluster: Vec<Value> = spec.cluster.iter().chain(&case.cluster).cloned().collect();
            let reads = subject.reads(cluster.clone());
            let scope = CallScope {
                clock: case.clock.or(spec.clock),
                logs: Some(logs.clone()),
                reads: Some(reads.clone()),
                ..CallScope::default()
            };
            let result = subject.call(engine, &request, &scope, &cluster);
            let events = published(&result, &scope.events);
            let spot = result.as_ref().err().and_then(ScriptSpot::of);
            let time = started.elapsed();
            // Every subject is held to the same expectation: the first one writes it.
            if args.update
                && index == 0
                && case.expect_error.is_none()
                && let Ok(actual) = &result
            {
                case.expect = Some(actual.clone());
                updated += 1;
            }
            let failure =
                judge(case, &result, &reads.dependencies(), &events).map(|mut details| {
                    if !events.is_empty() {
                        details.push_str(&format!("\nscript events: {}", describe_events(&events)));
                    }
                    let lines = logs.lines();
                    if !lines.is_empty() {
                        details.push_str("\nscript log:");
                        for line in lines {
                            details.push_str(&format!("\n  {}: {}", line.level, line.message));
                            if !line.fields.is_empty() {
                                details.push_str(&format!(" {}", Value::Object(line.fields)));
                            }
                        }
                    }
                    details
                });
            outcomes.push(Outcome {
                name,
                failure,
                spot,
                time,
            });
        }
    }
    if args.update && updated > 0 {
        std::fs::write(path, to_yaml(&spec))
            .map_err(|e| unusable(format!("cannot update: {e}")))?;
        eprintln!("updated {updated} expectation(s) in {}", path.display());
    }
    Ok(outcomes)
}

fn strip_path(error: ManifestError) -> String {
    match error {
        ManifestError::Missing { .. } => "no such file".into(),
        other => other.to_string(),
    }
}

fn case_request(dir: &Path, case: &Case) -> Result<Value, String> {
    match (&case.request, &case.request_file) {
        (Some(request), None) => Ok(request.clone()),
        (None, Some(file)) => {
            let path = dir.join(file);
            let text = manifests::read_file(&path).map_err(|e| e.to_string())?;
            let mut documents =
                manifests::parse_documents(&path, &text).map_err(|e| e.to_string())?;
            match documents.len() {
                1 => Ok(documents.remove(0)),
                n => Err(format!(
                    "{} holds {n} documents, expected one request",
                    path.display()
                )),
            }
        }
        _ => Err("needs exactly one of request or requestFile".into()),
    }
}

fn load_subjects(
    engine: &ScriptEngine,
    dir: &Path,
    spec: &TestFile,
) -> Result<Vec<Subject>, String> {
    match (&spec.controller, &spec.script) {
        (Some(_), None) if !spec.libraries.is_empty() => Err(
            "libraries: is for script files; a controller manifest lists its own (spec.libraries)"
                .into(),
        ),
        (Some(_), None) if spec.kind.is_some() => {
            Err("kind: is for script files; a controller manifest says its own kind".into())
        }
        (Some(manifests), None) => manifests
            .items()
            .into_iter()
            .map(|file| controller_subject(engine, dir, file, spec))
            .collect(),
        (None, Some(scripts)) => {
            let hook = script_hook(spec)?;
            scripts
                .items()
                .into_iter()
                .map(|file| script_subject(engine, dir, file, hook, spec))
                .collect()
        }
        _ => {
            Err("needs exactly one of controller (manifest files) or script (script files)".into())
        }
    }
}

/// The hook `script` files are: `hook` of `kind`, or the first kind with a hook of that name
/// (`sync` when neither is given).
fn script_hook(spec: &TestFile) -> Result<HookKind, String> {
    match (&spec.kind, &spec.hook) {
        (Some(kind), hook) => {
            let kind = kinds::named(kind).ok_or_else(|| {
                let known: Vec<&str> = kinds::ALL.iter().map(|k| k.name().object_kind()).collect();
                format!("unknown kind {kind:?} (expected {})", known.join(" or "))
            })?;
            let kind = kind.name();
            match hook {
                None => Ok(kind.hooks()[0]),
                Some(name) => kind.hook(name).ok_or_else(|| {
                    format!("unknown hook {name:?} (a {kind} has {})", kind.hook_names())
                }),
            }
        }
        (None, hook) => {
            let name = hook.as_deref().unwrap_or("sync");
            kinds::hooks()
                .into_iter()
                .find(|hook| hook.as_str() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = kinds::hooks().iter().map(|h| h.as_str()).collect();
                    format!(
                        "unknown hook {name:?} (expected one of {})",
                        names.join(", ")
                    )
                })
        }
    }
}

fn script_subject(
    engine: &ScriptEngine,
    dir: &Path,
    file: &str,
    hook: HookKind,
    spec: &TestFile,
) -> Result<Subject, String> {
    let path = dir.join(file);
    let language = Language::from_file_name(file).ok_or_else(|| {
        format!("script {file}: cannot tell the language; name it *.rhai or *.lua")
    })?;
    let code = manifests::read_file(&path).map_err(|e| e.to_string())?;
    let mut libraries = Vec::new();
    check_library_names(spec.libraries.iter().map(|l| l.name.as_str()))
        .map_err(|(name, reason)| format!("library {name}: {reason}"))?;
    for library in &spec.libraries {
        let name = &library.name;
        let library_language = Language::from_file_name(&library.script).ok_or_else(|| {
            format!(
                "library {name}: cannot tell the language of {}; name it *.rhai or *.lua",
                library.script
            )
        })?;
        // Each script loads the libraries of its language, as a controller's hooks do.
        if library_language != language {
            continue;
        }
        let path = dir.join(&library.script);
        let code = manifests::read_file(&path).map_err(|e| e.to_string())?;
        libraries.push(LibrarySource {
            name: library.name.clone(),
            code: code.into(),
            origin: ScriptOrigin::File { path },
        });
    }
    let source = ScriptSource::new(language, code, ScriptOrigin::File { path: path.clone() })
        .with_libraries(libraries);
    let script = engine.compile(&source).map_err(|e| e.to_string())?;
    let loaded = LoadedHook::script(hook, script, spec.limits.clone().unwrap_or_default());
    Ok(Subject {
        label: file.to_string(),
        hook,
        hooks: std::sync::Arc::new(ControllerHooks::single(file, loaded)),
        planner: None,
        schemas: {
            let schemas = Schemas::with_builtins();
            for crd in crd_documents(dir, spec)? {
                schemas.add_crd(&crd.value);
            }
            std::sync::Arc::new(schemas)
        },
    })
}

fn controller_subject(
    engine: &ScriptEngine,
    dir: &Path,
    file: &str,
    spec: &TestFile,
) -> Result<Subject, String> {
    let name = spec.name.as_deref();
    let mut paths = vec![dir.join(file)];
    paths.extend(spec.manifests.iter().map(|extra| dir.join(extra)));
    let mut documents = manifests::load_objects(&paths).map_err(|e| e.to_string())?;
    // The CRDs of `crds:` resolve the controller's types too; the cluster's schemas have them.
    documents.extend(crd_documents(dir, spec)?);
    let cluster = OfflineCluster::from_documents(documents).map_err(|e| e.to_string())?;
    let local;
    let config_maps: &dyn ConfigMapLookup = match &spec.scripts_dir {
        Some(scripts) => {
            local = ScriptsDir {
                dir: dir.join(scripts),
                fallback: &cluster.objects,
            };
            &local
        }
        None => &cluster.objects,
    };
    let found: Vec<&OfflineController> = cluster.named(name).collect();
    let found = match found.as_slice() {
        [one] => *one,
        [] => {
            return Err(format!(
                "{file}: no controller{} in it",
                name.map(|n| format!(" named {n:?}")).unwrap_or_default()
            ));
        }
        _ => {
            return Err(format!(
                "{file}: holds several controllers; say which one with name:"
            ));
        }
    };
    let (controller, kind) = (&found.controller, found.kind.name());
    let hook = match &spec.hook {
        None => kind.hooks()[0],
        Some(hook) => kind
            .hook(hook)
            .ok_or_else(|| format!("unknown hook {hook:?} (a {kind} has {})", kind.hook_names()))?,
    };
    let planner = controller
        .planner(&cluster.resolver)
        .map_err(|e| format!("{file}: {e}"))?;
    let controller_spec = controller.spec();
    let name = controller.name();
    let wanted: Vec<_> = controller_spec
        .named_hooks()
        .into_iter()
        .filter(|(kind, _)| *kind == hook)
        .collect();
    if wanted.is_empty() {
        return Err(format!("{file}: controller {name} has no {hook} hook"));
    }
    let hooks = ControllerHooks::load(
        engine,
        &name,
        wanted,
        &controller_spec.libraries,
        &controller_spec.endpoint_configs,
        config_maps,
    )
    .map_err(|error| match &error {
        HookError::Source(source) => match source.as_ref() {
            SourceError::MissingConfigMap { key, .. } | SourceError::MissingKey { key, .. } => {
                format!("{error}; {}", no_script_file(dir, spec, key))
            }
            _ => error.to_string(),
        },
        _ => error.to_string(),
    })?;
    Ok(Subject {
        label: file.to_string(),
        hook,
        hooks: std::sync::Arc::new(hooks),
        planner: Some(planner.into()),
        schemas: std::sync::Arc::new(cluster.schemas),
    })
}

/// The documents of the test file's `crds:`, each file holding at least one
/// CustomResourceDefinition (and only those kept).
fn crd_documents(dir: &Path, spec: &TestFile) -> Result<Vec<manifests::Document>, String> {
    let mut crds = Vec::new();
    for listed in &spec.crds {
        let documents =
            manifests::load_objects(&[dir.join(listed)]).map_err(|e| format!("crds: {e}"))?;
        let before = crds.len();
        crds.extend(
            documents
                .into_iter()
                .filter(|d| crate::object::kind(&d.value) == "CustomResourceDefinition"),
        );
        if crds.len() == before {
            return Err(format!("crds: {listed} holds no CustomResourceDefinition"));
        }
    }
    Ok(crds)
}

/// Where a test file looked for a script it did not find besides the ConfigMaps it was given,
/// and how to point it at the file.
fn no_script_file(dir: &Path, spec: &TestFile, key: &str) -> String {
    let beside = shown_path(&dir.join(key));
    match &spec.scripts_dir {
        Some(scripts) => format!(
            "nor is there a file {} (scriptsDir: {}): put {key} there, or point scriptsDir at \
             the directory that holds it (relative to the test file)",
            shown_path(&dir.join(scripts).join(key)).display(),
            scripts
        ),
        None if beside.is_file() => format!(
            "{} is beside the test file but is not read without `scriptsDir: .` in it",
            beside.display()
        ),
        None => format!(
            "no file was looked for: add `scriptsDir: DIR` to the test file to read {key} from \
             DIR (relative to the test file), or list a manifest holding the ConfigMap under \
             `manifests:`"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::{decorator, map};

    /// A manifest whose hook is in ConfigMap default/team-hooks, key sync.rhai, and a test file
    /// beside it; what `run_file` says when the script is nowhere it looks.
    fn missing_script(test: &str, files: &[&str]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "controller.yaml",
            "apiVersion: metascript.dev/v1alpha1\nkind: DecoratorController\n\
             metadata: {name: team}\nspec:\n  resources: [{apiVersion: v1, resource: configmaps}]\n  \
             hooks:\n    sync:\n      script:\n        configMapRef: \
             {namespace: default, name: team-hooks, key: sync.rhai}\n",
        );
        for file in files {
            write(file, "#{}");
        }
        write(
            "team.test.yaml",
            &format!("controller: controller.yaml\n{test}cases: []\n"),
        );
        let args = TestArgs {
            paths: vec![],
            filter: None,
            junit: None,
            update: false,
            coverage: false,
            lcov: None,
        };
        match run_file(
            &ScriptEngine::new(),
            &dir.path().join("team.test.yaml"),
            &args,
        ) {
            Ok(_) => "found".into(),
            Err(error) => error
                .message
                .replace(&dir.path().display().to_string(), "DIR"),
        }
    }

    #[test]
    fn a_missing_script_names_the_config_map_the_file_and_the_fix() {
        let none = missing_script("", &[]);
        assert!(
            none.starts_with("hook sync of team: ConfigMap default/team-hooks not found; "),
            "{none}"
        );
        assert!(none.contains("add `scriptsDir: DIR`"), "{none}");
        let beside = missing_script("", &["sync.rhai"]);
        assert!(
            beside.contains(
                "DIR/sync.rhai is beside the test file but is not read without \
                             `scriptsDir: .`"
            ),
            "{beside}"
        );
        let elsewhere = missing_script("scriptsDir: hooks\n", &["sync.rhai"]);
        assert!(
            elsewhere.contains("nor is there a file DIR/hooks/sync.rhai (scriptsDir: hooks)"),
            "{elsewhere}"
        );
        assert_eq!(
            missing_script("scriptsDir: hooks\n", &["hooks/sync.rhai"]),
            "found"
        );
        assert_eq!(missing_script("scriptsDir: .\n", &["sync.rhai"]), "found");
    }

    fn hook_of(kind: Option<&str>, hook: Option<&str>) -> Result<HookKind, String> {
        script_hook(&TestFile {
            kind: kind.map(str::to_string),
            hook: hook.map(str::to_string),
            ..TestFile::default()
        })
    }

    #[test]
    fn a_script_files_hook_comes_from_its_kind_or_its_name() {
        assert_eq!(hook_of(None, None), Ok(decorator::SYNC));
        assert_eq!(hook_of(None, Some("tombstone")), Ok(map::TOMBSTONE));
        assert_eq!(hook_of(Some("MapController"), None), Ok(map::MAP));
        assert_eq!(
            hook_of(Some("decorator"), Some("customize")),
            Ok(decorator::CUSTOMIZE)
        );
        let error = hook_of(Some("MapController"), Some("sync")).unwrap_err();
        assert_eq!(
            error,
            "unknown hook \"sync\" (a MapController has map or tombstone)"
        );
        let error = hook_of(Some("Widget"), None).unwrap_err();
        assert!(error.starts_with("unknown kind \"Widget\""), "{error}");
        assert!(hook_of(None, Some("prepare")).is_err());
    }
}
