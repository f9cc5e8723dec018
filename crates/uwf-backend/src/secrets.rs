//! The secrets uwf keeps out of everything it writes, and the
//! [`Redactor`] that cuts them out (docs/state.md, "Secrets and file
//! modes").
//!
//! A store's secrets are:
//!
//! - every value of its `.env` ([`Settings::secrets`]), and the value of
//!   the same variable in the process environment when that one is set
//!   (it wins over `.env`, so it is what an agent gets);
//! - the store's password: [`STORE_PASSWORD_ENV`] and [`PGPASSWORD_ENV`]
//!   in the environment (or `.env`, above), and a password written into a
//!   store URL, as written and percent-decoded.
//!
//! The engine builds its redactor for every attempt, from the same
//! reading of `.env` that gives the agent its environment, so a changed
//! `.env` applies to the next agent at once; the agent kit builds one when
//! it opens its store.
//!
//! [`Settings::secrets`]: uwf_state::Settings::secrets

use std::path::Path;

use uwf_util::redact::Redactor;

use crate::location::{self, PGPASSWORD_ENV, STORE_ENV, STORE_PASSWORD_ENV, StoreLocation};

/// The redactor of `env_file` (the store's `.env` entries) and `store`
/// (named secrets of the store itself, such as a URL's password), plus the
/// password variables of the process environment.
pub fn redactor(env_file: &[(String, String)], store: &[(String, String)]) -> Redactor {
    let mut r = Redactor::new();
    for (name, value) in env_file {
        r.add(name, value);
        // The environment wins over `.env` when an agent starts.
        if let Ok(now) = std::env::var(name) {
            r.add(name, &now);
        }
    }
    for (name, value) in store {
        r.add(name, value);
    }
    for name in [STORE_PASSWORD_ENV, PGPASSWORD_ENV] {
        if let Ok(value) = std::env::var(name) {
            r.add(name, &value);
        }
    }
    // An agent's store arrives as a URL, which may carry the password.
    if let Ok(url) = std::env::var(STORE_ENV) {
        for password in url_passwords(&url) {
            r.add(STORE_PASSWORD_ENV, &password);
        }
    }
    r
}

/// The password a store URL carries (`scheme://user:PASSWORD@…` or a
/// `password=` parameter), both as written and percent-decoded: an agent
/// may print either. Empty when there is none.
pub fn url_passwords(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some((_, rest)) = url.split_once("://") else {
        return out;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        out.push(password.to_owned());
    }
    if let Some((_, query)) = tail.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && key.eq_ignore_ascii_case("password")
            {
                out.push(value.to_owned());
            }
        }
    }
    let decoded: Vec<String> = out.iter().map(|p| percent_decode(p)).collect();
    out.extend(decoded);
    out.retain(|p| !p.is_empty());
    out.dedup();
    out
}

/// Decodes `%XX` escapes (invalid ones are kept as they are).
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Best effort, for a front end about to report an error with no engine at
/// hand: the redactor of the store a command on `root` uses (`flag`:
/// `--store`), from whatever can be read. Nothing here fails: a secret
/// that cannot be read is one the error cannot contain either.
pub fn for_root(root: &Path, flag: Option<&str>) -> Redactor {
    let env_file = uwf_state::FsState::new(root).env_vars().unwrap_or_default();
    let mut store = Vec::new();
    if let Ok((StoreLocation::Url(url), _)) = location::resolve(flag, root) {
        for password in url_passwords(&url) {
            store.push((STORE_PASSWORD_ENV.to_owned(), password));
        }
    }
    redactor(&env_file, &store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_as_written_and_decoded() {
        assert_eq!(
            url_passwords("postgres://u:s%40cret-pass@h:5432/db"),
            ["s%40cret-pass", "s@cret-pass"]
        );
        assert_eq!(
            url_passwords("postgresql://u@/db?host=/run/pg&password=pw%2F1234567&x=1"),
            ["pw%2F1234567", "pw/1234567"]
        );
        assert_eq!(
            url_passwords("postgres://u:plain-password@h/db"),
            ["plain-password"]
        );
        assert!(url_passwords("postgres://u@h/db").is_empty());
        assert!(url_passwords("/a/directory").is_empty());
        assert!(url_passwords("postgres://u:@h/db").is_empty());
        // An `@` in the password itself: the last one ends it.
        assert_eq!(url_passwords("postgres://u:a@b-c-d-e@h/db"), ["a@b-c-d-e"]);
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn env_file_entries_and_store_secrets_are_redacted() {
        let r = redactor(
            &[
                (
                    "UWF_ENGINE_TEST_KEY_9Q2".into(),
                    "sk-test-0123456789".into(),
                ),
                ("MODEL".into(), "sonnet".into()),
            ],
            &[(STORE_PASSWORD_ENV.into(), "db-password-1".into())],
        );
        assert_eq!(
            r.redact("sk-test-0123456789 db-password-1 sonnet"),
            "‹redacted:UWF_ENGINE_TEST_KEY_9Q2› ‹redacted:UWF_STORE_PASSWORD› sonnet"
        );
    }
}
