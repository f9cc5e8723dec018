//! The process side of an agent: argv, environment, output, exit status.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use uwf_cas::Hash;
use uwf_state::state::FsState;

use crate::{AgentContext, AgentRun, BoxError, KitError, finish};

/// Runs an agent: parses `<thread-id> <role>` from argv, does everything,
/// prints the new StepNode hash, returns the exit code.
///
/// Handles `--help` and `--version`; with no arguments at all prints the
/// help on stderr and exits 0 (that is no protocol call: `uwf` always
/// passes the thread and the role); rejects any other wrong number of
/// arguments (exit status 2); resolves the storage root (`uwf` passes it in
/// `UNCAGED_WORKFLOW_STORAGE_ROOT`), loads `<root>/.env`, initialises
/// tracing (on stderr; `RUST_LOG` sets the level), then runs
/// [`execute`]. On failure a report goes to stderr, nothing to stdout, and
/// the exit status is 1.
///
/// ```no_run
/// use uwf_agent_kit::AgentRun;
///
/// fn main() -> std::process::ExitCode {
///     uwf_agent_kit::run("uwf-echo", |ctx| {
///         Ok(AgentRun::text(format!("---\nsummary: {:?}\n---\n", ctx.start().prompt)))
///     })
/// }
/// ```
pub fn run<F>(name: &str, f: F) -> ExitCode
where
    F: FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
{
    Runner::new(name).run(f)
}

/// The testable core of [`run`]: no argv, no process exit, no output.
///
/// Loads the [`AgentContext`] of `role` on `thread` from the storage root
/// `root`, calls `f`, and turns its [`AgentRun`] into an output node, a
/// detail node and a StepNode whose `agent` is `name` (see [`finish`]).
/// Returns the StepNode's hash. Never moves the thread's head: moving the
/// head is `uwf`'s job.
pub fn execute<F>(name: &str, root: &Path, thread: &str, role: &str, f: F) -> Result<Hash, KitError>
where
    F: FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
{
    let ctx = AgentContext::load(root, thread, role)?;
    let run = f(&ctx).map_err(KitError::Agent)?;
    finish(&ctx, name, run)
}

/// An agent invocation, parsed from argv, for [`Runner::run_with`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    name: String,
    root: PathBuf,
    thread: String,
    role: String,
    args: Vec<String>,
}

impl Invocation {
    /// An invocation built in code (for tests, or agents that parse argv
    /// themselves).
    pub fn new(
        name: impl Into<String>,
        root: impl Into<PathBuf>,
        thread: impl Into<String>,
        role: impl Into<String>,
        args: Vec<String>,
    ) -> Self {
        Self {
            name: name.into(),
            root: root.into(),
            thread: thread.into(),
            role: role.into(),
            args,
        }
    }

    /// The agent's name, written into the StepNode's `agent` field.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The thread id, as given.
    pub fn thread(&self) -> &str {
        &self.thread
    }

    /// The role, as given.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The arguments before `<thread-id> <role>` (see [`Runner::args`]).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Loads the agent's context (see [`AgentContext::load`]).
    pub fn load(&self) -> Result<AgentContext, KitError> {
        Ok(AgentContext::load(&self.root, &self.thread, &self.role)?.with_args(self.args.clone()))
    }

    /// Loads the context, calls `f` and writes the step: [`execute`] for
    /// this invocation.
    pub fn execute<F>(&self, f: F) -> Result<Hash, KitError>
    where
        F: FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
    {
        let ctx = self.load()?;
        let run = f(&ctx).map_err(KitError::Agent)?;
        finish(&ctx, &self.name, run)
    }
}

/// What a [`Runner::run_with`] closure tells the process to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Print the StepNode hash and exit 0: the protocol's success.
    Step(Hash),
    /// Print this line verbatim and exit 0 (test doubles that misbehave).
    Raw(String),
    /// Print nothing and exit 0 (test doubles that misbehave).
    Nothing,
    /// Print nothing and exit with this status.
    Exit(u8),
}

/// A configurable [`run`]: version, usage text, extra leading arguments,
/// and a lower-level entry point.
///
/// ```no_run
/// use uwf_agent_kit::{AgentRun, Runner};
///
/// fn main() -> std::process::ExitCode {
///     Runner::new("uwf-fixed")
///         .version(env!("CARGO_PKG_VERSION"))
///         .args(&["answer-file"])
///         .run(|ctx| Ok(AgentRun::text(std::fs::read_to_string(&ctx.args()[0])?)))
/// }
/// ```
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Runner<'a> {
    name: &'a str,
    version: &'a str,
    about: Option<&'a str>,
    args: &'a [&'a str],
}

impl<'a> Runner<'a> {
    /// A runner for the agent `name` (also the StepNode's `agent` field).
    pub fn new(name: &'a str) -> Self {
        Self {
            name,
            version: env!("CARGO_PKG_VERSION"),
            about: None,
            args: &[],
        }
    }

