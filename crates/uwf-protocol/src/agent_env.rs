//! What an agent finds in its environment and how it says "try again
//! later": the names uwf and every agent share (docs/agent-protocol.md,
//! "Environment").

/// Environment variable telling an agent how uwf names it (its alias or
/// command line); the StepNode records it as `agent`.
pub const AGENT: &str = "UWF_AGENT";

/// Environment variable giving an agent the head its step starts from, so
/// it needs no lookup of the thread's head.
pub const HEAD: &str = "UWF_HEAD";

/// Environment variable giving an agent the edge prompt of the moderator's
/// decision at [`HEAD`] (empty: the transition has none), so it need not
/// evaluate the workflow's conditions again.
pub const EDGE_PROMPT: &str = "UWF_EDGE_PROMPT";

/// Environment variable naming the store relay an agent reaches its store
/// through (docs/postgres.md, "The store relay"). Unset (or empty): open
/// the store as usual.
pub const RELAY: &str = "UWF_RELAY";

/// The exit status of an agent that could not reach the store (BSD's
/// `EX_TEMPFAIL`): the step failed for a reason that passes, and nothing
/// was written.
pub const EXIT_UNAVAILABLE: u8 = 75;

/// The exit status of a process that stopped because its thread (or a
/// child thread it runs) waits for a person: `uwf thread step` and `run`
/// exit with it, and a workflow agent exits with it to tell the engine
/// that its child thread waits (docs/nested-workflows.md, "A child thread
/// that waits for a person").
pub const EXIT_WAITING: u8 = 4;
