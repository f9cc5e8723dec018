//! Shell completion: the scripts `uwf completions <shell>` prints call
//! `uwf` back (`UWF_COMPLETE=<shell> uwf -- <words>`, clap_complete's dynamic
//! completion), so thread ids and workflow names come from the store at the
//! moment of completing: the storage root's, or the database `UWF_STORE`
//! (or the root's `store:` setting) names.
//!
//! The root and store are the ones of the environment
//! (`$UNCAGED_WORKFLOW_STORAGE_ROOT`, `$UWF_STORE`, …): a `--root` or
//! `--store` typed on the same command line is not seen. Completion never
//! fails: a store that cannot be read offers nothing.

use std::io::Write as _;

use clap::CommandFactory;
use clap_complete::engine::CompletionCandidate;
use clap_complete::env::{CompleteEnv, Shells};

use crate::cli::Cli;
use crate::engine::Ctx;
use crate::error::CliError;

/// The environment variable that switches `uwf` into completing.
const VAR: &str = "UWF_COMPLETE";

/// Answers a completion request and exits, if this run is one.
pub fn answer_if_asked() {
    CompleteEnv::with_factory(Cli::command).var(VAR).complete();
}

/// The registration script for `shell`: it asks `uwf` for candidates.
pub fn script(shell: clap_complete::Shell) -> Result<String, CliError> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let Some(completer) = shells.completer(&name) else {
        return Err(CliError::Output(format!("no completion for shell {name}")));
    };
    let mut buf = Vec::new();
    completer
        .write_registration(VAR, "uwf", "uwf", "uwf", &mut buf)
        .map_err(|e| CliError::Output(e.to_string()))?;
    let _ = buf.flush();
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn ctx() -> Option<Ctx> {
    let root = uwf_util::root::resolve_root(None).ok()?;
    crate::engine::open(&root.path, None).ok()
}

/// Thread ids, newest first (active ones with their task as help), and
/// `@last`.
pub fn threads() -> Vec<CompletionCandidate> {
    let mut out = vec![
        CompletionCandidate::new(crate::lookup::LAST)
            .help(Some("the newest top-level thread".into())),
    ];
    let Some(ctx) = ctx() else {
        return out;
    };
    let active = ctx.state().threads().unwrap_or_default();
    let Ok(ids) = crate::lookup::all_ids(&ctx) else {
        return out;
    };
    for id in ids.into_iter().rev().take(500) {
        let help = match active.get(&id) {
            // A thread whose nodes cannot be read is offered all the same.
            Some(&head) => task_of(&ctx, head).unwrap_or_else(|| "broken: `uwf cas verify`".into()),
            None => "archived".into(),
        };
        out.push(CompletionCandidate::new(id.to_string()).help(Some(help.into())));
    }
    out
}

/// The task of the thread whose head is `head`, shortened.
fn task_of(ctx: &Ctx, head: uwf_cas::Hash) -> Option<String> {
    let start = crate::engine::nested::start_of(ctx, head).ok()?;
    let node = ctx.cas().get(start).ok()?;
    let prompt = node.payload.get("prompt")?.as_str()?;
    Some(crate::summary::shorten(prompt, 60))
}

/// Registered workflow names, then the YAML files of the current directory.
pub fn workflows() -> Vec<CompletionCandidate> {
    let mut out = Vec::new();
    if let Some(ctx) = ctx() {
        for (name, hash) in ctx.state().registry().unwrap_or_default() {
            out.push(
                CompletionCandidate::new(name).help(Some(format!("registered, {hash}").into())),
            );
        }
    }
    if let Ok(dir) = std::fs::read_dir(".") {
        let mut files: Vec<String> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
            .collect();
        files.sort();
        out.extend(files.into_iter().map(CompletionCandidate::new));
    }
    out
}

/// Workflows and threads, for `thread run`'s first argument.
pub fn workflows_or_threads() -> Vec<CompletionCandidate> {
    let mut out = workflows();
    out.extend(threads());
    out
}
