//! The server: the protocol's messages in and out (over stdio, or any [`Connection`]), the open
//! files, and each request answered from them. Edits arriving together are checked once, after
//! the last of them, so a burst of keystrokes costs one check. A cluster's types, when it reads
//! one, arrive between messages and the open files are checked again with them.

use super::cases::{self, CaseRunner};
use super::cluster::{self, Cluster, ClusterCrds};
use super::complete::{self, LibraryFunction, ObjectSchemas, Setting};
use super::diagnose::{self, Checks, FileProblem};
use super::schema::{NoSchemas, RequestSchemas};
use super::scripts::{Manifest, Script};
use super::workspace::Workspace;
use crate::api::{HookKind, Language};
use crate::kinds;
use crate::script::{ScriptEngine, ScriptOrigin};
use crate::validate::Severity;
use crate::yaml;
use lsp_server::{Connection, Message, Notification, Request, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, DidSaveTextDocument,
    LogMessage, Notification as _, PublishDiagnostics, ShowMessage,
};
use lsp_types::request::{
    CodeLensRequest, Completion, ExecuteCommand, GotoDefinition, HoverRequest, Request as _,
};
use lsp_types::{
    CodeLens, CodeLensOptions, CodeLensParams, Command, CompletionItem, CompletionItemKind,
    CompletionOptions, CompletionParams, Diagnostic, DiagnosticSeverity, ExecuteCommandOptions,
    ExecuteCommandParams, GotoDefinitionParams, GotoDefinitionResponse, Hover, HoverContents,
    HoverParams, HoverProviderCapability, InitializeParams, Location, LogMessageParams,
    MarkupContent, MarkupKind, MessageType, OneOf, Position, PublishDiagnosticsParams, Range,
    ServerCapabilities, ServerInfo, ShowMessageParams, TextDocumentSyncCapability,
    TextDocumentSyncKind, TextDocumentSyncOptions, TextDocumentSyncSaveOptions, Uri,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// A failure of the connection itself (the editor went away, or spoke something else).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("language server protocol: {0}")]
    Protocol(#[from] lsp_server::ProtocolError),
    #[error("language server protocol: {0}")]
    Json(#[from] serde_json::Error),
    #[error("the editor's connection closed: {0}")]
    Closed(String),
}

/// The command a code lens runs: the cases of a test file (arguments: the file's URI, the test
/// file's path, and the 0-based line of the lens).
pub(super) const RUN_TESTS: &str = "metascript.runTests";

/// The command that reads the cluster's CustomResourceDefinitions again (no arguments), when the
/// server reads a cluster.
pub(super) const READ_CLUSTER: &str = "metascript.readCluster";

/// Serves the editor on standard input and output until it says `exit`; `runner` runs test
/// files for the code lenses, `cluster` (if any) reads the cluster's types.
pub fn serve_stdio(
    runner: &dyn CaseRunner,
    cluster: Option<Arc<dyn ClusterCrds>>,
) -> Result<(), ServerError> {
    let (connection, threads) = Connection::stdio();
    serve(&connection, runner, cluster)?;
    drop(connection);
    threads
        .join()
        .map_err(|error| ServerError::Closed(error.to_string()))
}

/// Serves one editor over a connection: the handshake, then every message until `shutdown`.
/// The cluster, if any, is read once the handshake is done and again on [`READ_CLUSTER`].
pub fn serve(
    connection: &Connection,
    runner: &dyn CaseRunner,
    cluster: Option<Arc<dyn ClusterCrds>>,
) -> Result<(), ServerError> {
    let (id, params) = connection.initialize_start()?;
    let params: InitializeParams = serde_json::from_value(params)?;
    let initialized = serde_json::json!({
        "capabilities": capabilities(cluster.is_some()),
        "serverInfo": ServerInfo {
            name: "metascript".into(),
            version: Some(crate::version::VERSION.into()),
        },
    });
    connection.initialize_finish(id, initialized)?;
    let mut server = Server {
        engine: ScriptEngine::new(),
        workspace: Workspace::scan(workspace_root(&params).as_deref(), Arc::new([])),
        files: BTreeMap::new(),
        changed: BTreeSet::new(),
        runner,
        cluster: cluster.map(|source| Cluster::new(source, cluster::TIMEOUT)),
    };
    if let Some(cluster) = &mut server.cluster {
        tracing::info!(
            "reading the CustomResourceDefinitions of {}",
            cluster.describe()
        );
        cluster.start();
    }
    loop {
        let (answer, deadline) = server.cluster.as_ref().map_or_else(
            || (crossbeam_channel::never(), crossbeam_channel::never()),
            Cluster::waits,
        );
        crossbeam_channel::select! {
            recv(connection.receiver) -> message => {
                let Ok(message) = message else {
                    return Ok(());
                };
                if server.handle(connection, message)? == Flow::Shutdown {
                    return Ok(());
                }
                // Whatever else has arrived is handled before checking: a burst of edits is
                // checked once, in its final state.
                while let Ok(message) = connection.receiver.try_recv() {
                    if server.handle(connection, message)? == Flow::Shutdown {
                        return Ok(());
                    }
                }
            }
            recv(answer) -> answer => {
                if let Some(cluster) = &mut server.cluster {
                    let read = cluster.finish(answer.ok());
                    server.cluster_read(connection, read)?;
                }
            }
            recv(deadline) -> _ => {
                if let Some(cluster) = &mut server.cluster {
                    let read = cluster.given_up();
                    server.cluster_read(connection, read)?;
                }
            }
        }
        server.publish_changed(connection)?;
    }
}

fn capabilities(cluster: bool) -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Options(
            TextDocumentSyncOptions {
                open_close: Some(true),
                change: Some(TextDocumentSyncKind::FULL),
                save: Some(TextDocumentSyncSaveOptions::Supported(true)),
                ..TextDocumentSyncOptions::default()
            },
        )),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into()]),
            ..CompletionOptions::default()
        }),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        code_lens_provider: Some(CodeLensOptions {
            resolve_provider: Some(false),
        }),
        execute_command_provider: Some(ExecuteCommandOptions {
            commands: std::iter::once(RUN_TESTS)
                .chain(cluster.then_some(READ_CLUSTER))
                .map(String::from)
                .collect(),
            ..ExecuteCommandOptions::default()
        }),
        ..ServerCapabilities::default()
    }
}

