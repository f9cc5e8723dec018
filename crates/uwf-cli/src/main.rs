//! `uwf`: the command-line front end. Thin by design: parsing, dispatch and
//! reporting; everything else lives in the library crates.

mod activity;
mod child_view;
mod cli;
mod cmd;
mod complete;
mod engine;
mod error;
mod human;
mod input;
mod lookup;
mod output;
mod progress;
mod read_content;
mod report;
mod summary;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

use crate::cli::{Cli, Command};
use crate::error::CliError;

fn main() -> ExitCode {
    complete::answer_if_asked();
    let cli = Cli::parse();
    uwf_util::trace::init_tracing(cli.global.verbose, cli.global.quiet);
    install_report_handler(report::use_color(cli.global.color));
    quiet_expected_panics();
    // Ctrl-C / SIGTERM become a flag: a running agent's process group is
    // stopped instead of orphaned, and `setup` restores the terminal.
    engine::forward_interrupts();
    // `uwf agent context/submit` and `thread answer` load an agent's
    // context through the kit: it opens what `uwf` opens.
    uwf_agent_kit::use_backends(engine::backends().clone());
    let (root, store) = (cli.global.root.clone(), cli.global.store.clone());
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let code = e.exit_code();
            let report = format!("{:?}", miette::Report::new(report::Shown(e)));
            eprintln!(
                "{}",
                redact_report(&report, root.as_deref(), store.as_deref())
            );
            ExitCode::from(code)
        }
    }
}

/// `report` with the store's secrets cut out. What agents print is
/// redacted where the engine reads it; this catches whatever else an error
/// might quote (docs/state.md, "Secrets and file modes"). Best effort: the
/// secrets that cannot be read are the environment's only.
fn redact_report(report: &str, root: Option<&std::path::Path>, store: Option<&str>) -> String {
    let redactor = match uwf_util::root::resolve_root(root) {
        Ok(root) => uwf_engine::secrets::for_root(&root.path, store),
        Err(_) => uwf_engine::secrets::redactor(&[], &[]),
    };
    redactor.redact(report).into_owned()
}

/// A panic of the JSONata evaluator would be a bug; the moderator catches it
/// on its `uwf-moderator` thread and reports an expression error (nothing
/// changes), so the default hook's message would only be noise next to it.
/// Every other panic is reported as usual.
fn quiet_expected_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some("uwf-moderator") {
            tracing::debug!(
                "the JSONata evaluator panicked (reported as an expression error): {info}"
            );
        } else {
            default(info);
        }
    }));
}

