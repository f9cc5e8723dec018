//! Which agent runs a role, and how a command line given as text is split
//! into words: the configuration's agent semantics, without any file or
//! store (docs/config.md, "Agents").

use std::fmt;
use std::path::{Path, PathBuf};

use miette::Diagnostic;
use thiserror::Error;
use uwf_protocol::{AgentProtocol, WorkflowConfig};

use crate::error::StateError;
use crate::state::CONFIG_FILE;

/// Which setting chose the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentSource {
    /// An explicit choice, e.g. `--agent`.
    Explicit,
    /// `agentOverrides[workflow][role]` in `config.yaml`.
    Override,
    /// `defaultAgent` in `config.yaml`.
    Default,
}

impl fmt::Display for AgentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AgentSource::Explicit => "--agent",
            AgentSource::Override => "agentOverrides",
            AgentSource::Default => "defaultAgent",
        })
    }
}

/// The agent that runs a role: spawn `command args… <thread> <role>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAgent {
    /// Program name (looked up on `PATH`) or path.
    pub command: String,
    /// Arguments placed before the thread id and role.
    pub args: Vec<String>,
    /// What to record as the step's agent: the alias name, or the command
    /// line exactly as given.
    pub label: String,
    /// Which setting chose it.
    pub source: AgentSource,
    /// A person answers this role (`human: true` in `config.yaml`): there
    /// is no command to run; the step waits for `uwf thread answer`.
    pub human: bool,
    /// How its program answers: the agent protocol, or a plain program's
    /// stdout (`protocol: stdio` in `config.yaml`; a command line given
    /// with `--agent` speaks the agent protocol).
    pub protocol: AgentProtocol,
}

/// [`resolve_agent`] with errors naming `origin`, where the configuration
/// was read from (a file, or a database table).
pub fn resolve_agent_at(
    origin: &Path,
    config: Option<&WorkflowConfig>,
    explicit: Option<&str>,
    workflow: &str,
    role: &str,
) -> Result<ResolvedAgent, StateError> {
    resolve_agent(config, explicit, workflow, role).map_err(|e| match e {
        StateError::UnknownAgentAlias { alias, .. } => StateError::UnknownAgentAlias {
            alias,
            path: origin.to_path_buf(),
        },
        other => other,
    })
}

/// Resolves which agent runs `role` of `workflow`.
///
/// Precedence: `explicit` (e.g. `--agent`) > `config.agentOverrides[workflow][role]`
/// > `config.defaultAgent`.
///
/// An explicit value naming an alias under `config.agents` resolves to that
/// alias; anything else is a command line, split by
/// [`split_command_line`] (an unknown alias is therefore simply a command).
/// Values from the configuration must name aliases:
/// [`StateError::UnknownAgentAlias`] otherwise (its `path` is the bare
/// [`CONFIG_FILE`] name; [`resolve_agent_at`] puts the real origin in).
/// Nothing applicable is [`StateError::NoAgent`].
pub fn resolve_agent(
    config: Option<&WorkflowConfig>,
    explicit: Option<&str>,
    workflow: &str,
    role: &str,
) -> Result<ResolvedAgent, StateError> {
    let alias = |name: &str, source| {
        config
            .and_then(|c| c.agents.get(name))
            .map(|agent| ResolvedAgent {
                command: agent.command.clone(),
                args: agent.args.clone(),
                label: name.to_owned(),
                source,
                human: agent.human,
                protocol: agent.protocol,
            })
    };
    // An alias that is neither a person nor a program cannot run anything.
    let usable = |agent: ResolvedAgent| {
        if agent.human || !agent.command.trim().is_empty() {
            Ok(agent)
        } else {
            Err(StateError::AgentCommand {
                command: agent.label.clone(),
                source: SplitError::Empty,
            })
        }
    };

    if let Some(explicit) = explicit {
        if let Some(agent) = alias(explicit, AgentSource::Explicit) {
            return usable(agent);
        }
        let mut words =
            split_command_line(explicit).map_err(|source| StateError::AgentCommand {
                command: explicit.to_owned(),
                source,
            })?;
        if words.first().is_none_or(String::is_empty) {
            return Err(StateError::AgentCommand {
                command: explicit.to_owned(),
                source: SplitError::Empty,
            });
        }
        let command = words.remove(0);
        return Ok(ResolvedAgent {
            command,
            args: words,
            label: explicit.to_owned(),
            source: AgentSource::Explicit,
            human: false,
            protocol: AgentProtocol::Uwf,
        });
    }

    let Some(config) = config else {
        return Err(no_agent(workflow, role));
    };
    let overridden = config
        .agent_overrides
        .as_ref()
        .and_then(|o| o.get(workflow))
        .and_then(|roles| roles.get(role));
    let (name, source) = match (overridden, &config.default_agent) {
        (Some(name), _) => (name, AgentSource::Override),
        (None, Some(name)) => (name, AgentSource::Default),
        (None, None) => return Err(no_agent(workflow, role)),
    };
    usable(
        alias(name, source).ok_or_else(|| StateError::UnknownAgentAlias {
            alias: name.clone(),
            path: PathBuf::from(CONFIG_FILE),
        })?,
    )
}

