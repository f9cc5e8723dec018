//! Tracing set-up for the CLI: diagnostics go to stderr so stdout stays
//! machine-readable.

use std::io::IsTerminal;

use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// The log level for `-v` repetitions and `--quiet`: quiet → error,
/// 0 → warn, 1 → info, 2 → debug, 3 or more → trace. Quiet wins over verbose.
pub fn level_for(verbose: u8, quiet: bool) -> Level {
    match (quiet, verbose) {
        (true, _) => Level::ERROR,
        (false, 0) => Level::WARN,
        (false, 1) => Level::INFO,
        (false, 2) => Level::DEBUG,
        (false, _) => Level::TRACE,
    }
}

/// Installs the global subscriber: compact lines on stderr, coloured only
/// when stderr is a terminal and `NO_COLOR` is unset.
///
/// A non-empty `RUST_LOG` overrides `verbose`/`quiet` entirely. Calling this
/// again is harmless: later calls leave the first subscriber in place.
pub fn init_tracing(verbose: u8, quiet: bool) {
    let default = LevelFilter::from_level(level_for(verbose, quiet));
    // Uses RUST_LOG when it holds valid directives, `default` otherwise
    // (unset, empty, or all invalid).
    let filter = EnvFilter::builder()
        .with_default_directive(default.into())
        .from_env_lossy();
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let ansi = std::io::stderr().is_terminal() && !no_color;
    let _ = tracing_subscriber::fmt()
        .compact()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        assert_eq!(level_for(0, false), Level::WARN);
        assert_eq!(level_for(1, false), Level::INFO);
        assert_eq!(level_for(2, false), Level::DEBUG);
        assert_eq!(level_for(3, false), Level::TRACE);
        assert_eq!(level_for(u8::MAX, false), Level::TRACE);
        assert_eq!(level_for(0, true), Level::ERROR);
        assert_eq!(level_for(3, true), Level::ERROR);
    }

    #[test]
    fn init_twice_does_not_panic() {
        init_tracing(0, false);
        init_tracing(2, true);
        tracing::warn!("tracing initialised twice");
    }
}