    /// The version `--version` prints (default: the kit's version).
    pub fn version(mut self, version: &'a str) -> Self {
        self.version = version;
        self
    }

    /// One paragraph for `--help`.
    pub fn about(mut self, about: &'a str) -> Self {
        self.about = Some(about);
        self
    }

    /// Names of the positional arguments the agent takes before
    /// `<thread-id> <role>` (the `args` of its `config.yaml` entry); their
    /// values are available as [`AgentContext::args`].
    pub fn args(mut self, names: &'a [&'a str]) -> Self {
        self.args = names;
        self
    }

    /// Runs the agent like [`run`].
    pub fn run<F>(self, f: F) -> ExitCode
    where
        F: FnOnce(&AgentContext) -> Result<AgentRun, BoxError>,
    {
        self.run_with(|inv| Ok(Reply::Step(inv.execute(f)?)))
    }

    /// Runs the agent with full control over what is printed: everything
    /// [`run`] does up to the context (argv, root, `.env`, tracing), then
    /// `f`, whose [`Reply`] decides stdout and the exit status. Errors are
    /// reported like [`run`]'s (exit 1, or [`KitError::exit_code`]).
    pub fn run_with<F>(self, f: F) -> ExitCode
    where
        F: FnOnce(&Invocation) -> Result<Reply, miette::Report>,
    {
        let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
        self.main(argv, f)
    }

    fn usage(&self) -> String {
        let mut u = format!("{} ", self.name);
        for a in self.args {
            u.push_str(&format!("<{a}> "));
        }
        u.push_str("<thread-id> <role>");
        u
    }

    fn help(&self) -> String {
        let about = self.about.unwrap_or(
            "A uwf agent. `uwf thread step` runs it with the thread and the role to run; it \
             writes a StepNode to the store and prints its hash.",
        );
        format!(
            "{about}\n\nUsage: {}\n\nOptions:\n  -h, --help     Print help\n  -V, --version  Print version\n\n\
             Environment:\n  {}  the storage root (also {}; default ~/.uncaged/workflow)\n  \
             RUST_LOG                       log filter for stderr (default: warn)\n",
            self.usage(),
            uwf_util::root::ENV_ROOT,
            uwf_util::root::ENV_ROOT_FALLBACK,
        )
    }

    fn usage_error(&self, message: impl Into<String>) -> KitError {
        KitError::Usage {
            message: message.into(),
            usage: self.usage(),
        }
    }

    /// Parses argv (without the program name).
    fn parse(&self, argv: Vec<OsString>) -> Result<Parsed, KitError> {
        if argv.is_empty() {
            return Ok(Parsed::Bare);
        }
        let mut positional = Vec::new();
        let mut options_done = false;
        for arg in argv {
            let Some(arg) = arg.to_str().map(str::to_owned) else {
                return Err(self.usage_error(format!(
                    "argument {} is not valid UTF-8",
                    arg.to_string_lossy()
                )));
            };
            if !options_done && arg.starts_with('-') && arg.len() > 1 {
                match arg.as_str() {
                    "-h" | "--help" => return Ok(Parsed::Help),
                    "-V" | "--version" => return Ok(Parsed::Version),
                    "--" => options_done = true,
                    _ => return Err(self.usage_error(format!("unknown option {arg}"))),
                }
                continue;
            }
            positional.push(arg);
        }
        let want = self.args.len() + 2;
        if positional.len() != want {
            return Err(self.usage_error(format!(
                "expected {want} arguments, got {}",
                positional.len()
            )));
        }
        let role = positional.pop().unwrap_or_default();
        let thread = positional.pop().unwrap_or_default();
        Ok(Parsed::Run {
            thread,
            role,
            args: positional,
        })
    }

    fn main<F>(self, argv: Vec<OsString>, f: F) -> ExitCode
    where
        F: FnOnce(&Invocation) -> Result<Reply, miette::Report>,
    {
        install_report_handler();
        let result = match self.parse(argv) {
            Ok(Parsed::Help) => return print_line(self.help().trim_end()),
            Ok(Parsed::Bare) => {
                // Not a protocol call (uwf always passes the thread and the
                // role): explain, on stderr so stdout stays clean, and exit 0.
                eprintln!("{}", self.help().trim_end());
                return ExitCode::SUCCESS;
            }
            Ok(Parsed::Version) => return print_line(&format!("{} {}", self.name, self.version)),
            Ok(Parsed::Run { thread, role, args }) => self
                .invoke(thread, role, args)
                .map_err(miette::Report::new)
                .and_then(|inv| f(&inv)),
            Err(e) => Err(miette::Report::new(e)),
        };
        match result {
            Ok(Reply::Step(hash)) => print_line(&hash.to_string()),
            Ok(Reply::Raw(line)) => print_line(&line),
            Ok(Reply::Nothing) => ExitCode::SUCCESS,
            Ok(Reply::Exit(code)) => ExitCode::from(code),
            Err(report) => {
                let code = report
                    .downcast_ref::<KitError>()
                    .map_or(1, KitError::exit_code);
                eprintln!("{:?}", crate::report::hinted(report));
                ExitCode::from(code)
            }
        }
    }

    fn invoke(
        &self,
        thread: String,
        role: String,
        args: Vec<String>,
    ) -> Result<Invocation, KitError> {
        let root = uwf_util::root::resolve_root(None)?;
        // Before tracing, so a RUST_LOG in `.env` applies.
        FsState::new(&root.path).load_env()?;
        uwf_util::trace::init_tracing(0, false);
        tracing::debug!(root = %root.path.display(), source = %root.source, "storage root");
        Ok(Invocation {
            name: self.name.to_owned(),
            root: root.path,
            thread,
            role,
            args,
        })
    }
}

