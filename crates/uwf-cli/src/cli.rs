//! Command-line grammar.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const ABOUT: &str = "A stateless, single-step workflow engine for multi-agent LLM work.";

const LONG_ABOUT: &str = "\
A stateless, single-step workflow engine for multi-agent LLM work.

Workflows, threads and every agent output are nodes in a content-addressed
store (CAS) under the storage root. Every command prints JSON on stdout (or
YAML with --format yaml); diagnostics go to stderr, and a failed command exits
non-zero with nothing on stdout.";

const AFTER_HELP: &str = "\
Storage root: --root, else $UNCAGED_WORKFLOW_STORAGE_ROOT, else
$WORKFLOW_STORAGE_ROOT, else ~/.uncaged/workflow.

Examples:
  uwf cas schema list                 list the registered types
  uwf cas get 4KNM2PXR3B1QW           print a node
  uwf --format yaml cas walk <hash>   everything reachable from a node
  uwf completions bash > ~/.local/share/bash-completion/completions/uwf";

/// The `uwf` command line.
#[derive(Debug, Parser)]
#[command(name = "uwf", version, about = ABOUT, long_about = LONG_ABOUT, after_help = AFTER_HELP)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Options accepted by every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Storage root (overrides $UNCAGED_WORKFLOW_STORAGE_ROOT and $WORKFLOW_STORAGE_ROOT).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Output format of stdout.
    #[arg(long, global = true, value_enum, default_value_t = Format::Json)]
    pub format: Format,

    /// More logging on stderr (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and edit the content-addressed store.
    #[command(subcommand)]
    Cas(CasCommand),
    /// Print a shell completion script.
    #[command(after_help = "Example: uwf completions zsh > ~/.zfunc/_uwf")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `uwf cas …`
#[derive(Debug, Subcommand)]
pub enum CasCommand {
    /// Print a node: {hash, type, payload}.
    #[command(
        after_help = "Hashes are case-insensitive. Example: uwf cas get 4knm2pxr3b1qw --timestamp"
    )]
    Get {
        /// The node's hash.
        hash: String,
        /// Also print when the node was first stored (ms since the Unix epoch).
        #[arg(long)]
        timestamp: bool,
    },
    /// Store a payload as a node of a type, after validating it against the type's schema.
    #[command(after_help = "\
PAYLOAD is JSON text, a file path, or - for stdin. Text starting with { or [ is
always JSON; otherwise an existing file wins, then JSON (for scalars).

Example:
  T=$(uwf cas schema put '{\"title\":\"note\",\"type\":\"object\"}' | jq -r .hash)
  uwf cas put $T '{\"text\":\"hello\"}'")]
    Put {
        /// Hash of the type (a schema node; see `uwf cas schema list`).
        #[arg(value_name = "TYPE")]
        type_hash: String,
        /// The payload: JSON, a file, or - for stdin.
        payload: String,
    },
    /// Tell whether a node exists: {hash, exists}. Exits 0 either way.
    Has {
        /// The node's hash.
        hash: String,
    },
    /// List the references a node holds: [{path, hash}] (found through its schema).
    Refs {
        /// The node's hash.
        hash: String,
    },
    /// List everything reachable from a node, breadth-first: [{hash, type, depth}].
    Walk {
        /// The node to start from.
        hash: String,
    },
    /// Rebuild the by-type index from the nodes.
    Reindex,
    /// Re-hash every node and check types, schemas and references. Exits 1 if anything is wrong.
    Verify,
    /// Types: JSON Schemas stored as nodes.
    #[command(subcommand)]
    Schema(SchemaCommand),
}

/// `uwf cas schema …`
#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// List every schema: [{hash, title}], the meta-schema included.
    List,
    /// Print a schema.
    Get {
        /// The schema's hash.
        hash: String,
    },
    /// Register a JSON Schema as a type, so nodes can be stored with it.
    #[command(after_help = "\
SCHEMA is JSON text, a file path, or - for stdin. Only a subset of JSON Schema
2020-12 is accepted (see docs/cas.md); references to other nodes are strings
with \"format\": \"cas_ref\".

Example: uwf cas schema put my-detail.schema.json")]
    Put {
        /// The schema: JSON, a file, or - for stdin.
        schema: String,
    },
}