fn workspace_root(params: &InitializeParams) -> Option<PathBuf> {
    let folder = params
        .workspace_folders
        .as_ref()
        .and_then(|folders| folders.first())
        .map(|folder| &folder.uri);
    #[allow(deprecated)] // Older clients give only `rootUri`.
    let uri = folder.or(params.root_uri.as_ref())?;
    file_path(uri)
}

#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    Shutdown,
}

/// What an open file is to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    /// YAML: controllers, ConfigMaps of scripts, anything else (checked for what it holds).
    Manifest,
    Script(Language),
    /// Something this server has nothing to say about.
    Other,
}

impl FileKind {
    fn of(uri: &Uri) -> FileKind {
        let path = uri.path().as_str();
        if path.ends_with(".yaml") || path.ends_with(".yml") {
            FileKind::Manifest
        } else {
            Language::from_file_name(path).map_or(FileKind::Other, FileKind::Script)
        }
    }
}

struct OpenFile {
    kind: FileKind,
    text: String,
    version: i32,
    /// The failures of the last test run from a code lens, until the next edit.
    failed_cases: Vec<FileProblem>,
}

struct Server<'a> {
    engine: ScriptEngine,
    workspace: Workspace,
    files: BTreeMap<Uri, OpenFile>,
    /// Files edited since their problems were last published.
    changed: BTreeSet<Uri>,
    runner: &'a dyn CaseRunner,
    /// The cluster whose types it reads, if told to read one.
    cluster: Option<Cluster>,
}

