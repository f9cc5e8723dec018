//! What an agent binary prints when it fails: the error as a report, with
//! the `uwf` command that helps.
//!
//! [`KitError`]'s own help texts name no `uwf` command (a program using the
//! kit as a library may run agents some other way); the binary's report
//! adds them here, as `uwf`'s CLI does for the engine's errors
//! (docs/architecture.md, "Errors and output").

use std::fmt;

use miette::Diagnostic;

use crate::KitError;

/// `err` as the report an agent binary prints on stderr: its diagnostic,
/// with the help that names the `uwf` command to run where there is one.
///
/// [`run`](crate::run), [`Runner`](crate::Runner) and
/// [`conclude`](crate::conclude) print their errors through it; an agent
/// that prints its own reports can too.
pub fn report(err: KitError) -> miette::Report {
    miette::Report::new(Reported::new(err))
}

/// The same for a report that may hold a [`KitError`] (as the closures of
/// [`Runner::run_with`](crate::Runner::run_with) return); any other report
/// is returned as it is.
pub(crate) fn hinted(report: miette::Report) -> miette::Report {
    match report.downcast::<KitError>() {
        Ok(err) => self::report(err),
        Err(other) => other,
    }
}

/// The help with `uwf`'s commands, for the errors where one helps (`None`:
/// the error's own help says it all).
pub fn hint(e: &KitError) -> Option<String> {
    Some(match e {
        KitError::Usage { usage, .. } => format!(
            "usage: {usage}\n`uwf thread step` runs agents as `<command> <args…> <thread-id> <role>`"
        ),
        KitError::NotActive { .. } => "it has ended, was killed, or never existed in this storage root; `uwf thread list --all` shows every thread (is UNCAGED_WORKFLOW_STORAGE_ROOT the root uwf uses?)".into(),
        KitError::NoBackend { .. } => "agents reach a store named by URL through the relay of the `uwf` that runs them: run the step with `uwf thread step`, or point UWF_STORE at a directory".into(),
        KitError::NoConfig { .. } => "LLM calls need providers and models in config.yaml: run `uwf setup`, or write it by hand (see docs/writing-agents.md)".into(),
        KitError::MissingApiKey { var, .. } => format!(
            "add `{var}=<your key>` to the .env file of the storage root (`uwf setup --api-key` does), or export it"
        ),
        KitError::InvalidOutput { schema, .. } => {
            format!("fix the fields at the paths shown; `uwf cas schema get {schema}` prints the schema")
        }
        KitError::BadChildThread { .. } => "`AgentRun::with_child_thread` takes the child thread's terminal StepNode (the head `uwf thread run` printed for the child)".into(),
        KitError::Extraction { cause, .. } => {
            crate::extract::extraction_help(Some(hint(cause)?))
        }
        _ => return None,
    })
}

/// A [`KitError`] as a binary reports it: its diagnostic, with the help of
/// [`hint`] where there is one (a program that wraps kit errors in its own
/// error type, as `uwf` does, holds this instead).
#[derive(Debug)]
pub struct Reported {
    err: KitError,
    help: Option<String>,
}

impl Reported {
    /// `err`, with its `uwf` hint.
    pub fn new(err: KitError) -> Self {
        let help = hint(&err);
        Self { err, help }
    }

    /// The error itself.
    pub fn error(&self) -> &KitError {
        &self.err
    }
}

impl fmt::Display for Reported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.err, f)
    }
}

impl std::error::Error for Reported {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.err.source()
    }
}

impl Diagnostic for Reported {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.err.code()
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.err.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        match &self.help {
            Some(h) => Some(Box::new(h)),
            None => self.err.help(),
        }
    }
    fn url<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.err.url()
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.err.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.err.labels()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn Diagnostic> + 'a>> {
        self.err.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn Diagnostic> {
        self.err.diagnostic_source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uwf_cas::Hash;

    /// Every help text of the library names no `uwf` command; the report
    /// of the same error does, where one helps.
    #[test]
    fn uwf_commands_are_named_only_by_the_report() {
        let config = || KitError::NoConfig {
            path: "config.yaml".into(),
        };
        let errors = [
            KitError::Usage {
                message: "x".into(),
                usage: "a <thread-id> <role>".into(),
            },
            KitError::NotActive {
                thread: uwf_protocol::ThreadId::new(),
            },
            KitError::NoBackend {
                store: "postgres://h/db".into(),
            },
            config(),
            KitError::MissingApiKey {
                var: "KEY".into(),
                provider: "p".into(),
            },
            KitError::InvalidOutput {
                role: "r".into(),
                schema: Hash::from_u64(7),
                violations: String::new(),
            },
            KitError::BadChildThread {
                hash: Hash::from_u64(8),
                reason: "is not in the store".into(),
            },
            KitError::Extraction {
                role: "r".into(),
                layer1: "no frontmatter".into(),
                cause: Box::new(config()),
                help: crate::extract::extraction_help(config().help_text()),
            },
        ];
        for err in errors {
            let library = err.help_text().unwrap_or_default();
            assert!(!library.contains("uwf "), "{library}");
            let code = err.code().map(|c| c.to_string());
            let text = err.to_string();
            let shown = report(err);
            let help = shown.help().map(|h| h.to_string()).unwrap_or_default();
            assert!(help.contains("uwf "), "{help}");
            // The rest of the diagnostic is the error's own.
            assert_eq!(shown.to_string(), text);
            assert_eq!(shown.code().map(|c| c.to_string()), code);
        }
    }

    #[test]
    fn a_report_without_a_kit_error_is_left_alone() {
        let r = hinted(miette::miette!("plain"));
        assert_eq!(r.to_string(), "plain");
        let r = hinted(miette::Report::new(KitError::MissingDetail(
            Hash::from_u64(1),
        )));
        assert!(format!("{r:?}").contains("ctx.store().put"), "{r:?}");
    }
}
