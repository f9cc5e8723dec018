//! "Did you mean …?": the known name closest to a mistyped one.

/// The candidate closest to `word` by edit distance (transpositions count
/// as one edit, case is ignored), if it is close enough to be a typo: at
/// most a third of the word's length, and at least one edit allowed.
pub fn did_you_mean<'a, I>(word: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let lower = word.to_lowercase();
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (strsim::damerau_levenshtein(&lower, &c.to_lowercase()), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_find_their_word_and_strangers_find_nothing() {
        let names = ["notApproved", "approved", "tooLong"];
        assert_eq!(did_you_mean("notAproved", names), Some("notApproved"));
        assert_eq!(did_you_mean("tooLnog", names), Some("tooLong"));
        assert_eq!(did_you_mean("APPROVED", names), Some("approved"));
        assert_eq!(did_you_mean("banana", names), None);
        assert_eq!(did_you_mean("x", ["y"]), Some("y"));
        assert_eq!(did_you_mean("ab", ["xy"]), None);
    }
}
