//! `metascript lsp` driven as editors drive it: a client over the process's stdio through a whole
//! session (initialize, open a manifest, edit it, diagnostics, completion, hover, definition,
//! shutdown), a code lens running a script's test cases, a server reading the shared plane's
//! CustomResourceDefinitions (and one whose cluster refuses or never answers), and Neovim's own
//! LSP client, headless, against the same binary.

use crate::support::{self, unique_name};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

/// A manifest with a library and an inline sync hook; lines 15 and 16 are the hook's script.
const MANIFEST: &str = "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: replicas-label}
spec:
  resources: [{apiVersion: apps/v1, resource: statefulsets}]
  libraries:
  - name: util
    language: rhai
    inline: |
      fn size_label(n) { `size-${n}` }
  hooks:
    sync:
      script:
        language: rhai
        inline: |
          let n = get_path(request.object, \"spec.replicas\", 1);
          #{ labels: #{ size: size_label(n) } }
";

/// How long a reply may take before the test gives up on a server that hangs (a guard, not an
/// assertion on speed).
const HANG: Duration = Duration::from_secs(60);

/// A language client over a `metascript lsp` process.
struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    /// Notifications read while waiting for something else.
    held: Vec<Value>,
    next_id: i64,
}

impl Client {
    /// `metascript lsp ARGS…`.
    fn start(args: &[&str]) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_metascript"))
            .arg("lsp")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("metascript lsp starts");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (sender, messages) = channel();
        std::thread::spawn(move || {
            loop {
                let mut length = None;
                loop {
                    let mut header = String::new();
                    if stdout.read_line(&mut header).unwrap_or(0) == 0 {
                        return;
                    }
                    let header = header.trim_end();
                    if header.is_empty() {
                        break;
                    }
                    if let Some(value) = header.strip_prefix("Content-Length: ") {
                        length = value.parse::<usize>().ok();
                    }
                }
                let mut body = vec![0; length.expect("a Content-Length header")];
                stdout.read_exact(&mut body).expect("a whole message");
                let message: Value = serde_json::from_slice(&body).expect("a JSON message");
                if sender.send(message).is_err() {
                    return;
                }
            }
        });
        Client {
            child,
            stdin,
            messages,
            held: Vec::new(),
            next_id: 1,
        }
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its result (failing on an error response).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.messages.recv_timeout(HANG).expect("a response");
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
            self.held.push(message);
        }
    }

    /// The handshake, with `root` as the workspace.
    fn initialize(&mut self, root: &Path) -> Value {
        let initialized = self.request(
            "initialize",
            json!({"processId": null, "rootUri": format!("file://{}", root.display()),
                   "capabilities": {}}),
        );
        self.notify("initialized", json!({}));
        initialized
    }

    /// The next notification that `matches` (held ones first).
    fn notification(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.held.iter().position(&matches) {
            return self.held.remove(at);
        }
        loop {
            let message = self.messages.recv_timeout(HANG).expect(what);
            if matches(&message) {
                return message;
            }
            self.held.push(message);
        }
    }

    /// The next message to the user (`window/logMessage` or `window/showMessage`): its
    /// parameters.
    fn message(&mut self, method: &str) -> Value {
        self.notification(method, |message| message["method"] == method)["params"].clone()
    }

    /// The diagnostics published for `uri` at `version`.
    fn diagnostics(&mut self, uri: &str, version: i64) -> Vec<Value> {
        let message = self.notification("diagnostics", |message| {
            message["method"] == "textDocument/publishDiagnostics"
                && message["params"]["uri"] == uri
                && message["params"]["version"] == version
        });
        message["params"]["diagnostics"].as_array().unwrap().clone()
    }

    fn open(&mut self, uri: &str, text: &str) {
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": text}}),
        );
    }

    fn change(&mut self, uri: &str, version: i64, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri, "version": version},
                   "contentChanges": [{"text": text}]}),
        );
    }

    /// The labels completion offers at a place.
    fn complete(&mut self, uri: &str, line: usize, character: usize) -> Vec<String> {
        let items = self.request(
            "textDocument/completion",
            json!({"textDocument": {"uri": uri}, "position": position(line, character)}),
        );
        labels(&items)
    }

    /// `shutdown` and `exit`; the process ends with success.
    fn shut_down(mut self) {
        assert_eq!(self.request("shutdown", Value::Null), Value::Null);
        self.notify("exit", Value::Null);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }
}

