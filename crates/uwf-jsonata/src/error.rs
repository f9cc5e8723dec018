//! The error type shared by parsing and evaluation.

/// A JSONata error: a code from the JSONata error catalogue (`S0xxx` syntax,
/// `T0xxx`/`T1xxx`/`T2xxx` type, `D1xxx`..`D3xxx` dynamic, `U1001` resource
/// limits), a message, and where it happened.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[error("{code}: {message}{}", position.map(|p| format!(" (at byte {p})")).unwrap_or_default())]
pub struct Error {
    /// The JSONata error code, for example `"S0202"` or `"T2001"`.
    pub code: String,
    /// Human-readable description.
    pub message: String,
    /// Byte offset into the expression source, when known.
    pub position: Option<usize>,
    /// The token involved, when relevant.
    pub token: Option<String>,
    /// The offending value (as text), when relevant.
    pub value: Option<String>,
}

impl Error {
    /// Creates an error without a position.
    pub fn new(code: &str, message: impl Into<String>) -> Error {
        Error {
            code: code.to_string(),
            message: message.into(),
            position: None,
            token: None,
            value: None,
        }
    }

    /// Sets the byte position.
    pub fn at(mut self, position: usize) -> Error {
        self.position = Some(position);
        self
    }

    /// Sets the position only if none is set yet.
    pub fn or_at(mut self, position: usize) -> Error {
        if self.position.is_none() {
            self.position = Some(position);
        }
        self
    }

    /// Sets the token.
    pub fn with_token(mut self, token: impl Into<String>) -> Error {
        self.token = Some(token.into());
        self
    }

    /// Sets the value.
    pub fn with_value(mut self, value: impl Into<String>) -> Error {
        self.value = Some(value.into());
        self
    }
}
