//! Short text for one-line displays.

/// `text` on one line, cut to `max` characters with an ellipsis.
pub fn shorten(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let cut: String = line.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortens_to_one_line() {
        assert_eq!(shorten("Fix the\nlogin  bug", 40), "Fix the login bug");
        assert_eq!(shorten("abcdef", 4), "abc…");
        assert_eq!(shorten("", 4), "");
    }
}
