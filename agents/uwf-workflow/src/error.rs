//! What can go wrong when a workflow runs as an agent.

use uwf_agent_kit::KitError;

use crate::child::UWF_BIN_ENV;
use crate::{CALL_DEPTH_ENV, MAX_DEPTH_ENV};

/// The text every depth-limit report contains. uwf-workflow looks for it in
/// a failed child's stderr, so the innermost cause of a runaway recursion
/// reaches the top-level report intact however deep it happened.
pub const DEPTH_MARKER: &str = "call depth limit reached";

/// Everything uwf-workflow reports. Any of these leaves the parent thread
/// unchanged: no StepNode is printed, and `uwf` does not move the head.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum WorkflowAgentError {
    /// An environment variable that must hold a number does not.
    #[error("{var}={value:?} is not a non-negative integer")]
    #[diagnostic(
        code(uwf::workflow_agent::bad_env),
        help("unset {var} or set it to a number such as 8")
    )]
    BadNumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },

    /// Starting the child would exceed the call depth limit.
    #[error(
        "{DEPTH_MARKER}: role {role:?} of thread {thread} would start a child thread of workflow {workflow:?} at depth {depth}, over the limit of {limit} (call stack, top first: {stack})"
    )]
    #[diagnostic(
        code(uwf::workflow_agent::depth),
        help(
            "a workflow that calls itself, directly or through others, recurses until this limit: check which roles config.yaml maps to `uwf-workflow` (agentOverrides). If the nesting is intended, raise the limit with --max-depth or {MAX_DEPTH_ENV}. The depth comes from {CALL_DEPTH_ENV} and the thread's parentState chain; no child thread was started"
        )
    )]
    DepthExceeded {
        /// The parent role.
        role: String,
        /// The parent thread.
        thread: uwf_protocol::ThreadId,
        /// The child workflow asked for.
        workflow: String,
        /// The depth the child would have.
        depth: usize,
        /// The limit.
        limit: usize,
        /// The workflows on the stack, `name (role) → name (role) → …`.
        stack: String,
    },

    /// No `uwf` binary to run the child thread with.
    #[error("cannot find the uwf binary to run the child thread with")]
    #[diagnostic(
        code(uwf::workflow_agent::spawn),
        help(
            "uwf-workflow runs `uwf` from PATH (uwf puts its own directory first there for its agents), else the one beside uwf-workflow; set {UWF_BIN_ENV} to its path. The parent thread is unchanged"
        )
    )]
    NoUwf,

    /// `uwf` could not be started (or waited for).
    #[error("cannot run {program}: {source}")]
    #[diagnostic(
        code(uwf::workflow_agent::spawn),
        help(
            "is {program} the uwf binary, and executable? Set {UWF_BIN_ENV} to its path. The parent thread is unchanged"
        )
    )]
    Spawn {
        /// The program.
        program: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },

    /// A `uwf` command that reads the store failed.
    #[error("`{command}` failed: {cause}")]
    #[diagnostic(
        code(uwf::workflow_agent::uwf),
        help("the parent thread is unchanged; run the command yourself to see uwf's whole report")
    )]
    Uwf {
        /// The command line.
        command: String,
        /// The headline of uwf's report, or its exit status.
        cause: String,
    },

    /// A `uwf` command answered with something that is not its JSON.
    #[error("`uwf {command}` printed what is not its answer ({reason}): {printed}")]
    #[diagnostic(
        code(uwf::workflow_agent::answer),
        help(
            "is {UWF_BIN_ENV} (or `uwf` on PATH) the uwf binary of the same release as uwf-workflow? The parent thread is unchanged"
        )
    )]
    Answer {
        /// The subcommand.
        command: &'static str,
        /// The start of what it printed.
        printed: String,
        /// Why it does not parse.
        reason: String,
    },

    /// The child thread could not be started: no child thread exists.
    #[error("the child thread of workflow {workflow:?} could not be started: {cause}{tail}")]
    #[diagnostic(
        code(uwf::workflow_agent::child_start),
        help(
            "the parent thread is unchanged. Is {workflow:?} a registered workflow name, a Workflow hash, or a path to a workflow YAML file (absolute, or relative to the directory uwf runs in)?"
        )
    )]
    ChildStart {
        /// The child workflow asked for.
        workflow: String,
        /// The first line of uwf's report, or its exit status.
        cause: String,
        /// The last lines of its stderr, if any (with a heading).
        tail: String,
    },

    /// The child thread started but did not run to its end.
    #[error("child thread {thread} (workflow {workflow}) failed: {cause}{tail}")]
    #[diagnostic(
        code(uwf::workflow_agent::child_failed),
        help(
            "the parent thread is unchanged and the child thread is kept: inspect it with `uwf thread read {thread}` or `uwf thread show {thread}`, continue it with `uwf thread run --thread {thread}`"
        )
    )]
    ChildFailed {
        /// The child thread id.
        thread: uwf_protocol::ThreadId,
        /// The child workflow.
        workflow: String,
        /// The innermost cause found in its report.
        cause: String,
        /// More of its stderr, if it was not passed on already (with a heading).
        tail: String,
    },

    /// The child thread waits for a person. The parent step waits too: uwf-workflow exits with
    /// [`EXIT_WAITING`], and the next step of the parent continues this
    /// child instead of starting another.
    #[error("child thread {thread} (workflow {workflow}) waits for a person")]
    #[diagnostic(
        code(uwf::workflow_agent::child_waiting),
        help(
            "`uwf thread list --waiting` shows what it waits for; answer it with `uwf thread answer`, then step the parent thread again"
        )
    )]
    ChildWaiting {
        /// The child thread id.
        thread: uwf_protocol::ThreadId,
        /// The child workflow.
        workflow: String,
    },

    /// The child thread ended without a step: nothing to return.
    #[error(
        "child thread {thread} (workflow {workflow}) ended without running any step: there is no result to return"
    )]
    #[diagnostic(
        code(uwf::workflow_agent::child_empty),
        help("the child workflow's $START leads straight to $END; give it at least one role")
    )]
    ChildNoSteps {
        /// The child thread id.
        thread: uwf_protocol::ThreadId,
        /// The child workflow.
        workflow: String,
    },

    /// The child's final output could not be made into the parent role's output.
    #[error(
        "the final output of child thread {thread} (role {child_role:?}) does not match role {role:?}'s outputSchema, and extracting it failed: {source}"
    )]
    #[diagnostic(
        code(uwf::workflow_agent::mapping),
        help(
            "the parent thread is unchanged (the child thread ended and is kept). Make the child workflow's last role output the fields role {role} needs — then no extraction is needed — or configure an extraction model (modelOverrides.extract) for the LLM layer"
        )
    )]
    Mapping {
        /// The child thread id.
        thread: uwf_protocol::ThreadId,
        /// The child's last role.
        child_role: String,
        /// The parent role.
        role: String,
        /// Why the extraction failed.
        #[source]
        source: Box<KitError>,
    },

    /// The kit failed (context, store, StepNode).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Kit(#[from] KitError),

    /// A thread could not be loaded.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Thread(#[from] uwf_moderator::thread::ThreadError),

    /// The storage root could not be determined.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Root(#[from] uwf_util::root::RootError),

    /// A state file could not be read.
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] uwf_state::state::StateError),
}

/// Exit status of uwf-workflow when its child thread waits for a person
/// (the same status `uwf thread step` uses for a wait).
pub const EXIT_WAITING: u8 = uwf_protocol::agent_env::EXIT_WAITING;
