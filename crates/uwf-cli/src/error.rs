//! Errors the binary reports.

use std::path::PathBuf;

use miette::{Diagnostic, NamedSource, SourceSpan};

/// Anything a command can fail with.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum CliError {
    /// A store operation failed.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Cas(#[from] uwf_cas::CasError),

    /// The storage root could not be determined.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Root(#[from] uwf_util::root::RootError),

    /// An input is not valid JSON.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Json(Box<JsonInputError>),

    /// An input file could not be read.
    #[error("cannot read {path}: {source}")]
    #[diagnostic(code(uwf::input::read))]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// An argument is neither a file nor JSON.
    #[error("{what} {arg:?} is neither an existing file nor JSON")]
    #[diagnostic(
        code(uwf::input::missing),
        help("check the path, or quote the JSON so the shell keeps it whole")
    )]
    NotFileNorJson {
        /// Which input.
        what: String,
        /// The argument (shortened).
        arg: String,
    },

    /// `cas verify` found problems (already printed on stdout).
    #[error("the store has {0} problem(s); see the report on stdout")]
    #[diagnostic(
        code(uwf::cas::verify_failed),
        help(
            "corrupt nodes must be restored or removed; dangling references point at nodes that were never stored or were deleted"
        )
    )]
    VerifyFailed(usize),

    /// Output could not be written.
    #[error("cannot write output: {0}")]
    #[diagnostic(code(uwf::output))]
    Output(String),
}

/// An input is not valid JSON, with the place it went wrong.
#[derive(Debug, thiserror::Error, Diagnostic)]
#[error("{what} is not valid JSON: {message}")]
#[diagnostic(
    code(uwf::input::json),
    help("pass JSON text, a path to a JSON file, or - to read stdin")
)]
pub struct JsonInputError {
    /// Which input.
    pub what: String,
    /// serde_json's message.
    pub message: String,
    /// The text.
    #[source_code]
    pub src: NamedSource<String>,
    /// Where it went wrong.
    #[label("here")]
    pub span: SourceSpan,
}
