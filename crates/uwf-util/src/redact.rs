//! Cutting secrets out of text before uwf stores or shows it.
//!
//! A [`Redactor`] is built from named secret values (the entries of a
//! store's `.env`, the store's password, …) and replaces every occurrence
//! of any of them in a text by a marker naming it, `‹redacted:NAME›`, so
//! that a reader still sees *which* secret was there. It knows nothing of
//! where secrets come from; `uwf-engine` gathers them (see
//! `docs/state.md`, "Secrets and file modes").
//!
//! What counts as an occurrence:
//!
//! - the value exactly as given, after trimming surrounding whitespace;
//! - for a value of several lines (a PEM key in `.env`), each of its lines
//!   on its own as well, so text redacted line by line (an agent's stderr)
//!   loses every line of it;
//! - nothing shorter than [`MIN_SECRET_CHARS`] characters: a value that
//!   short would cut ordinary words out of every log (`.env` may also hold
//!   settings such as `UWF_CLAUDE_MODEL=sonnet`), and is no secret worth
//!   the name anyway.
//!
//! Overlapping occurrences of different secrets (one a prefix of another,
//! or two that share characters) become one marker naming each secret that
//! contributes characters, `‹redacted:A,B›`; no character of either is
//! left. Matching is literal: a secret that a program re-encodes (base64,
//! JSON escapes, upper case) before printing it is not recognised.
//!
//! Text with no secret in it is returned borrowed, and the search is a
//! substring search per secret, so redacting an agent's output costs
//! little more than reading it.

use std::borrow::Cow;
use std::fmt;

/// Values shorter than this many characters (after trimming) are not
/// redacted: they would match ordinary text.
pub const MIN_SECRET_CHARS: usize = 8;

/// The marker that replaces a secret named `name` (`‹redacted:NAME›`).
pub fn marker(name: &str) -> String {
    format!("‹redacted:{name}›")
}

/// One value to cut out, with the name its marker shows.
#[derive(Clone)]
struct Secret {
    name: String,
    value: String,
}

/// Replaces known secret values in text by `‹redacted:NAME›` markers.
///
/// `Debug` shows the names only, never a value.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Distinct values, each at least [`MIN_SECRET_CHARS`] long.
    secrets: Vec<Secret>,
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.secrets.iter().map(|s| s.name.as_str()).collect();
        names.dedup();
        f.debug_struct("Redactor").field("names", &names).finish()
    }
}

impl Redactor {
    /// A redactor that knows no secret (redacts nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the secret `value`, shown as `name` where it is cut out. Values
    /// too short to be told from ordinary text ([`MIN_SECRET_CHARS`]) are
    /// skipped; a value already known keeps its first name.
    pub fn add(&mut self, name: &str, value: &str) -> &mut Self {
        self.push(name, value.trim());
        if value.contains('\n') {
            for line in value.lines() {
                self.push(name, line.trim());
            }
        }
        self
    }