impl Server<'_> {
    fn handle(&mut self, connection: &Connection, message: Message) -> Result<Flow, ServerError> {
        match message {
            Message::Request(request) => {
                if connection.handle_shutdown(&request)? {
                    return Ok(Flow::Shutdown);
                }
                let response = self.respond(request);
                connection
                    .sender
                    .send(Message::Response(response))
                    .map_err(|error| ServerError::Closed(error.to_string()))?;
            }
            Message::Notification(notification) => {
                match self.notified(connection, notification) {
                    // One notification the server cannot read is no reason to stop serving.
                    Err(ServerError::Json(error)) => {
                        tracing::warn!(%error, "ignored a notification that does not parse")
                    }
                    other => other?,
                }
            }
            Message::Response(_) => {}
        }
        Ok(Flow::Continue)
    }

    fn notified(
        &mut self,
        connection: &Connection,
        notification: Notification,
    ) -> Result<(), ServerError> {
        match notification.method.as_str() {
            DidOpenTextDocument::METHOD => {
                let params: lsp_types::DidOpenTextDocumentParams =
                    serde_json::from_value(notification.params)?;
                let document = params.text_document;
                self.files.insert(
                    document.uri.clone(),
                    OpenFile {
                        kind: FileKind::of(&document.uri),
                        text: document.text,
                        version: document.version,
                        failed_cases: Vec::new(),
                    },
                );
                self.changed.insert(document.uri);
            }
            DidChangeTextDocument::METHOD => {
                let params: lsp_types::DidChangeTextDocumentParams =
                    serde_json::from_value(notification.params)?;
                let uri = params.text_document.uri;
                // Full synchronization: the last change is the whole text.
                if let (Some(file), Some(change)) = (
                    self.files.get_mut(&uri),
                    params.content_changes.into_iter().last(),
                ) {
                    file.text = change.text;
                    file.version = params.text_document.version;
                    file.failed_cases.clear();
                    self.changed.insert(uri);
                }
            }
            DidSaveTextDocument::METHOD => {
                let params: lsp_types::DidSaveTextDocumentParams =
                    serde_json::from_value(notification.params)?;
                // A saved manifest may add a type or a ConfigMap other files use.
                if FileKind::of(&params.text_document.uri) == FileKind::Manifest {
                    self.workspace = self.workspace.rescan();
                    self.changed.extend(self.files.keys().cloned());
                }
            }
            DidCloseTextDocument::METHOD => {
                let params: lsp_types::DidCloseTextDocumentParams =
                    serde_json::from_value(notification.params)?;
                let uri = params.text_document.uri;
                self.files.remove(&uri);
                self.changed.remove(&uri);
                publish(connection, uri, Vec::new(), None)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Takes a reading of the cluster: its types replace those of the last one, and every open
    /// file is checked again with them; a failure keeps the last ones and is said once, to the
    /// user.
    fn cluster_read(
        &mut self,
        connection: &Connection,
        read: cluster::Read,
    ) -> Result<(), ServerError> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let source = cluster.describe();
        match read {
            Ok(crds) => {
                let message = format!(
                    "read {} CustomResourceDefinition(s) from {source}",
                    crds.len()
                );
                tracing::info!("{message}");
                self.workspace = Workspace::scan(self.workspace.root.as_deref(), crds.into());
                self.changed.extend(self.files.keys().cloned());
                notify(
                    connection,
                    LogMessage::METHOD,
                    LogMessageParams {
                        typ: MessageType::INFO,
                        message,
                    },
                )
            }
            Err(error) => {
                let message = format!(
                    "metascript lsp could not read the CustomResourceDefinitions of {source}: \
                     {error}. Custom resources are known from the workspace's manifests (and \
                     an earlier reading, if any); the command {READ_CLUSTER} tries again."
                );
                tracing::warn!("{message}");
                notify(
                    connection,
                    ShowMessage::METHOD,
                    ShowMessageParams {
                        typ: MessageType::WARNING,
                        message,
                    },
                )
            }
        }
    }

    /// Publishes the problems of every file edited since the last time.
    fn publish_changed(&mut self, connection: &Connection) -> Result<(), ServerError> {
        for uri in std::mem::take(&mut self.changed) {
            let Some(file) = self.files.get(&uri) else {
                continue;
            };
            let started = std::time::Instant::now();
            let problems = self.problems(&uri, file);
            tracing::debug!(
                uri = uri.as_str(),
                problems = problems.len(),
                elapsed_us = started.elapsed().as_micros() as u64,
                "checked"
            );
            let lines = Lines::new(&file.text);
            let diagnostics = problems
                .iter()
                .chain(&file.failed_cases)
                .map(|p| diagnostic(&lines, p))
                .collect();
            publish(connection, uri.clone(), diagnostics, Some(file.version))?;
        }
        Ok(())
    }

    fn problems(&self, uri: &Uri, file: &OpenFile) -> Vec<FileProblem> {
        match file.kind {
            FileKind::Manifest => {
                let path = file_path(uri);
                diagnose::manifest(
                    &Checks {
                        engine: &self.engine,
                        resolver: &self.workspace.resolver,
                        config_maps: &self.workspace.config_maps,
                        dir: path.as_deref().and_then(std::path::Path::parent),
                    },
                    &file.text,
                )
            }
            FileKind::Script(language) => {
                let path = file_path(uri).unwrap_or_else(|| PathBuf::from(uri.as_str()));
                diagnose::script_file(&self.engine, &path, language, &file.text)
            }
            FileKind::Other => Vec::new(),
        }
    }

    fn respond(&mut self, request: Request) -> Response {
        let id = request.id.clone();
        let result = match request.method.as_str() {
            CodeLensRequest::METHOD => parse::<CodeLensParams>(request)
                .map(|params| serde_json::to_value(self.code_lenses(&params.text_document.uri))),
            ExecuteCommand::METHOD => parse::<ExecuteCommandParams>(request).map(|params| {
                let done = match params.command.as_str() {
                    RUN_TESTS => self.run_tests(&params.arguments),
                    READ_CLUSTER => self.read_cluster(),
                    other => Err(format!("no command {other}")),
                };
                match done {
                    Ok(summary) => serde_json::to_value(summary),
                    Err(problem) => Ok(serde_json::Value::String(problem)),
                }
            }),
            Completion::METHOD => parse::<CompletionParams>(request).map(|params| {
                let at = params.text_document_position;
                serde_json::to_value(self.completion(&at.text_document.uri, at.position))
            }),
            HoverRequest::METHOD => parse::<HoverParams>(request).map(|params| {
                let at = params.text_document_position_params;
                serde_json::to_value(self.hover(&at.text_document.uri, at.position))
            }),
            GotoDefinition::METHOD => parse::<GotoDefinitionParams>(request).map(|params| {
                let at = params.text_document_position_params;
                serde_json::to_value(self.definition(&at.text_document.uri, at.position))
            }),
            method => {
                return Response::new_err(
                    id,
                    lsp_server::ErrorCode::MethodNotFound as i32,
                    format!("metascript lsp does not answer {method}"),
                );
            }
        };
        match result {
            Ok(Ok(value)) => Response::new_ok(id, value),
            Ok(Err(error)) | Err(error) => Response::new_err(
                id,
                lsp_server::ErrorCode::InvalidParams as i32,
                error.to_string(),
            ),
        }
    }

    /// A lens on each script that test files beside it run: as a `script`, at the top of a
    /// script file; as a `controller`, on the `inline` of the hook they call.
    fn code_lenses(&self, uri: &Uri) -> Option<Vec<CodeLens>> {
        let file = self.files.get(uri)?;
        let path = file_path(uri)?;
        let targets = cases::targets(&path);
        let mut places: Vec<(u32, &cases::TestTarget)> = Vec::new();
        match file.kind {
            FileKind::Script(_) => {
                places.extend(targets.iter().filter(|t| !t.controller).map(|t| (0, t)))
            }
            FileKind::Manifest => {
                let manifest = Manifest::parse(&file.text).ok()?;
                for script in manifest.scripts() {
                    let (Some(hook), Some(node)) =
                        (script.hook, manifest.node(script.document, &script.path))
                    else {
                        continue;
                    };
                    let line = node.key.map_or(node.value.start.line, |key| key.start.line);
                    places.extend(targets.iter().filter(|t| t.runs(hook)).map(|t| (line, t)));
                }
            }
            FileKind::Other => {}
        }
        let lenses = places
            .into_iter()
            .map(|(line, target)| {
                let name = target
                    .test_file
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let at = Position { line, character: 0 };
                CodeLens {
                    range: Range { start: at, end: at },
                    command: Some(Command {
                        title: format!("run {} case(s) of {name}", target.cases),
                        command: RUN_TESTS.into(),
                        arguments: Some(vec![
                            serde_json::json!(uri.as_str()),
                            serde_json::json!(target.test_file),
                            serde_json::json!(line),
                        ]),
                    }),
                    data: None,
                }
            })
            .collect();
        Some(lenses)
    }

    /// Runs a test file's cases for a lens; each failure becomes a problem of the file (where in
    /// the script it failed, or on the lens's line), published with its other problems until
    /// the next edit. Returns `N passed, M failed`.
    fn run_tests(&mut self, arguments: &[serde_json::Value]) -> Result<String, String> {
        let (Some(uri), Some(test_file), Some(line)) = (
            arguments.first().and_then(|a| a.as_str()),
            arguments.get(1).and_then(|a| a.as_str()),
            arguments.get(2).and_then(|a| a.as_u64()),
        ) else {
            return Err(format!(
                "{RUN_TESTS} takes a file URI, a test file and a line"
            ));
        };
        let uri = Uri::from_str(uri).map_err(|e| format!("{uri}: {e}"))?;
        let path = file_path(&uri).ok_or_else(|| format!("{} is not a file", uri.as_str()))?;
        let test_file = PathBuf::from(test_file);
        let outcomes = self.runner.run(&test_file)?;
        let file = self
            .files
            .get_mut(&uri)
            .ok_or_else(|| format!("{} is not open", uri.as_str()))?;
        let name = test_file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let at = yaml::Position {
            line: line as u32,
            column: 0,
        };
        let fallback = yaml::Range { start: at, end: at };
        file.failed_cases = outcomes
            .iter()
            .filter_map(|outcome| {
                let failure = outcome.failure.as_ref()?;
                let range = outcome
                    .spot
                    .as_ref()
                    .and_then(|spot| {
                        let manifest = file.kind == FileKind::Manifest;
                        diagnose::spot_range(&file.text, &path, manifest, spot)
                    })
                    .unwrap_or(fallback);
                Some(FileProblem {
                    range,
                    severity: Severity::Error,
                    message: format!(
                        "{} :: {}: {}",
                        name.as_deref().unwrap_or_default(),
                        outcome.name,
                        diagnose::without_excerpt(failure)
                    ),
                })
            })
            .collect();
        let failed = file.failed_cases.len();
        self.changed.insert(uri);
        Ok(format!(
            "{} passed, {failed} failed",
            outcomes.len() - failed
        ))
    }

    /// Starts reading the cluster again; its types arrive later, with a message.
    fn read_cluster(&mut self) -> Result<String, String> {
        let cluster = self.cluster.as_mut().ok_or(
            "no cluster to read: start metascript lsp with --kubeconfig, --context or --cluster",
        )?;
        let started = cluster.start();
        let source = cluster.describe();
        Ok(if started {
            format!("reading the CustomResourceDefinitions of {source}")
        } else {
            format!("already reading the CustomResourceDefinitions of {source}")
        })
    }

    /// The script at a place in an open file, and what completion knows of it.
    fn script_at(&self, uri: &Uri, at: Position) -> Option<ScriptAt> {
        let file = self.files.get(uri)?;
        let lines = Lines::new(&file.text);
        let at = lines.position(at);
        match file.kind {
            FileKind::Script(language) => Some(ScriptAt {
                language,
                code: file.text.clone(),
                offset: lines.offset(at),
                hooks: kinds::hooks(),
                libraries: Vec::new(),
                place: None,
            }),
            FileKind::Manifest => {
                let manifest = Manifest::parse(&file.text).ok()?;
                let scripts = manifest.scripts();
                let (script, offset) = manifest.script_at(&scripts, at)?;
                let hooks = match (script.hook, kinds::of(manifest.value(script))) {
                    (Some(hook), _) => vec![hook],
                    (None, Some(kind)) => kind.name().hooks().to_vec(),
                    (None, None) => kinds::hooks(),
                };
                Some(ScriptAt {
                    language: script.language,
                    code: manifest.text(script).to_string(),
                    offset,
                    hooks,
                    libraries: libraries_of(&manifest, &scripts, script),
                    place: Some(Place {
                        document: script.document,
                        manifest,
                        scripts,
                    }),
                })
            }
            FileKind::Other => None,
        }
    }

    fn schemas<'a>(&'a self, script: &'a ScriptAt) -> Box<dyn ObjectSchemas + 'a> {
        match script
            .place
            .as_ref()
            .and_then(|place| Some((place, place.controller()?)))
        {
            Some((place, controller)) => Box::new(RequestSchemas::new(
                controller,
                &self.workspace,
                Some(&place.manifest),
            )),
            None => Box::new(NoSchemas),
        }
    }

    fn completion(&self, uri: &Uri, at: Position) -> Option<Vec<CompletionItem>> {
        let script = self.script_at(uri, at)?;
        let schemas = self.schemas(&script);
        let setting = script.setting(&*schemas);
        let cursor = complete::cursor(script.language, &script.code, script.offset);
        let items = complete::complete(&setting, &cursor);
        Some(
            items
                .into_iter()
                .map(|item| CompletionItem {
                    label: item.label,
                    kind: Some(match item.kind {
                        complete::ItemKind::Function => CompletionItemKind::FUNCTION,
                        complete::ItemKind::Variable => CompletionItemKind::VARIABLE,
                        complete::ItemKind::Field => CompletionItemKind::FIELD,
                    }),
                    detail: Some(item.detail),
                    documentation: Some(lsp_types::Documentation::MarkupContent(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value: item.documentation,
                    })),
                    ..CompletionItem::default()
                })
                .collect(),
        )
    }

    fn hover(&self, uri: &Uri, at: Position) -> Option<Hover> {
        let script = self.script_at(uri, at)?;
        let schemas = self.schemas(&script);
        let setting = script.setting(&*schemas);
        let (cursor, word) = complete::word_at(script.language, &script.code, script.offset)?;
        let text = complete::hover(&setting, &cursor, &word)?;
        Some(Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: text,
            }),
            range: None,
        })
    }

    /// Where a library function (or, in Lua, a library) used at the cursor is defined.
    fn definition(&self, uri: &Uri, at: Position) -> Option<GotoDefinitionResponse> {
        let script = self.script_at(uri, at)?;
        let place = script.place.as_ref()?;
        let (cursor, word) = complete::word_at(script.language, &script.code, script.offset)?;
        let function = |library: Option<&str>| {
            script
                .libraries
                .iter()
                .find(|f| f.name == word && library.is_none_or(|name| f.library == name))
                .map(|f| (f.library.clone(), f.line, Some(f.column)))
        };
        // A Rhai library's functions are called by name; a Lua library is a global table.
        let (library, line, column) = match (script.language, cursor.chain.as_slice()) {
            (Language::Rhai, []) => function(None)?,
            (Language::Lua, [library]) => function(Some(library))?,
            (Language::Lua, []) => (word, 1, None),
            _ => return None,
        };
        let defined = place.scripts.iter().find(|s| {
            s.document == place.document
                && matches!(&s.origin, ScriptOrigin::InlineLibrary { library: name, .. } if *name == library)
        })?;
        let node = place.manifest.node(defined.document, &defined.path)?;
        let target = place.manifest.index.file_position(node, line, column)?;
        let position = Lines::new(&self.files.get(uri)?.text).to_lsp(target);
        Some(GotoDefinitionResponse::Scalar(Location {
            uri: uri.clone(),
            range: Range {
                start: position,
                end: position,
            },
        }))
    }
}

