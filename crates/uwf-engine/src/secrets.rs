//! The secrets uwf keeps out of everything it writes, and the
//! [`Redactor`] that cuts them out (docs/state.md, "Secrets and file
//! modes").
//!
//! A store's secrets are:
//!
//! - every value of its `.env` ([`Settings::secrets`]), and the value of
//!   the same variable in the process environment when that one is set
//!   (it wins over `.env`, so it is what an agent gets);
//! - the store's password: `UWF_STORE_PASSWORD` and `PGPASSWORD`
//!   in the environment (or `.env`, above), and a password written into a
//!   store URL, as written and percent-decoded.
//!
//! The engine builds its redactor ([`Engine::redactor`]) for every
//! attempt, from the same reading of `.env` that gives the agent its
//! environment, so a changed `.env` applies to the next agent at once.
//! What counts as a secret is [`uwf_backend::secrets`]'s to say.
//!
//! [`Settings::secrets`]: uwf_state::Settings::secrets

use std::sync::Arc;

use uwf_util::redact::Redactor;

pub use uwf_backend::secrets::{for_root, redactor, url_passwords};

use crate::{Engine, EngineError};

impl Engine {
    /// Names `value` as a secret of the store (its password, say): it is cut
    /// out of everything the engine writes, like the entries of `.env`.
    pub fn with_secret(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.secrets.push((name.into(), value.into()));
        self
    }

    /// The redactor of this engine's store, read now: its `.env`, its
    /// password, the password variables of the environment (see the
    /// [module](self)).
    pub fn redactor(&self) -> Result<Redactor, EngineError> {
        Ok(self.redactor_of(&self.state.secrets()?))
    }

    /// [`redactor`](Self::redactor) with `.env`'s entries read already.
    pub(crate) fn redactor_of(&self, env_file: &[(String, String)]) -> Redactor {
        redactor(env_file, &self.secrets)
    }

    /// From now on, every payload stored through [`Engine::cas`] has the
    /// store's secrets cut out ([`uwf_cas::Cas::with_redactor`]): for a
    /// program that stores what an agent produced (the agent kit, `uwf
    /// agent submit`, `uwf cas put`).
    pub fn redacting(mut self) -> Result<Self, EngineError> {
        let redactor = Arc::new(self.redactor()?);
        self.cas = self.cas.with_redactor(redactor);
        Ok(self)
    }
}