/// Diagnostics wrap to the terminal's width; when stderr is a file or a pipe
/// they are not wrapped, so logs and scripts can match whole messages.
/// Colour as `--color` and the environment say ([`report::use_color`]).
fn install_report_handler(color: bool) {
    use std::io::IsTerminal;
    let tty = std::io::stderr().is_terminal();
    // Fails only if a hook is already set, which cannot happen this early.
    let _ = miette::set_hook(Box::new(move |_| {
        Box::new(
            miette::MietteHandlerOpts::new()
                .wrap_lines(tty)
                .color(color)
                .build(),
        )
    }));
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    let format = cli.global.format;
    match cli.command {
        Command::Completions { shell } => {
            // Rendered whole, then written: a reader that goes away
            // (`uwf completions bash | head -1`) ends it quietly.
            output::print_text(&complete::script(shell)?)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Prompt(which) => {
            // Needs no storage root.
            if let Some(f @ (cli::Format::Json | cli::Format::Yaml)) = format {
                let name = format!("{f:?}").to_lowercase();
                return Err(CliError::TextOnly {
                    command: "prompt".into(),
                    instead: "the text is Markdown only; redirect it to a file".into(),
                    format: name,
                });
            }
            output::print_text(&cmd::prompt::text(&which))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => {
            let cmd = Cli::command();
            match dir {
                Some(dir) => {
                    let failed = |e: std::io::Error| {
                        CliError::Output(format!(
                            "cannot write man pages to {}: {e}",
                            dir.display()
                        ))
                    };
                    std::fs::create_dir_all(&dir).map_err(failed)?;
                    clap_mangen::generate_to(cmd, &dir).map_err(failed)?;
                    let mut pages: Vec<String> = std::fs::read_dir(&dir)
                        .map_err(failed)?
                        .filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with("uwf") && n.ends_with(".1"))
                        .collect();
                    pages.sort();
                    output::print(format, &serde_json::json!({ "dir": dir, "pages": pages }))?;
                }
                None => {
                    let mut page = Vec::new();
                    clap_mangen::Man::new(cmd)
                        .render(&mut page)
                        .map_err(|e| CliError::Output(e.to_string()))?;
                    output::print_text(&String::from_utf8_lossy(&page))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cas(sub) => {
            let ctx = open(&cli.global)?;
            // `cas put` is how agents in other languages store their detail
            // nodes (docs/agent-protocol.md): the store's secrets are cut
            // out of what they store, as the Rust kit does.
            let ctx = match &sub {
                cli::CasCommand::Put { .. } => ctx.redacting()?,
                _ => ctx,
            };
            match cmd::cas::run(&ctx, sub)? {
                cmd::cas::Outcome::Value(v) => {
                    output::print(format, &v)?;
                    Ok(ExitCode::SUCCESS)
                }
                cmd::cas::Outcome::Failed(v, e) => {
                    output::print(format, &v)?;
                    Err(e)
                }
            }
        }
        Command::Workflow(cli::WorkflowCommand::Schema) => {
            // Needs no storage root.
            cmd::workflow::print_schema(format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Suite(cli::SuiteCommand::Schema) => {
            // Needs no storage root.
            output::print(format, &uwf_engine::suite::file_schema())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Suite(sub) => {
            cmd::suite::run(&cli.global, sub, format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Workflow(sub) => {
            let ctx = open(&cli.global)?;
            cmd::workflow::run(&ctx, sub, format, cli.global.quiet)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Setup(args) => {
            let root = uwf_util::root::resolve_root(cli.global.root.as_deref())?;
            tracing::debug!(root = %root.path.display(), source = %root.source, "storage root");
            let report = cmd::setup::run_at(&root.path, cli.global.store.as_deref(), args)?;
            output::print(format, &report)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config(sub) => {
            let root = uwf_util::root::resolve_root(cli.global.root.as_deref())?;
            tracing::debug!(root = %root.path.display(), source = %root.source, "storage root");
            let value =
                cmd::config::run(&root, cli.global.store.as_deref(), sub, cli.global.quiet)?;
            output::print(format, &value)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval(args) => {
            let ctx = if cmd::eval::needs_store(&args) {
                Some(open(&cli.global)?)
            } else {
                None
            };
            match cmd::eval::run(ctx.as_ref(), &args)? {
                Some(value) => output::print(format, &value)?,
                None if !cli.global.quiet => {
                    eprintln!("uwf: the expression evaluated to undefined (no value)");
                }
                None => {}
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(sub) => {
            // Run by uwf, the agent has the keys of <root>/.env in its
            // environment already (for an LLM fallback of the extraction).
            let ctx = open(&cli.global)?;
            cmd::agent::run(&ctx, sub, format)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Store(sub) => {
            let root = uwf_util::root::resolve_root(cli.global.root.as_deref())?;
            let out = cmd::store::run(&root.path, cli.global.store.as_deref(), sub)?;
            output::print(format, &out.value)?;
            match out.failure {
                Some(e) => Err(e),
                None => Ok(ExitCode::SUCCESS),
            }
        }
        Command::Worker(args) => {
            let Some(ctx) = open_for_worker(&cli.global)? else {
                // Asked to stop before the store could be reached.
                return Ok(ExitCode::SUCCESS);
            };
            cmd::worker::run(&ctx, &args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve(args) => {
            let ctx = open(&cli.global)?;
            let redactor = uwf_engine::secrets::for_root(&ctx.root, cli.global.store.as_deref());
            cmd::serve::run(ctx, redactor, &args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Thread(sub) => {
            let ctx = open(&cli.global)?;
            if sub.only_reads() {
                ctx.state().read_in_one_snapshot()?;
            }
            cmd::thread::run(&ctx, sub, format)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// [`open`] for `uwf worker`: while the store cannot be reached (a database
/// restarting, a network cut), waits and tries again, as a running worker
/// does, instead of exiting (docs/worker.md). Any other error ends it.
/// `None` when SIGINT/SIGTERM came first.
fn open_for_worker(global: &cli::Global) -> Result<Option<engine::Ctx>, CliError> {
    let mut wait = std::time::Duration::from_millis(250);
    loop {
        match open(global) {
            Ok(ctx) => return Ok(Some(ctx)),
            Err(CliError::Engine(e)) if e.0.is_unavailable() => {
                tracing::warn!(
                    "cannot reach the store ({}); trying again in {}",
                    e.0,
                    humantime::format_duration(wait)
                );
            }
            Err(e) => return Err(e),
        }
        let until = std::time::Instant::now() + wait;
        while std::time::Instant::now() < until {
            if engine::interrupted() {
                return Ok(None);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(10));
    }
}

pub(crate) fn open(global: &cli::Global) -> Result<engine::Ctx, CliError> {
    let root = uwf_util::root::resolve_root(global.root.as_deref())?;
    tracing::debug!(root = %root.path.display(), source = %root.source, "storage root");
    engine::open(&root.path, global.store.as_deref())
}
