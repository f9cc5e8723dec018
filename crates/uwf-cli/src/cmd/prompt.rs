//! `uwf prompt usage | workflow-authoring | adapter-developing`: reference
//! texts that teach an LLM agent (or a person) to use uwf, to author
//! workflows and to write agents, as upstream's `uwf prompt` did.
//!
//! They are built from the sources of the documentation itself, so they
//! cannot drift from it: the pages under `docs/` and the README (compiled
//! in with `include_str!`), the CLI's own command tree (clap), the workflow
//! JSON Schema `uwf workflow schema` prints, and the example workflows of
//! `examples/` (which the workspace's tests run).

use std::fmt::Write as _;

use clap::CommandFactory;

use crate::cli::{Cli, PromptCommand};

const README: &str = include_str!("../../../../README.md");
const WORKFLOW_MD: &str = include_str!("../../../../docs/workflow.md");
const WRITING_AGENTS_MD: &str = include_str!("../../../../docs/writing-agents.md");
const AGENT_PROTOCOL_MD: &str = include_str!("../../../../docs/agent-protocol.md");
const SOLVE_ISSUE: &str = include_str!("../../../../examples/solve-issue.yaml");
const TRIAGE: &str = include_str!("../../../../examples/triage.yaml");

/// The text of `uwf prompt <which>`.
pub fn text(which: &PromptCommand) -> String {
    match which {
        PromptCommand::Usage => usage(),
        PromptCommand::WorkflowAuthoring => workflow_authoring(),
        PromptCommand::AdapterDeveloping => adapter_developing(),
    }
}

/// The part of `doc` from the line `from` up to the line `to` (or the end),
/// headings being whole lines.
fn section<'a>(doc: &'a str, from: &str, to: Option<&str>) -> &'a str {
    let line_at = |heading: &str| {
        doc.match_indices(heading).map(|(i, _)| i).find(|&i| {
            (i == 0 || doc[..i].ends_with('\n')) && doc[i + heading.len()..].starts_with('\n')
        })
    };
    let start = line_at(from).unwrap_or(doc.len());
    let end = to
        .and_then(|t| line_at(t).filter(|&e| e > start))
        .unwrap_or(doc.len());
    doc[start..end].trim_end()
}

/// Every command of the CLI with what it does and its usage, from the
/// command tree clap parses (so it is the CLI, not a description of it).
fn command_reference() -> String {
    fn walk(cmd: &clap::Command, path: &str, out: &mut String) {
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            let here = format!("{path} {}", sub.get_name());
            if sub.has_subcommands() {
                walk(sub, &here, out);
                continue;
            }
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            let usage = sub.clone().bin_name(&here).render_usage().to_string();
            let usage = usage.trim_start_matches("Usage: ");
            let _ = write!(out, "### `{here}`\n\n{about}\n\n```text\n{usage}\n```\n\n");
            out.push_str(&arguments(sub));
        }
    }
    let mut out = String::new();
    let cli = Cli::command();
    let _ = write!(out, "Options of every command:\n\n{}", arguments(&cli));
    walk(&cli, "uwf", &mut out);
    out
}

/// A command's own arguments, one line each with their help.
fn arguments(cmd: &clap::Command) -> String {
    let mut out = String::new();
    for arg in cmd.get_arguments() {
        if arg.is_hide_set() || matches!(arg.get_id().as_str(), "help" | "version") {
            continue;
        }
        let name = match (arg.get_long(), arg.get_value_names()) {
            (Some(long), Some(values)) if arg.get_action().takes_values() => {
                format!("--{long} <{}>", values.join("> <"))
            }
            (Some(long), _) => format!("--{long}"),
            (None, _) => format!("<{}>", arg.get_id().as_str().to_uppercase()),
        };
        let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
        let _ = writeln!(out, "- `{name}`: {help}");
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

fn usage() -> String {
    format!(
        "# Using uwf\n\n\
         uwf runs workflows: a thread moves one step at a time from `$START` through \
         roles to `$END`, each step done by an agent, everything stored in a \
         content-addressed store. This text is `uwf prompt usage`; `uwf prompt \
         workflow-authoring` teaches writing workflows, `uwf prompt adapter-developing` \
         writing agents; `uwf <command> --help` has every option.\n\n\
         {}\n\n{}\n\n{}\n\n## Every command\n\n{}",
        section(README, "## The two commands", Some("## Install")),
        section(README, "## A quick tour", Some("## Using real LLM agents")),
        section(README, "## Using real LLM agents", Some("## Documentation")),
        command_reference()
    )
}

fn workflow_authoring() -> String {
    let schema = uwf_moderator::definition::WORKFLOW_SCHEMA.trim_end();
    format!(
        "# Authoring uwf workflows\n\n\
         A workflow is a YAML file: roles (instructions and the JSON Schema of their \
         output), named JSONata conditions, and a graph of transitions from `$START` \
         to `$END`. Check a file with `uwf workflow validate FILE` (a JSON report; exit \
         status 1 when it has errors), register it with `uwf workflow put FILE`, run it \
         with `uwf thread run FILE -p TASK`. This text is `uwf prompt workflow-authoring`.\n\n\
         {}\n\n{}\n\n\
         ## Complete examples\n\n\
         Both validate as they are (`examples/solve-issue.yaml`, `examples/triage.yaml`).\n\n\
         ```yaml\n{}```\n\n```yaml\n{}```\n\n\
         ## The JSON Schema of the file\n\n\
         What `uwf workflow schema` prints (for editors); it checks the shape, \
         `uwf workflow validate` the rest.\n\n```json\n{schema}\n```\n",
        section(WORKFLOW_MD, "## Top level", Some("## People in the loop")),
        section(WORKFLOW_MD, "## Suspend and resume", None),
        SOLVE_ISSUE,
        TRIAGE,
    )
}

fn adapter_developing() -> String {
    format!(
        "# Writing uwf agents\n\n\
         An agent is a program `uwf thread step` runs as `<command> <args…> <thread-id> \
         <role>`: it reads the thread, does the role's work, stores a StepNode and \
         prints its hash. The first part is the Rust kit, the second the protocol for \
         any language. This text is `uwf prompt adapter-developing`.\n\n{}\n\n{}\n",
        WRITING_AGENTS_MD.trim_end(),
        AGENT_PROTOCOL_MD.trim_end()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_cut_at_whole_heading_lines() {
        let doc = "# A\n\n## One\nx ## Two\n```text\n## Two and a half\n```\n## Two\ny\n";
        assert_eq!(
            section(doc, "## One", Some("## Two")),
            "## One\nx ## Two\n```text\n## Two and a half\n```"
        );
        assert_eq!(section(doc, "## Two", None), "## Two\ny");
        assert_eq!(section(doc, "## Missing", None), "");
    }

    #[test]
    fn every_text_has_its_sources() {
        let authoring = workflow_authoring();
        assert!(authoring.contains("## Static validation"));
        assert!(authoring.contains(uwf_moderator::definition::WORKFLOW_SCHEMA.trim_end()));
        assert!(!authoring.contains("## People in the loop"));
        let usage = usage();
        assert!(usage.contains("### `uwf thread run`"), "{usage}");
        assert!(usage.contains("### `uwf prompt usage`"), "{usage}");
        assert!(adapter_developing().contains("## A complete agent"));
    }
}