fn position(line: usize, character: usize) -> Value {
    json!({"line": line, "character": character})
}

fn labels(completion: &Value) -> Vec<String> {
    let items = completion
        .as_array()
        .or_else(|| completion["items"].as_array())
        .expect("completion items");
    items
        .iter()
        .map(|item| item["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_client_over_stdio_gets_diagnostics_completion_and_hover_at_yaml_positions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controller.yaml");
    std::fs::write(&path, MANIFEST).unwrap();
    let uri = format!("file://{}", path.display());
    let mut client = Client::start(&[]);

    let initialized = client.initialize(dir.path());
    let capabilities = &initialized["capabilities"];
    assert_eq!(capabilities["hoverProvider"], true, "{initialized}");
    assert_eq!(
        capabilities["completionProvider"]["triggerCharacters"],
        json!(["."])
    );
    assert_eq!(
        capabilities["executeCommandProvider"]["commands"],
        json!(["metascript.runTests"]),
        "no cluster to read again without --kubeconfig"
    );

    client.open(&uri, MANIFEST);
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());

    // An edit that breaks the hook's first line: the error is on that line of the file, at the
    // `=` Rhai stops at.
    let broken_line = "          let = 5;";
    let broken = MANIFEST.replace(
        "          let n = get_path(request.object, \"spec.replicas\", 1);",
        broken_line,
    );
    client.change(&uri, 2, &broken);
    let diagnostics = client.diagnostics(&uri, 2);
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let error = &diagnostics[0];
    assert_eq!(error["severity"], 1, "an error: {error}");
    assert_eq!(error["source"], "metascript");
    assert_eq!(
        error["range"]["start"],
        position(15, broken_line.find('=').unwrap()),
        "{error}"
    );
    assert!(
        error["message"].as_str().unwrap().contains("line 1"),
        "{error}"
    );

    // Typing `request.object.spec.`: the hook's request fields, then the StatefulSet's.
    let typing_line = "          let n = request.object.spec.";
    let typing = MANIFEST.replace(
        "          let n = get_path(request.object, \"spec.replicas\", 1);",
        typing_line,
    );
    client.change(&uri, 3, &typing);
    let document = json!({"uri": uri});
    let after_request = typing_line.find("request.").unwrap() + "request.".len();
    let request_fields = client.complete(&uri, 15, after_request);
    assert!(request_fields.contains(&"object".to_string()));
    let spec_fields = client.complete(&uri, 15, typing_line.len());
    assert!(
        spec_fields.contains(&"replicas".to_string())
            && spec_fields.contains(&"template".to_string()),
        "{spec_fields:?}"
    );
    // The half-typed line does not parse: that is said too, on the line typed.
    let diagnostics = client.diagnostics(&uri, 3);
    assert!(
        diagnostics
            .iter()
            .all(|d| d["range"]["start"]["line"] == 15 || d["range"]["start"]["line"] == 16),
        "{diagnostics:?}"
    );

    // Hover: a response field, and a library function; and the function's definition.
    let hover = client.request(
        "textDocument/hover",
        json!({"textDocument": document, "position": position(16, 15)}),
    );
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(text.starts_with("`labels`"), "{text}");
    let call = "          #{ labels: #{ size: size_label(n) } }"
        .find("size_label")
        .unwrap();
    let hover = client.request(
        "textDocument/hover",
        json!({"textDocument": document, "position": position(16, call + 2)}),
    );
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(text.contains("fn size_label(n)"), "{text}");
    let definition = client.request(
        "textDocument/definition",
        json!({"textDocument": document, "position": position(16, call + 2)}),
    );
    assert_eq!(definition["uri"], uri.as_str());
    assert_eq!(definition["range"]["start"], position(9, 9), "{definition}");

    client.shut_down();
}

