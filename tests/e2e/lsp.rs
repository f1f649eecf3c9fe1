//! `metascript lsp` driven as editors drive it: a client over the process's stdio through a whole
//! session (initialize, open a manifest, edit it, diagnostics, completion, hover, definition,
//! shutdown), a code lens running a script's test cases, and Neovim's own LSP client, headless,
//! against the same binary.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

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
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_metascript"))
            .arg("lsp")
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

    /// The diagnostics published for `uri` at `version`.
    fn diagnostics(&mut self, uri: &str, version: i64) -> Vec<Value> {
        let matches = |message: &Value| {
            message["method"] == "textDocument/publishDiagnostics"
                && message["params"]["uri"] == uri
                && message["params"]["version"] == version
        };
        if let Some(at) = self.held.iter().position(matches) {
            let message = self.held.remove(at);
            return message["params"]["diagnostics"].as_array().unwrap().clone();
        }
        loop {
            let message = self.messages.recv_timeout(HANG).expect("diagnostics");
            if matches(&message) {
                return message["params"]["diagnostics"].as_array().unwrap().clone();
            }
            self.held.push(message);
        }
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
    let mut client = Client::start();

    let initialized = client.request(
        "initialize",
        json!({"processId": null, "rootUri": format!("file://{}", dir.path().display()),
               "capabilities": {}}),
    );
    let capabilities = &initialized["capabilities"];
    assert_eq!(capabilities["hoverProvider"], true, "{initialized}");
    assert_eq!(
        capabilities["completionProvider"]["triggerCharacters"],
        json!(["."])
    );
    client.notify("initialized", json!({}));

    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "yaml", "version": 1, "text": MANIFEST}}),
    );
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());

    // An edit that breaks the hook's first line: the error is on that line of the file, at the
    // `=` Rhai stops at.
    let broken_line = "          let = 5;";
    let broken = MANIFEST.replace(
        "          let n = get_path(request.object, \"spec.replicas\", 1);",
        broken_line,
    );
    client.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 2}, "contentChanges": [{"text": broken}]}),
    );
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
    client.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri, "version": 3}, "contentChanges": [{"text": typing}]}),
    );
    let document = json!({"uri": uri});
    let after_request = typing_line.find("request.").unwrap() + "request.".len();
    let request_fields = client.request(
        "textDocument/completion",
        json!({"textDocument": document, "position": position(15, after_request)}),
    );
    assert!(labels(&request_fields).contains(&"object".to_string()));
    let spec_fields = client.request(
        "textDocument/completion",
        json!({"textDocument": document, "position": position(15, typing_line.len())}),
    );
    let spec_fields = labels(&spec_fields);
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

    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    client.notify("exit", Value::Null);
    let status = client.child.wait().unwrap();
    assert!(status.success(), "{status}");
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
    let mut client = Client::start();
    client.request(
        "initialize",
        json!({"processId": null, "rootUri": format!("file://{}", dir.path().display()),
               "capabilities": {}}),
    );
    client.notify("initialized", json!({}));
    client.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri, "languageId": "rhai", "version": 1, "text": script}}),
    );
    // It compiles: a misspelled helper is only found when a case runs it.
    assert_eq!(client.diagnostics(&uri, 1), Vec::<Value>::new());
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
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let failure = &diagnostics[0];
    assert_eq!(failure["range"]["start"]["line"], 1, "{failure}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with("sync.test.yaml :: labels it: "),
        "{message}"
    );
    assert!(message.contains("did you mean `label`"), "{message}");
    assert_eq!(client.request("shutdown", Value::Null), Value::Null);
    client.notify("exit", Value::Null);
    assert!(client.child.wait().unwrap().success());
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