pub(crate) fn no_agent(workflow: &str, role: &str) -> StateError {
    StateError::NoAgent {
        workflow: workflow.to_owned(),
        role: role.to_owned(),
    }
}

/// Why a command line cannot be split.
#[derive(Debug, Clone, PartialEq, Eq, Error, Diagnostic)]
pub enum SplitError {
    /// Nothing but whitespace, or an empty program name.
    #[error("the command is empty")]
    Empty,
    /// A quote is never closed.
    #[error("the {quote} quote at character {pos} is never closed")]
    UnterminatedQuote {
        /// `'` or `"`.
        quote: char,
        /// Zero-based character position of the opening quote.
        pos: usize,
    },
    /// The line ends with an unescaped backslash.
    #[error("the command ends with a backslash that escapes nothing")]
    TrailingBackslash,
}

/// Splits a command line into words like a POSIX shell, minus everything
/// but quoting: no variables, globs, tildes, pipes or redirections.
///
/// - Unquoted whitespace separates words.
/// - `'…'` is literal; it cannot contain `'`.
/// - `"…"` is literal except that `\` escapes `"`, `\`, `$`, `` ` `` and a
///   newline (which disappears); before anything else it stays a backslash.
/// - Outside quotes, `\` makes the next character literal; `\` + newline
///   disappears.
/// - Quoted pieces join adjacent text (`a'b c'd` is one word), and `''`
///   is an empty word.
///
/// Errors on unterminated quotes, a trailing backslash, or no words at all.
pub fn split_command_line(input: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether a word has started (so `''` yields an empty word).
    let mut in_word = false;
    let mut chars = input.chars().enumerate();
    while let Some((pos, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\\' => match chars.next() {
                Some((_, '\n')) => {}
                Some((_, next)) => {
                    word.push(next);
                    in_word = true;
                }
                None => return Err(SplitError::TrailingBackslash),
            },
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some((_, '\'')) => break,
                        Some((_, inner)) => word.push(inner),
                        None => return Err(SplitError::UnterminatedQuote { quote: '\'', pos }),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\n')) => {}
                            Some((_, escaped @ ('"' | '\\' | '$' | '`'))) => word.push(escaped),
                            Some((_, other)) => {
                                word.push('\\');
                                word.push(other);
                            }
                            None => {
                                return Err(SplitError::UnterminatedQuote { quote: '"', pos });
                            }
                        },
                        Some((_, inner)) => word.push(inner),
                        None => return Err(SplitError::UnterminatedQuote { quote: '"', pos }),
                    }
                }
            }
            other => {
                word.push(other);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    if words.is_empty() {
        return Err(SplitError::Empty);
    }
    Ok(words)
}