#[test]
fn a_code_lens_runs_the_scripts_test_cases_and_marks_where_they_fail() {
    let dir = tempfile::tempdir().unwrap();
    let script = "let n = 1;\n#{ labels: #{ size: lable(n) } }\n";
    std::fs::write(dir.path().join("sync.rhai"), script).unwrap();
    std::fs::write(
        dir.path().join("sync.test.yaml"),
        "script: sync.rhai\ncases:\n- name: labels it\n  request: {object: {apiVersion: v1, \
         kind: ConfigMap, metadata: {name: a}}}\n  expect: {labels: {size: \"1\"}}\n",
    )
    .unwrap();
    let uri = format!("file://{}", dir.path().join("sync.rhai").display());
    let mut client = Client::start(&[]);
    client.initialize(dir.path());
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rhai", "version": 1, "text": script}}),
    );
    // It compiles; the misspelled helper is a warning before any case runs it.
    let before = client.diagnostics(&uri, 1);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(
        (&before[0]["severity"], &before[0]["range"]["start"]["line"]),
        (&json!(2), &json!(1)),
        "{before:?}"
    );
    let lenses = client.request(
        "textDocument/codeLens",
        json!({"textDocument": {"uri": uri}}),
    );
    let lenses = lenses.as_array().unwrap();
    assert_eq!(lenses.len(), 1, "{lenses:?}");
    let command = &lenses[0]["command"];
    assert_eq!(command["title"], "run 1 case(s) of sync.test.yaml");
    let summary = client.request(
        "workspace/executeCommand",
        json!({"command": command["command"], "arguments": command["arguments"]}),
    );
    assert_eq!(summary, "0 passed, 1 failed");
    let diagnostics = client.diagnostics(&uri, 1);
    assert_eq!(
        diagnostics.len(),
        2,
        "the warning and the failure: {diagnostics:?}"
    );
    let failure = diagnostics
        .iter()
        .find(|d| d["severity"] == 1)
        .unwrap_or_else(|| panic!("{diagnostics:?}"));
    assert_eq!(failure["range"]["start"]["line"], 1, "{failure}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with("sync.test.yaml :: labels it: "),
        "{message}"
    );
    assert!(message.contains("did you mean `label`"), "{message}");
    client.shut_down();
}

/// A DecoratorController of `resource` in `api_version` whose sync hook is `script` (Rhai, one
/// line: line 10 of the file).
fn decorator(api_version: &str, resource: &str, script: &str) -> String {
    format!(
        "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {{name: sized}}
spec:
  resources: [{{apiVersion: {api_version}, resource: {resource}}}]
  hooks:
    sync:
      script:
        language: rhai
        inline: |
          {script}
"
    )
}

/// Creates a namespaced CustomResourceDefinition of `kind` in `group`, version v1, whose `spec`
/// has one integer field; returns its resource (plural).
async fn create_crd(client: &kube::Client, group: &str, kind: &str, field: &str) -> String {
    let plural = format!("{}s", kind.to_lowercase());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "kind": kind},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        field: {"type": "integer", "description": format!("The {kind}'s {field}.")},
                    }},
                }}},
            }],
        },
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("creating the CRD");
    plural
}

/// The warning validate gives a controller whose type does not resolve.
const WAITS_FOR_THE_TYPE: &str = "the controller waits until the type exists";

