//! Recording live hook calls as test cases (`metascript run --record DIR`), so a production case
//! becomes a regression test in one step: `metascript test DIR` runs the files unchanged.
//!
//! Each hook revision gets its own file pair under `DIR/<kind>-<controller>/`: the script as it
//! ran (`<hook>-<digest>.rhai|lua`) and `<hook>-<digest>.test.yaml`, whose cases are the calls
//! (request, response, and the clock the call saw). Secrets are redacted in requests and
//! responses, and their values scrubbed wherever else a call copied them; calls are
//! deduplicated by request; files hold a bounded number of cases and skip requests above a
//! size.

use super::{Case, LibraryFile, OneOrMany, TestFile};
use crate::api::HookKind;
use crate::hooks::{HookCode, HookError, LoadedHook};
use crate::object;
use crate::reads::Secrets;
use crate::script::HookRequest;
use parking_lot::Mutex;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Cases kept per file.
pub(crate) const MAX_CASES: usize = 50;
/// Requests larger than this (serialized) are not recorded.
pub(crate) const MAX_REQUEST_BYTES: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("recording into {path}: {source}")]
pub(crate) struct RecordError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// One call to record.
pub(crate) struct Recorded<'a> {
    /// `decorator/<name>` or `map/<name>`, as the directory names it.
    pub controller: &'a str,
    pub hook: &'a LoadedHook,
    pub request: HookRequest<'a>,
    pub response: Result<&'a Value, &'a HookError>,
    pub clock: jiff::Timestamp,
    /// The values of the Secrets the call's work item was handed: scrubbed from the case.
    pub secrets: &'a Secrets,
}

pub struct Recorder {
    dir: PathBuf,
    /// Per test file: the digests of the requests recorded, and the cases.
    files: Mutex<HashMap<PathBuf, (HashSet<String>, TestFile)>>,
}

impl Recorder {
    pub(crate) fn new(dir: PathBuf) -> Recorder {
        Recorder {
            dir,
            files: Mutex::default(),
        }
    }

    /// Records a call, unless it was recorded already, is too large, the file is full, or it
    /// failed in a way a script alone cannot reproduce (an unavailable source, say). Returns
    /// whether a case was written.
    pub(crate) fn record(&self, call: &Recorded) -> Result<bool, RecordError> {
        // Secrets redacted where they are, and their values wherever else the call copied
        // them (another object of the request, the response, the error).
        let clean = |value: &Value| {
            let mut clean = redact(value);
            call.secrets.scrub_value(&mut clean);
            clean
        };
        let request = clean(&call.request.to_value());
        let text = request.to_string();
        if text.len() > MAX_REQUEST_BYTES {
            return Ok(false);
        }
        let expectation = match call.response {
            Ok(response) => (Some(clean(response)), None),
            // The engine's own message: the origin and position around it differ between the
            // operator and a replay from the file.
            Err(HookError::Script(error)) => {
                (None, Some(call.secrets.scrub(&error.message).into_owned()))
            }
            Err(_) => return Ok(false),
        };
        // A webhook's answers have no script to replay them with.
        let HookCode::Script { script, limits } = &call.hook.code else {
            return Ok(false);
        };
        let stem = format!(
            "{}-{}",
            call.hook.kind,
            &script.digest()[..script.digest().len().min(12)]
        );
        let dir = self.dir.join(call.controller.replace('/', "-"));
        let test_path = dir.join(format!("{stem}.test.yaml"));
        let digest = object::short_digest(&text);
        let mut files = self.files.lock();
        let (seen, file) = match files.get_mut(&test_path) {
            Some(entry) => entry,
            None => {
                let script_name = format!("{stem}.{}", script.language());
                std::fs::create_dir_all(&dir).map_err(|source| RecordError {
                    path: dir.clone(),
                    source,
                })?;
                write(&dir.join(&script_name), script.code())?;
                let mut libraries = Vec::new();
                for library in script.libraries() {
                    let file_name = format!("{stem}.{}.{}", library.name, script.language());
                    write(&dir.join(&file_name), &library.code)?;
                    libraries.push(LibraryFile {
                        name: library.name,
                        script: file_name,
                    });
                }
                let file = read_existing(&test_path).unwrap_or_else(|| TestFile {
                    script: Some(OneOrMany::One(script_name)),
                    libraries,
                    kind: Some(call.hook.kind.kind().object_kind().to_string()),
                    hook: Some(call.hook.kind.to_string()),
                    limits: Some(limits.clone()),
                    ..TestFile::default()
                });
                let seen = file
                    .cases
                    .iter()
                    .filter_map(|case| case.request.as_ref())
                    .map(|request| object::short_digest(&request.to_string()))
                    .collect();
                files.entry(test_path.clone()).or_insert((seen, file))
            }
        };
        if file.cases.len() >= MAX_CASES || !seen.insert(digest.clone()) {
            return Ok(false);
        }
        let (expect, expect_error) = expectation;
        file.cases.push(Case {
            name: format!(
                "{} {}",
                case_subject(call.hook.kind, &request),
                &digest[..8]
            ),
            request: Some(request),
            request_file: None,
            expect,
            exact: true,
            expect_error,
            clock: Some(call.clock),
            // The objects a hook read are not recorded (yet): a replayed `get` sees nothing.
            ..Case::default()
        });
        let yaml = serde_saphyr::to_string(&*file).unwrap_or_default();
        write(&test_path, &yaml)?;
        Ok(true)
    }
}