/// The functions of the inline libraries a script is compiled with: its controller's, in its
/// language.
fn libraries_of(manifest: &Manifest, scripts: &[Script], script: &Script) -> Vec<LibraryFunction> {
    scripts
        .iter()
        .filter(|other| other.document == script.document && other.language == script.language)
        .filter_map(|other| match &other.origin {
            ScriptOrigin::InlineLibrary { library, .. } => Some(complete::library_functions(
                other.language,
                library,
                manifest.text(other),
            )),
            _ => None,
        })
        .flatten()
        .collect()
}

/// A script the cursor is in.
struct ScriptAt {
    language: Language,
    code: String,
    /// The cursor, in characters into `code`.
    offset: usize,
    hooks: Vec<HookKind>,
    libraries: Vec<LibraryFunction>,
    /// Where it is, for a script in a manifest.
    place: Option<Place>,
}

/// A script's manifest, the manifest's scripts and the script's document.
struct Place {
    manifest: Manifest,
    scripts: Vec<Script>,
    document: usize,
}

impl Place {
    /// The controller whose script it is.
    fn controller(&self) -> Option<&serde_json::Value> {
        let value = &self.manifest.documents.get(self.document)?.1;
        kinds::of(value).map(|_| value)
    }
}

impl ScriptAt {
    fn setting<'a>(&self, schemas: &'a dyn ObjectSchemas) -> Setting<'a> {
        Setting {
            language: self.language,
            hooks: self.hooks.clone(),
            libraries: self.libraries.clone(),
            schemas,
        }
    }
}

