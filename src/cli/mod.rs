//! The `metascript` command line.

mod cluster;
mod convert;
mod diff;
mod explain;
pub(crate) mod harness;
pub mod logging;
mod lsp;
mod manifests;
mod offline;
mod pass;
mod places;
mod render;
mod rollout;
mod run;
mod top;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "metascript",
    version = crate::version::LONG,
    about = "Kubernetes controllers as Rhai and Lua scripts"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the operator: watch the metascript.dev controllers (DecoratorControllers,
    /// MapControllers, CompositeControllers) and sync their objects.
    Run(Box<run::RunArgs>),
    /// Run hook scripts against recorded requests and check their responses.
    Test(harness::TestArgs),
    /// Print what one sync pass over the given manifests would do, without a cluster.
    Render(render::RenderArgs),
    /// Check controllers and labelled ConfigMaps of scripts as the admission webhook would:
    /// scripts compile, types resolve, `spec.tests` pass.
    Validate(validate::ValidateArgs),
    /// Show what a controller revision would change in a cluster before it is applied: objects
    /// created, changed (field by field) and deleted, labels, annotations and status of its
    /// targets and parents, hook errors. Reads the cluster, writes nothing.
    Diff(diff::DiffArgs),
    /// A controller's staged rollout (`spec.rollout`): `status` shows where it stands,
    /// `promote` serves the candidate revision everywhere, `abort` stops it.
    Rollout(rollout::RolloutArgs),
    /// The cluster's controllers sorted by what they cost the operator (hook CPU, calls,
    /// operations, memory, writes, failures), from their `status.usage`; `--watch` to follow.
    Top(top::TopArgs),
    /// Explain an object in a cluster: which controller manages it, from which script revision
    /// and which version of what, its recent failures, and what its hook would answer now.
    Explain(explain::ExplainArgs),
    /// Rewrite Metacontroller DecoratorControllers and CompositeControllers
    /// (metacontroller.k8s.io) as metascript.dev ones that call the same webhooks; prints the
    /// manifests (docs/migrating.md).
    Convert(convert::ConvertArgs),
    /// Print the CustomResourceDefinitions of the metascript.dev API.
    Crds {
        /// Print a JSON Schema of the controllers' manifests instead, for editors using
        /// yaml-language-server (docs/editors.md).
        #[arg(long)]
        json_schema: bool,
    },
    /// Write editor definitions of the hook environment (`request`, responses, helpers): a
    /// LuaLS `---@meta` file or a Rhai `.d.rhai` file (docs/scripting.md).
    Definitions {
        /// The script language.
        #[arg(long, value_enum)]
        lang: DefinitionsLanguage,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// Serve editors: a language server over standard input and output for hook scripts, in
    /// `.rhai`/`.lua` files and inline in controller manifests (docs/editors.md).
    Lsp(lsp::LspArgs),
    /// Print a shell completion script (e.g. `metascript completions bash > /etc/bash_completion.d/metascript`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `--lang` of `definitions` (the API's `Language` has no clap derive).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum DefinitionsLanguage {
    Lua,
    Rhai,
}

impl From<DefinitionsLanguage> for crate::api::Language {
    fn from(language: DefinitionsLanguage) -> Self {
        match language {
            DefinitionsLanguage::Lua => crate::api::Language::Lua,
            DefinitionsLanguage::Rhai => crate::api::Language::Rhai,
        }
    }
}

/// Runs a command that talks to a cluster and prints a text: the text on success, else the
/// error (with its causes) on standard error and exit status 1.
fn print_async(command: impl std::future::Future<Output = anyhow::Result<String>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command line; the process exit code follows the command's own conventions.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run::run(*args),
        Command::Test(args) => harness::run(args),
        Command::Render(args) => render::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Explain(args) => print_async(explain::explain(&args)),
        Command::Rollout(args) => print_async(rollout::rollout(&args)),
        Command::Top(args) => print_async(top::top(&args)),
        Command::Convert(args) => convert::run(args),
        Command::Lsp(args) => lsp::run(args),
        Command::Completions { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "metascript",
                &mut std::io::stdout(),
            );
            ExitCode::SUCCESS
        }
        Command::Definitions { lang, output } => {
            let text = crate::script::definitions(lang.into(), &crate::kinds::hooks());
            match output {
                None => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Some(path) => match std::fs::write(&path, text) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(error) => {
                        eprintln!("error: writing {}: {error}", path.display());
                        ExitCode::FAILURE
                    }
                },
            }
        }
        Command::Crds { json_schema } => {
            let text = if json_schema {
                crate::kinds::json_schema_string().map_err(|e| e.to_string())
            } else {
                crate::kinds::crds_yaml().map_err(|e| e.to_string())
            };
            match text {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