    /// [`add`](Self::add), by value.
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.add(name, value);
        self
    }

    fn push(&mut self, name: &str, value: &str) {
        if value.chars().count() < MIN_SECRET_CHARS || self.secrets.iter().any(|s| s.value == value)
        {
            return;
        }
        self.secrets.push(Secret {
            name: name.to_owned(),
            value: value.to_owned(),
        });
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every known secret replaced by its marker; borrowed when
    /// nothing was found.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        // (start, end, index of the secret) of every occurrence, overlapping
        // ones included.
        let mut hits: Vec<(usize, usize, usize)> = Vec::new();
        for (i, secret) in self.secrets.iter().enumerate() {
            let mut from = 0;
            while let Some(at) = text[from..].find(&secret.value) {
                let start = from + at;
                hits.push((start, start + secret.value.len(), i));
                // The next occurrence may overlap this one (`aaaa` in `aaaaa`).
                from = start + text[start..].chars().next().map_or(1, char::len_utf8);
            }
        }
        if hits.is_empty() {
            return Cow::Borrowed(text);
        }
        // By start, the longest first: a region starts with its widest match.
        hits.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        let mut i = 0;
        while i < hits.len() {
            let (start, mut end, first) = hits[i];
            let mut names = vec![self.secrets[first].name.as_str()];
            i += 1;
            // Occurrences that overlap the region widen it; one lying wholly
            // inside adds nothing (`sk-a` inside `sk-abc`) and is not named.
            while let Some(&(s, e, k)) = hits.get(i)
                && s < end
            {
                if e > end {
                    end = e;
                    let name = self.secrets[k].name.as_str();
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                i += 1;
            }
            out.push_str(&text[copied..start]);
            out.push_str(&marker(&names.join(",")));
            copied = end;
        }
        out.push_str(&text[copied..]);
        Cow::Owned(out)
    }

    /// Redacts `text` in place; returns whether anything was cut out.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(redacted) => {
                *text = redacted;
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pairs: &[(&str, &str)]) -> Redactor {
        let mut r = Redactor::new();
        for (k, v) in pairs {
            r.add(k, v);
        }
        r
    }

    #[test]
    fn replaces_every_occurrence_with_a_named_marker() {
        let red = r(&[("API_KEY", "sk-abc123456")]);
        assert_eq!(
            red.redact("401 for key sk-abc123456; again sk-abc123456."),
            "401 for key ‹redacted:API_KEY›; again ‹redacted:API_KEY›."
        );
        assert_eq!(marker("X"), "‹redacted:X›");
    }

    #[test]
    fn text_without_secrets_is_borrowed() {
        let red = r(&[("API_KEY", "sk-abc123456")]);
        assert!(matches!(red.redact("nothing here"), Cow::Borrowed(_)));
        assert!(matches!(Redactor::new().redact("x"), Cow::Borrowed(_)));
        let mut s = String::from("plain");
        assert!(!red.redact_in_place(&mut s));
        let mut s = String::from("k=sk-abc123456");
        assert!(red.redact_in_place(&mut s));
        assert_eq!(s, "k=‹redacted:API_KEY›");
    }

    #[test]
    fn short_and_empty_values_are_skipped() {
        let red = r(&[
            ("A", ""),
            ("B", "1234567"),
            ("C", "   short  "),
            ("D", "sonnet"),
        ]);
        assert!(red.is_empty());
        assert_eq!(red.redact("1234567 short sonnet"), "1234567 short sonnet");
        // Exactly the minimum counts, in characters, not bytes.
        let red = r(&[("E", "12345678"), ("F", "ééééééé")]);
        assert_eq!(red.redact("x12345678y ééééééé"), "x‹redacted:E›y ééééééé");
    }

    #[test]
    fn surrounding_whitespace_is_ignored() {
        let red = r(&[("K", "  padded-secret\n")]);
        assert_eq!(red.redact("[padded-secret]"), "[‹redacted:K›]");
    }

    #[test]
    fn a_secret_that_is_a_prefix_of_another_leaves_nothing_of_either() {
        let red = r(&[("SHORT", "sk-abcdefgh"), ("LONG", "sk-abcdefgh-ijkl")]);
        assert_eq!(
            red.redact("a sk-abcdefgh-ijkl b sk-abcdefgh c"),
            "a ‹redacted:LONG› b ‹redacted:SHORT› c"
        );
        // The order they were added in does not matter.
        let red = r(&[("LONG", "sk-abcdefgh-ijkl"), ("SHORT", "sk-abcdefgh")]);
        assert_eq!(
            red.redact("sk-abcdefgh-ijkl sk-abcdefgh"),
            "‹redacted:LONG› ‹redacted:SHORT›"
        );
    }

    #[test]
    fn overlapping_secrets_become_one_marker_naming_both() {
        let red = r(&[("A", "abcdefgh"), ("B", "efghijkl")]);
        assert_eq!(red.redact("x abcdefghijkl y"), "x ‹redacted:A,B› y");
        // Adjacent, not overlapping: two markers.
        assert_eq!(red.redact("abcdefghefghijkl"), "‹redacted:A›‹redacted:B›");
        // A secret wholly inside another is not named.
        let red = r(&[("OUTER", "0123456789abcdef"), ("INNER", "456789ab")]);
        assert_eq!(red.redact("-0123456789abcdef-"), "-‹redacted:OUTER›-");
        assert_eq!(red.redact("-456789ab-"), "-‹redacted:INNER›-");
    }

    #[test]
    fn overlapping_occurrences_of_one_secret() {
        let red = r(&[("A", "aaaaaaaa")]);
        assert_eq!(red.redact("aaaaaaaaaa"), "‹redacted:A›");
    }

    #[test]
    fn the_same_value_under_two_names_keeps_the_first() {
        let red = r(&[("FIRST", "same-value-1"), ("SECOND", "same-value-1")]);
        assert_eq!(red.redact("same-value-1"), "‹redacted:FIRST›");
    }

    #[test]
    fn multi_line_values_are_redacted_whole_and_line_by_line() {
        let pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAKj34GkxFhD9\n-----END KEY-----\n";
        let red = r(&[("PEM", pem)]);
        assert_eq!(red.redact(pem.trim()), "‹redacted:PEM›");
        assert_eq!(
            red.redact("line: MIIBOgIBAAJBAKj34GkxFhD9"),
            "line: ‹redacted:PEM›"
        );
    }

    #[test]
    fn unicode_around_and_inside_secrets() {
        let red = r(&[("K", "ключ-секрет")]);
        assert_eq!(
            red.redact("→ключ-секрет←ключ-секрет"),
            "→‹redacted:K›←‹redacted:K›"
        );
    }

    #[test]
    fn debug_shows_names_never_values() {
        let red = r(&[("API_KEY", "sk-abc123456")]);
        let shown = format!("{red:?}");
        assert!(shown.contains("API_KEY"), "{shown}");
        assert!(!shown.contains("sk-abc123456"), "{shown}");
    }

    proptest::proptest! {
        /// Whatever the secrets share with each other and with the text
        /// around them, none is left in the result, and text without one
        /// is unchanged.
        #[test]
        fn no_secret_survives(
            secrets in proptest::collection::vec("[ab]{8,12}", 1..4),
            text in "[ab \\n]{0,80}",
        ) {
            let mut red = Redactor::new();
            for (i, s) in secrets.iter().enumerate() {
                red.add(&format!("S{i}"), s);
            }
            let mut text = text;
            text.push_str(&secrets[0]);
            let out = red.redact(&text);
            for s in &secrets {
                proptest::prop_assert!(!out.contains(s.as_str()), "{s} in {out}");
            }
            proptest::prop_assert!(out.contains("‹redacted:"));
            let plain = "cd ef\ngh ".repeat(4);
            proptest::prop_assert_eq!(red.redact(&plain), plain.as_str());
        }
    }
}