/// With `--kubeconfig`, the types the cluster defines and the workspace does not: their fields
/// are completed below `request.object`, and a controller naming one is not warned about it; a
/// type created after the server started is known once `metascript.readCluster` read again.
#[tokio::test]
async fn a_clusters_crds_are_completed_and_resolve_with_a_kubeconfig() {
    let client = support::client().await;
    let group = format!("{}.lsp.metascript.test", unique_name("crds"));
    let gizmos = create_crd(&client, &group, "Gizmo", "size").await;
    let kubeconfig = support::plane().await.kubeconfig_path().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("controller.yaml");
    let uri = format!("file://{}", path.display());
    let api_version = format!("{group}/v1");
    let manifest = decorator(&api_version, &gizmos, "#{ labels: #{ seen: \"yes\" } }");
    std::fs::write(&path, &manifest).unwrap();

    let mut lsp = Client::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    let initialized = lsp.initialize(dir.path());
    assert_eq!(
        initialized["capabilities"]["executeCommandProvider"]["commands"],
        json!(["metascript.runTests", "metascript.readCluster"])
    );
    let read = lsp.message("window/logMessage");
    let text = read["message"].as_str().unwrap();
    assert!(
        text.contains("CustomResourceDefinition(s) from the cluster of"),
        "{text}"
    );

    lsp.open(&uri, &manifest);
    assert_eq!(lsp.diagnostics(&uri, 1), Vec::<Value>::new());
    let typing = "let s = request.object.spec.";
    lsp.change(&uri, 2, &decorator(&api_version, &gizmos, typing));
    let items = lsp.request(
        "textDocument/completion",
        json!({"textDocument": {"uri": uri}, "position": position(10, 10 + typing.len())}),
    );
    let size = items
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["label"] == "size")
        .unwrap_or_else(|| panic!("the Gizmo's fields: {items}"));
    assert_eq!(size["detail"], "integer");
    assert_eq!(size["documentation"]["value"], "The Gizmo's size.");

    // A type created now is not known yet: a warning, and nothing to complete.
    let doohickeys = create_crd(&client, &group, "Doohickey", "length").await;
    lsp.change(&uri, 3, &decorator(&api_version, &doohickeys, typing));
    let diagnostics = lsp.diagnostics(&uri, 3);
    assert!(
        diagnostics
            .iter()
            .any(|d| d["message"].as_str().unwrap().contains(WAITS_FOR_THE_TYPE)),
        "{diagnostics:?}"
    );
    assert_eq!(
        lsp.complete(&uri, 10, 10 + typing.len()),
        Vec::<String>::new()
    );
    // Read again: the open file is checked again and completes.
    let reading = lsp.request(
        "workspace/executeCommand",
        json!({"command": "metascript.readCluster", "arguments": []}),
    );
    assert!(
        reading
            .as_str()
            .unwrap()
            .starts_with("reading the CustomResourceDefinitions of"),
        "{reading}"
    );
    lsp.message("window/logMessage");
    let diagnostics = lsp.diagnostics(&uri, 3);
    assert!(
        diagnostics
            .iter()
            .all(|d| !d["message"].as_str().unwrap().contains(WAITS_FOR_THE_TYPE)),
        "{diagnostics:?}"
    );
    assert_eq!(lsp.complete(&uri, 10, 10 + typing.len()), ["length"]);
    lsp.shut_down();
}

