//! How failures are shown: every one with a `uwf::…` code, its cause
//! said once, in colour only when wanted, and — for `thread run` — with the
//! thread it happened in.

use std::error::Error;
use std::fmt;
use std::io::IsTerminal;

use miette::{Diagnostic, LabeledSpan, Severity, SourceCode};

use crate::cli::ColorChoice;
use crate::error::CliError;

/// A failure as `main` reports it.
pub struct Shown(pub CliError);

impl fmt::Debug for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Error for Shown {
    /// The first cause whose text the message does not already say: many
    /// errors put their cause in their message ("cannot read x: No such
    /// file…") and also return it as their source, and it would be printed
    /// twice.
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        first_new_cause(&self.0.to_string(), self.0.source())
    }
}

fn first_new_cause<'a>(
    shown: &str,
    mut next: Option<&'a (dyn Error + 'static)>,
) -> Option<&'a (dyn Error + 'static)> {
    while let Some(cause) = next {
        if shown.contains(&cause.to_string()) {
            next = cause.source();
        } else {
            return Some(cause);
        }
    }
    None
}

impl Diagnostic for Shown {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.0
            .code()
            .or_else(|| Some(Box::new(fallback_code(&self.0))))
    }
    fn severity(&self) -> Option<Severity> {
        self.0.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.0.help()
    }
    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.0.url()
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.0.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        self.0.labels()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        self.0.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn Diagnostic> {
        let d = self.0.diagnostic_source()?;
        (!self.0.to_string().contains(&d.to_string())).then_some(d)
    }
}

/// The code of a failure whose library error does not classify itself.
fn fallback_code(e: &CliError) -> &'static str {
    match e {
        CliError::Engine(e) => match &e.0 {
            crate::engine::EngineError::State(_) => "uwf::state",
            crate::engine::EngineError::Slot(_) => "uwf::slot",
            crate::engine::EngineError::ThreadId(_) => "uwf::thread::bad_id",
            _ => "uwf::engine",
        },
        CliError::Root(_) => "uwf::root",
        CliError::ThreadId(_) => "uwf::thread::bad_id",
        CliError::InThread(t) => fallback_code(&t.error),
        _ => "uwf::error",
    }
}

/// A failure of `thread run` once its thread exists: the underlying error,
/// its help extended by the thread's id and how to resume it.
#[derive(Debug)]
pub struct InThread {
    /// The thread.
    pub thread: uwf_protocol::ThreadId,
    /// What went wrong.
    pub error: CliError,
}

impl CliError {
    /// Marks a failure of `thread run` as one of thread `thread`, so the
    /// report names the thread and how to continue it. Failures that
    /// already say so (a wait for a person, `--max-steps`) stay as they are.
    pub fn in_thread(self, thread: uwf_protocol::ThreadId) -> CliError {
        match self {
            e @ (CliError::Waiting { .. } | CliError::MaxSteps { .. } | CliError::InThread(_)) => e,
            error => CliError::InThread(Box::new(InThread { thread, error })),
        }
    }
}

impl fmt::Display for InThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "thread {}: {}", self.thread, self.error)
    }
}

impl Error for InThread {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.error.source()
    }
}

impl Diagnostic for InThread {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.error.code()
    }
    fn severity(&self) -> Option<Severity> {
        self.error.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        let over = matches!(&self.error, CliError::Engine(e) if e.0.thread_is_over());
        let resume = if over {
            // Archived: `thread run` would refuse it; a fork goes on.
            format!(
                "the thread is {0} and it is over: `uwf thread show {0}` shows where it stopped, `uwf thread fork <hash>` continues from any of its steps (`uwf thread steps {0}` lists them)",
                self.thread
            )
        } else {
            format!(
                "the thread is {0}: continue it with `uwf thread run {0}`, or see it with `uwf thread show {0}`",
                self.thread
            )
        };
        Some(Box::new(match self.error.help() {
            Some(h) => format!("{h}\n{resume}"),
            None => resume,
        }))
    }
    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.error.url()
    }
    fn source_code(&self) -> Option<&dyn SourceCode> {
        self.error.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        self.error.labels()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        self.error.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn Diagnostic> {
        self.error.diagnostic_source()
    }
}

/// Whether stderr gets colour: `--color always|never` decide; `auto`
/// follows `NO_COLOR` (set and not empty: no colour), then
/// `CLICOLOR_FORCE` (set and not `0`: colour), then `CLICOLOR=0` (no
/// colour), then whether stderr is a terminal.
pub fn use_color(choice: ColorChoice) -> bool {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            if var("NO_COLOR").is_some() {
                false
            } else if var("CLICOLOR_FORCE").is_some_and(|v| v != "0") {
                true
            } else if var("CLICOLOR").is_some_and(|v| v == "0") {
                false
            } else {
                std::io::stderr().is_terminal()
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_ended_its_thread_is_not_told_to_run_it_again() {
        let thread = uwf_protocol::fixtures::thread("T");
        let help = |e: uwf_engine::EngineError| {
            CliError::from(e)
                .in_thread(thread)
                .help()
                .map(|h| h.to_string())
                .unwrap_or_default()
        };
        for over in [
            uwf_engine::EngineError::Killed { thread },
            uwf_engine::EngineError::KilledBeforeStart { thread },
            uwf_engine::EngineError::FinishedMeanwhile {
                thread,
                reason: "done".into(),
                head: uwf_protocol::fixtures::hash("H"),
            },
        ] {
            let h = help(over);
            assert!(!h.contains("thread run"), "{h}");
            assert!(h.contains(&format!("uwf thread show {thread}")), "{h}");
            assert!(h.contains("uwf thread fork"), "{h}");
        }
        let h = help(uwf_engine::EngineError::Interrupted);
        assert!(
            h.contains(&format!("continue it with `uwf thread run {thread}`")),
            "{h}"
        );
    }

    #[test]
    fn a_cause_the_message_says_is_skipped() {
        let e = CliError::Read {
            path: "nonexist.yaml".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "No such file"),
        };
        let shown = Shown(e);
        assert!(shown.to_string().contains("No such file"));
        assert!(shown.source().is_none());
    }

    #[test]
    fn every_failure_has_a_code() {
        let e = CliError::ThreadId("x".parse::<uwf_protocol::ThreadId>().unwrap_err());
        let shown = Shown(e);
        assert_eq!(
            shown.code().map(|c| c.to_string()).as_deref(),
            Some("uwf::thread::bad_id")
        );
        let t = uwf_protocol::fixtures::thread("T");
        let run = CliError::from(crate::engine::EngineError::Interrupted).in_thread(t);
        assert!(run.to_string().starts_with(&format!("thread {t}: ")));
        assert!(
            run.help()
                .map(|h| h.to_string())
                .unwrap_or_default()
                .contains(&format!("uwf thread run {t}"))
        );
        assert_eq!(
            run.code().map(|c| c.to_string()).as_deref(),
            Some("uwf::interrupted")
        );
    }
}