fn parse<P: serde::de::DeserializeOwned>(request: Request) -> Result<P, serde_json::Error> {
    serde_json::from_value(request.params)
}

fn publish(
    connection: &Connection,
    uri: Uri,
    diagnostics: Vec<Diagnostic>,
    version: Option<i32>,
) -> Result<(), ServerError> {
    let params = PublishDiagnosticsParams {
        uri,
        diagnostics,
        version,
    };
    notify(connection, PublishDiagnostics::METHOD, params)
}

fn notify(
    connection: &Connection,
    method: &str,
    params: impl serde::Serialize,
) -> Result<(), ServerError> {
    let notification = Notification::new(method.into(), params);
    connection
        .sender
        .send(Message::Notification(notification))
        .map_err(|error| ServerError::Closed(error.to_string()))
}

fn diagnostic(lines: &Lines, problem: &FileProblem) -> Diagnostic {
    Diagnostic {
        range: Range {
            start: lines.to_lsp(problem.range.start),
            end: lines.to_lsp(problem.range.end),
        },
        severity: Some(match problem.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        source: Some("metascript".into()),
        message: problem.message.clone(),
        ..Diagnostic::default()
    }
}

/// The lines of a text, to turn the server's positions (columns in characters) into the
/// protocol's (columns in UTF-16 code units) and back.
struct Lines<'a> {
    lines: Vec<&'a str>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Lines<'a> {
        Lines {
            lines: text.split('\n').collect(),
        }
    }

    fn line(&self, line: u32) -> &str {
        self.lines.get(line as usize).copied().unwrap_or_default()
    }

    fn to_lsp(&self, at: yaml::Position) -> Position {
        let character = self
            .line(at.line)
            .chars()
            .take(at.column as usize)
            .map(char::len_utf16)
            .sum::<usize>();
        Position {
            line: at.line,
            character: character as u32,
        }
    }

    fn position(&self, at: Position) -> yaml::Position {
        let mut units = 0;
        let column = self
            .line(at.line)
            .chars()
            .take_while(|c| {
                units += c.len_utf16() as u32;
                units <= at.character
            })
            .count();
        yaml::Position {
            line: at.line,
            column: column as u32,
        }
    }

    /// The character offset of a position in the whole text.
    fn offset(&self, at: yaml::Position) -> usize {
        let before: usize = self.lines[..(at.line as usize).min(self.lines.len())]
            .iter()
            .map(|line| line.chars().count() + 1)
            .sum();
        before + at.column as usize
    }
}

/// The local path of a `file:` URI.
pub(super) fn file_path(uri: &Uri) -> Option<PathBuf> {
    let text = uri.as_str().strip_prefix("file://")?;
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(byte) = text
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            decoded.push(byte);
            at += 3;
        } else {
            decoded.push(bytes[at]);
            at += 1;
        }
    }
    Some(PathBuf::from(String::from_utf8(decoded).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn positions_convert_between_characters_and_utf16() {
        let lines = Lines::new("a: \"é😀x\"\nb");
        let at = yaml::Position { line: 0, column: 6 };
        assert_eq!(
            lines.to_lsp(at),
            Position {
                line: 0,
                character: 7
            }
        );
        assert_eq!(
            lines.position(Position {
                line: 0,
                character: 7
            }),
            at
        );
        assert_eq!(lines.offset(yaml::Position { line: 1, column: 1 }), 10);
    }

    #[test]
    fn file_uris_are_decoded_to_paths() {
        let uri = Uri::from_str("file:///tmp/my%20hooks/sync.rhai").unwrap();
        assert_eq!(
            file_path(&uri).unwrap(),
            Path::new("/tmp/my hooks/sync.rhai")
        );
    }
}