fn read_existing(path: &Path) -> Option<TestFile> {
    serde_saphyr::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn write(path: &Path, text: &str) -> Result<(), RecordError> {
    std::fs::write(path, text).map_err(|source| RecordError {
        path: path.to_path_buf(),
        source,
    })
}

/// The object a call was about, for the case's name.
fn case_subject(hook: HookKind, request: &Value) -> String {
    let subject = &request[hook.contract().subject];
    match object::namespace(subject) {
        Some(namespace) => format!(
            "{} {namespace}/{}",
            object::kind(subject),
            object::name(subject)
        ),
        None => format!("{} {}", object::kind(subject), object::name(subject)),
    }
}

/// A copy with the values of every Secret's `data` and `stringData` replaced, wherever in the
/// request or response the Secret is (see [`crate::reads::redact`]).
pub(crate) fn redact(value: &Value) -> Value {
    let mut copy = value.clone();
    crate::reads::redact(&mut copy);
    copy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Hook, Language, Library};
    use crate::cli::harness::{TestArgs, run};
    use crate::hooks::{ControllerHooks, NoConfigMaps};
    use crate::script::{CallScope, ScriptEngine};
    use serde_json::json;
    use std::process::ExitCode;

    /// A hook that calls a library is recorded with the library's file, so the replay compiles
    /// it the same way and passes; with the library left out of the file, it fails.
    #[test]
    fn a_hook_s_libraries_are_recorded_with_it_and_replay() {
        for (language, hook, library) in [
            (
                Language::Rhai,
                "#{ labels: #{ size: sized(request.object) } }",
                "fn sized(object) { `${object.data.len()}` }",
            ),
            (
                Language::Lua,
                "return { labels = { size = util.sized(request.object) } }",
                "local M = {}\nfunction M.sized(object)\n  local n = 0\n  for _ in pairs(object.data) do n = n + 1 end\n  return tostring(n)\nend\nreturn M",
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let sync = Hook::inline(language, hook);
            let libraries = [Library {
                name: "util".into(),
                language: Some(language),
                inline: Some(library.into()),
                config_map_ref: None,
            }];
            let engine = ScriptEngine::new();
            let hooks = ControllerHooks::load(
                &engine,
                "sized",
                [(crate::kinds::decorator::SYNC, &sync)],
                &libraries,
                &[],
                &NoConfigMaps,
            )
            .unwrap();
            let request = json!({"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}, "attachments": {}});
            let response = hooks
                .call(
                    &engine,
                    crate::kinds::decorator::SYNC,
                    &request,
                    &CallScope::default(),
                )
                .unwrap();
            assert_eq!(response["labels"]["size"], "2");
            let recorder = Recorder::new(dir.path().to_path_buf());
            let recorded = recorder
                .record(&Recorded {
                    controller: "decorator/sized",
                    hook: hooks.get(crate::kinds::decorator::SYNC).unwrap(),
                    request: (&request).into(),
                    response: Ok(&response),
                    clock: jiff::Timestamp::UNIX_EPOCH,
                    secrets: &Secrets::default(),
                })
                .unwrap();
            assert!(recorded);
            let replay = || {
                run(TestArgs {
                    paths: vec![dir.path().to_path_buf()],
                    filter: None,
                    junit: None,
                    update: false,
                    coverage: false,
                    lcov: None,
                })
            };
            assert_eq!(replay(), ExitCode::SUCCESS, "{language}");
            let test_file = std::fs::read_dir(dir.path().join("decorator-sized"))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .find(|path| path.to_string_lossy().ends_with(".test.yaml"))
                .unwrap();
            let text = std::fs::read_to_string(&test_file).unwrap();
            assert!(text.contains("libraries:"), "{text}");
            let without: String = {
                let mut file: TestFile = serde_saphyr::from_str(&text).unwrap();
                file.libraries.clear();
                serde_saphyr::to_string(&file).unwrap()
            };
            std::fs::write(&test_file, without).unwrap();
            assert_eq!(
                replay(),
                ExitCode::FAILURE,
                "{language}: replayed without the library"
            );
        }
    }

    #[test]
    fn secrets_are_redacted_wherever_they_are() {
        let request = json!({
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "kept"}},
            "related": {"Secret.v1": {"db": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {"password": "c2VjcmV0"}, "stringData": {"token": "t"}}}}
        });
        let redacted = redact(&request);
        assert_eq!(redacted["object"]["data"]["a"], "kept");
        let secret = &redacted["related"]["Secret.v1"]["db"];
        assert_eq!(secret["data"]["password"], crate::reads::REDACTED);
        assert_eq!(secret["stringData"]["token"], crate::reads::REDACTED);
        assert_eq!(secret["metadata"]["name"], "db");
        assert!(!redacted.to_string().contains("c2VjcmV0"));
    }

    /// A recorded case holds no value of a Secret the call was handed: not in the Secret
    /// (redacted), nor where the hook copied it (another object, the response, its error).
    #[test]
    fn recorded_cases_hold_no_secret_value() {
        for (language, copies, throws) in [
            (
                Language::Rhai,
                r#"#{ labels: #{ copy: base64_decode(request.related["Secret.v1"].db.data.password) } }"#,
                r#"throw `no ${base64_decode(request.related["Secret.v1"].db.data.password)}`;"#,
            ),
            (
                Language::Lua,
                r#"return { labels = { copy = base64_decode(request.related["Secret.v1"].db.data.password) } }"#,
                r#"error("no " .. base64_decode(request.related["Secret.v1"].db.data.password))"#,
            ),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let recorder = Recorder::new(dir.path().to_path_buf());
            let engine = ScriptEngine::new();
            for (name, code) in [("copies", copies), ("throws", throws)] {
                let sync = Hook::inline(language, code);
                let hooks = ControllerHooks::load(
                    &engine,
                    name,
                    [(crate::kinds::decorator::SYNC, &sync)],
                    &[],
                    &[],
                    &NoConfigMaps,
                )
                .unwrap();
                // The password also sits in another object of the request, copied there earlier.
                let request = json!({
                    "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"copied": "hunter2"}},
                    "related": {"Secret.v1": {"db": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}, "data": {"password": "aHVudGVyMg=="}}}}
                });
                let scope = CallScope::default();
                let response = hooks.call(&engine, crate::kinds::decorator::SYNC, &request, &scope);
                let recorded = recorder
                    .record(&Recorded {
                        controller: &format!("decorator/{name}"),
                        hook: hooks.get(crate::kinds::decorator::SYNC).unwrap(),
                        request: (&request).into(),
                        response: response.as_ref(),
                        clock: jiff::Timestamp::UNIX_EPOCH,
                        secrets: &scope.secrets,
                    })
                    .unwrap();
                assert!(recorded, "{language} {name}");
            }
            let cases = walk(dir.path())
                .into_iter()
                .filter(|path| path.to_string_lossy().ends_with(".test.yaml"));
            for entry in cases {
                let text = std::fs::read_to_string(&entry).unwrap();
                for secret in ["hunter2", "aHVudGVyMg=="] {
                    assert!(
                        !text.contains(secret),
                        "{language}: {secret} in {}:\n{text}",
                        entry.display()
                    );
                }
                assert!(text.contains(crate::reads::REDACTED), "{language}: {text}");
            }
        }
    }

    /// Every file under `dir`.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .flat_map(|path| {
                if path.is_dir() {
                    walk(&path)
                } else {
                    vec![path]
                }
            })
            .collect()
    }
}