enum Parsed {
    /// No arguments at all: a human trying the binary.
    Bare,
    Help,
    Version,
    Run {
        thread: String,
        role: String,
        args: Vec<String>,
    },
}

/// With the `fancy` feature: graphical reports, wrapped to the terminal's
/// width only when stderr is a terminal, so logs and `uwf` (which captures
/// an agent's stderr) get whole lines. Without it, miette's default.
///
/// [`run`] and [`Runner`] call it; agents that parse their own arguments
/// call it first thing in `main`.
pub fn install_report_handler() {
    #[cfg(feature = "fancy")]
    {
        use std::io::IsTerminal;
        let tty = std::io::stderr().is_terminal();
        // Fails only if a hook is already set (e.g. by the agent): keep it.
        let _ = miette::set_hook(Box::new(move |_| {
            Box::new(miette::MietteHandlerOpts::new().wrap_lines(tty).build())
        }));
    }
}

/// Ends an agent that parses its own arguments: prints the new StepNode's
/// hash on stdout (exit 0), or the error as a report on stderr with nothing
/// on stdout (exit 1) — the protocol's two outcomes.
pub fn conclude(result: Result<Hash, miette::Report>) -> ExitCode {
    match result {
        Ok(step) => print_line(&step.to_string()),
        Err(report) => {
            eprintln!("{:?}", crate::report::hinted(report));
            ExitCode::FAILURE
        }
    }
}

/// Prints `line` and a newline to stdout; a failed write is an error
/// (exit 1), e.g. when the reader went away.
fn print_line(line: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn parse(r: Runner<'_>, args: &[&str]) -> Result<(String, String, Vec<String>), String> {
        match r.parse(os(args)) {
            Ok(Parsed::Run { thread, role, args }) => Ok((thread, role, args)),
            Ok(Parsed::Help) => Err("help".into()),
            Ok(Parsed::Bare) => Err("bare".into()),
            Ok(Parsed::Version) => Err("version".into()),
            Err(e) => Err(format!("{e}")),
        }
    }

    #[test]
    fn parses_thread_and_role() {
        let r = Runner::new("a");
        assert_eq!(
            parse(r, &["T", "planner"]),
            Ok(("T".into(), "planner".into(), vec![]))
        );
        assert_eq!(parse(r, &["--help"]), Err("help".into()));
        assert_eq!(parse(r, &["x", "-V"]), Err("version".into()));
        assert_eq!(
            parse(r, &["--", "T", "-odd-role"]),
            Ok(("T".into(), "-odd-role".into(), vec![]))
        );
        assert_eq!(parse(r, &["T"]), Err("expected 2 arguments, got 1".into()));
        assert_eq!(
            parse(r, &["--x", "T", "r"]),
            Err("unknown option --x".into())
        );
    }

    #[test]
    fn leading_args() {
        let r = Runner::new("m").args(&["scenario"]);
        assert_eq!(
            parse(r, &["s.yaml", "T", "r"]),
            Ok(("T".into(), "r".into(), vec!["s.yaml".into()]))
        );
        assert!(parse(r, &["T", "r"]).is_err());
        assert_eq!(r.usage(), "m <scenario> <thread-id> <role>");
        assert!(r.help().contains("Usage: m <scenario> <thread-id> <role>"));
    }

    #[test]
    fn usage_errors_exit_2() {
        let r = Runner::new("a");
        let code = r.main(os(&["only-one"]), |_| Ok(Reply::Nothing));
        assert_eq!(code, ExitCode::from(2));
    }

    #[test]
    fn no_arguments_print_help_and_succeed() {
        let r = Runner::new("a");
        assert_eq!(parse(r, &[]), Err("bare".into()));
        let code = r.main(os(&[]), |_| -> Result<Reply, miette::Report> {
            panic!("must not run")
        });
        assert_eq!(code, ExitCode::SUCCESS);
    }
}