/// A kubeconfig whose cluster is `https://127.0.0.1:{port}`.
fn kubeconfig_for_port(dir: &Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("unreachable.kubeconfig");
    let config = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n\
         clusters: [{{name: c, cluster: {{server: \"https://127.0.0.1:{port}\", \
         insecure-skip-tls-verify: true}}}}]\n\
         users: [{{name: u, user: {{token: t}}}}]\n\
         contexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n"
    );
    std::fs::write(&path, config).unwrap();
    path
}

/// Opens `MANIFEST` and checks that its diagnostics come and `request.` completes.
fn answers_from_the_workspace(lsp: &mut Client, dir: &Path) {
    let path = dir.join("controller.yaml");
    std::fs::write(&path, MANIFEST).unwrap();
    let uri = format!("file://{}", path.display());
    lsp.open(&uri, MANIFEST);
    assert_eq!(lsp.diagnostics(&uri, 1), Vec::<Value>::new());
    let line = "          let n = get_path(request.object, \"spec.replicas\", 1);";
    let after_request = line.find("request.").unwrap() + "request.".len();
    let fields = lsp.complete(&uri, 15, after_request);
    assert!(fields.contains(&"object".to_string()), "{fields:?}");
}

/// A cluster that refuses connections: one warning to the user, naming the kubeconfig, and the
/// editor is served as without a cluster, before and after.
#[test]
fn a_cluster_that_refuses_is_one_warning() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then let go.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let kubeconfig = kubeconfig_for_port(dir.path(), port);
    let mut lsp = Client::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    lsp.initialize(dir.path());
    let warning = lsp.message("window/showMessage");
    assert_eq!(warning["type"], 2, "a warning: {warning}");
    let text = warning["message"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "could not read the CustomResourceDefinitions of the cluster of {}",
            kubeconfig.display()
        )),
        "{text}"
    );
    assert!(text.contains("Connection refused"), "the cause: {text}");
    answers_from_the_workspace(&mut lsp, dir.path());
    lsp.shut_down();
}

/// A cluster that accepts connections and never answers: the server answers the editor at once
/// all the same (well within the 20 s its reading may take), and exits when told to.
#[test]
fn a_cluster_that_never_answers_holds_nothing_up() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let kubeconfig = kubeconfig_for_port(dir.path(), listener.local_addr().unwrap().port());
    let (connected, connections) = channel();
    std::thread::spawn(move || {
        // Held open, never written to.
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
            if connected.send(()).is_err() {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut lsp = Client::start(&["--kubeconfig", kubeconfig.to_str().unwrap()]);
    lsp.initialize(dir.path());
    connections
        .recv_timeout(HANG)
        .expect("the server connects to the cluster");
    answers_from_the_workspace(&mut lsp, dir.path());
    let answered = started.elapsed();
    assert!(
        answered < Duration::from_secs(10),
        "the editor waited {answered:?}: the server waited for the cluster"
    );
    assert!(
        lsp.held.iter().all(|m| m["method"] != "window/showMessage"),
        "the reading was still in flight: {:?}",
        lsp.held
    );
    lsp.shut_down();
}

/// Neovim's built-in LSP client, headless: it starts the server, opens a manifest whose hook
/// calls a misspelled helper in a failing `spec.tests` case, and asks for completion; the Lua
/// script writes what it got to a file. CI installs Neovim (`.ci/run`); elsewhere the test is
/// skipped when there is no `nvim`, but never on CI.
#[test]
fn neovim_shows_the_diagnostics_and_completes_helpers() {
    let Some(nvim) = find_nvim() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "nvim is not installed, and CI must run this test (.ci/run installs Debian's neovim)"
        );
        eprintln!("skipped: no nvim on PATH (apt-get install neovim)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let manifest = "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: sized}
spec:
  resources: [{apiVersion: v1, resource: configmaps}]
  hooks:
    sync:
      script:
        language: lua
        inline: |
          local n = lable(request.object, \"size\")
          return {labels = {size = n}}
  tests:
  - name: labels it
    request: {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: n}}}
    expect: {labels: {size: \"1\"}}
";
    let file = dir.path().join("controller.yaml");
    std::fs::write(&file, manifest).unwrap();
    let out = dir.path().join("out.json");
    let script = dir.path().join("check.lua");
    std::fs::write(&script, NEOVIM_SCRIPT).unwrap();
    let output = Command::new(nvim)
        .args(["--headless", "--clean", "-n", "-u", "NONE"])
        .arg("-c")
        .arg(format!("luafile {}", script.display()))
        .arg(&file)
        .env("METASCRIPT_BIN", env!("CARGO_BIN_EXE_metascript"))
        .env("METASCRIPT_OUT", &out)
        .current_dir(dir.path())
        .output()
        .expect("nvim runs");
    let report = std::fs::read_to_string(&out).unwrap_or_else(|_| {
        panic!(
            "nvim wrote no report: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["error"], Value::Null, "{report}");
    // The failing test's runtime error is marked on the script line that calls `lable`.
    let diagnostics = report["diagnostics"].as_array().unwrap();
    let marked = diagnostics
        .iter()
        .find(|d| {
            d["message"]
                .as_str()
                .unwrap()
                .contains("did you mean `label`")
        })
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(marked["lnum"], 10, "0-based line of `lable(`: {report}");
    let completions: Vec<&str> = report["completion"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(completions.contains(&"get_path"), "{report}");
    assert!(completions.contains(&"request"), "{report}");
}

/// The Neovim setup docs/editors.md gives, run as written as the `init.lua` of a headless
/// Neovim (Debian's 0.7 here, on CI too) with `metascript` on its PATH, in a repository laid out
/// as docs/testing.md recommends: a manifest whose hook reads `configMapRef` key `sync.rhai`, the
/// script beside it, and a test file with `controller:` and `scriptsDir: .`. Opening the script
/// gives it the `rhai` filetype and a server, a warning on a misspelled helper (no `spec.tests`
/// anywhere), and a code lens; opening the manifest gives no "ConfigMap … not found".
#[test]
fn neovim_runs_the_documented_setup() {
    let Some(nvim) = find_nvim() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "nvim is not installed, and CI must run this test (.ci/run installs Debian's neovim)"
        );
        eprintln!("skipped: no nvim on PATH (apt-get install neovim)");
        return;
    };
    let docs = include_str!("../../docs/editors.md");
    let neovim = &docs[docs.find("### Neovim").expect("a Neovim section")..];
    let start = neovim.find("```lua\n").expect("a Lua block") + "```lua\n".len();
    let init = &neovim[start..start + neovim[start..].find("```").expect("its end")];
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(repo.join(name), text).unwrap();
    write(
        "controller.yaml",
        "\
apiVersion: metascript.dev/v1alpha1
kind: DecoratorController
metadata: {name: team}
spec:
  resources: [{apiVersion: v1, resource: configmaps}]
  attachments: [{apiVersion: v1, resource: secrets}]
  hooks:
    sync:
      script:
        configMapRef: {namespace: default, name: team-hooks, key: sync.rhai}
",
    );
    write(
        "sync.rhai",
        "let size = lable(request.object, \"size\");\n#{ labels: #{ size: size } }\n",
    );
    write(
        "team.test.yaml",
        "controller: controller.yaml\nscriptsDir: .\ncases:\n- name: labels it\n  request: \
         {object: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: n}}}\n",
    );
    std::fs::write(dir.path().join("init.lua"), init).unwrap();
    let check = dir.path().join("check.lua");
    std::fs::write(&check, DOCUMENTED_SETUP_CHECK).unwrap();
    let out = dir.path().join("out.json");
    let bin = Path::new(env!("CARGO_BIN_EXE_metascript"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(nvim)
        .args(["--headless", "-n", "-i", "NONE", "-u"])
        .arg(dir.path().join("init.lua"))
        .arg("-c")
        .arg(format!("luafile {}", check.display()))
        .arg(repo.join("sync.rhai"))
        .env("PATH", path)
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("METASCRIPT_OUT", &out)
        .current_dir(&repo)
        .output()
        .expect("nvim runs");
    let report = std::fs::read_to_string(&out).unwrap_or_else(|_| {
        panic!(
            "nvim wrote no report: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["error"], Value::Null, "{report}");
    assert_eq!(report["filetype"], "rhai", "{report}");
    let messages = |field: &str| -> Vec<String> {
        report[field]
            .as_array()
            .unwrap_or_else(|| panic!("{field}: {report}"))
            .iter()
            .map(|d| d["message"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let script = messages("script");
    let typo = report["script"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["message"]
                .as_str()
                .unwrap()
                .contains("did you mean `label`")
        })
        .unwrap_or_else(|| panic!("{script:?}"));
    assert_eq!(
        (&typo["lnum"], &typo["col"]),
        (&json!(0), &json!(11)),
        "{report}"
    );
    let lenses: Vec<&str> = report["lenses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(lenses, ["run 1 case(s) of team.test.yaml"], "{report}");
    let manifest = messages("manifest");
    assert!(
        manifest.iter().any(|m| m.contains("OnDelete")),
        "the manifest was checked: {manifest:?}"
    );
    assert!(
        !manifest.iter().any(|m| m.contains("not found")),
        "the script beside it was found: {manifest:?}"
    );
}

/// Run after the documented `init.lua` has opened the script: waits for the server and its
/// diagnostics, asks for code lenses, then opens the manifest and waits for its diagnostics.
const DOCUMENTED_SETUP_CHECK: &str = r#"
local out = os.getenv("METASCRIPT_OUT")
local function finish(report)
  local file = io.open(out, "w")
  file:write(vim.fn.json_encode(report))
  file:close()
  vim.cmd("qall!")
end
local function attached(buffer)
  if vim.lsp.get_clients then
    return #vim.lsp.get_clients({ bufnr = buffer }) > 0
  end
  return next(vim.lsp.buf_get_clients(buffer)) ~= nil
end
local function diagnostics(buffer)
  assert(vim.wait(60000, function() return attached(buffer) end, 50), "no server attached")
  assert(vim.wait(60000, function()
    return #vim.diagnostic.get(buffer) > 0
  end, 50), "no diagnostics arrived")
  local found = {}
  for _, d in ipairs(vim.diagnostic.get(buffer)) do
    table.insert(found, { lnum = d.lnum, col = d.col, message = d.message })
  end
  return found
end
local ok, problem = pcall(function()
  local script = vim.api.nvim_get_current_buf()
  local report = { filetype = vim.bo[script].filetype }
  report.script = diagnostics(script)
  local replies = vim.lsp.buf_request_sync(script, "textDocument/codeLens", {
    textDocument = { uri = vim.uri_from_bufnr(script) },
  }, 60000)
  report.lenses = {}
  for _, reply in pairs(replies or {}) do
    for _, lens in ipairs(reply.result or {}) do
      table.insert(report.lenses, lens.command and lens.command.title or "")
    end
  end
  vim.cmd("edit controller.yaml")
  report.manifest = diagnostics(vim.api.nvim_get_current_buf())
  finish(report)
end)
if not ok then
  finish({ error = tostring(problem) })
end
"#;

fn find_nvim() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join("nvim"))
        .find(|path| path.is_file())
}

/// Run by `nvim --headless`: attaches `metascript lsp` to the opened buffer, waits for its
/// diagnostics, asks for completion at the start of the hook's first line, writes a JSON report
/// and quits. Works with Neovim 0.7 (Debian 12) and later.
const NEOVIM_SCRIPT: &str = r#"
local out = os.getenv("METASCRIPT_OUT")
local function finish(report)
  local file = io.open(out, "w")
  file:write(vim.fn.json_encode(report))
  file:close()
  vim.cmd("qall!")
end
local ok, problem = pcall(function()
  local buffer = vim.api.nvim_get_current_buf()
  local client = vim.lsp.start_client({
    name = "metascript",
    cmd = { os.getenv("METASCRIPT_BIN"), "lsp" },
    root_dir = vim.fn.getcwd(),
  })
  assert(client, "the client did not start")
  vim.lsp.buf_attach_client(buffer, client)
  local found = vim.wait(60000, function()
    return #vim.diagnostic.get(buffer) > 0
  end, 50)
  assert(found, "no diagnostics arrived")
  local diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(buffer)) do
    table.insert(diagnostics, { lnum = d.lnum, col = d.col, message = d.message })
  end
  local replies = vim.lsp.buf_request_sync(buffer, "textDocument/completion", {
    textDocument = { uri = vim.uri_from_bufnr(buffer) },
    position = { line = 10, character = 10 },
  }, 60000)
  local labels = {}
  for _, reply in pairs(replies or {}) do
    local items = reply.result and (reply.result.items or reply.result) or {}
    for _, item in ipairs(items) do
      table.insert(labels, item.label)
    end
  end
  vim.lsp.stop_client(client)
  finish({ diagnostics = diagnostics, completion = labels })
end)
if not ok then
  finish({ error = tostring(problem) })
end
"#;
