//! `uwf store …`: which store commands use, setting one up, copying one
//! into another.

use std::path::Path;

use serde_json::{Value, json};

use crate::cli::StoreCommand;
use crate::engine::copy::copy_store;
use crate::engine::location::{self, LocationSource, StoreLocation};
use crate::error::CliError;

/// A store named on the command line (`--from`, `--to`).
fn named(text: &str) -> Result<StoreLocation, CliError> {
    let cwd = std::env::current_dir().unwrap_or_default();
    Ok(StoreLocation::parse(text, &cwd, LocationSource::Flag)?)
}

/// What a `store` subcommand answers, and the failure to report after
/// printing it (a copy with conflicts).
pub struct Outcome {
    /// The answer.
    pub value: Value,
    /// Reported after the answer is printed.
    pub failure: Option<CliError>,
}

/// Runs a `store` subcommand on the storage root `root` (`flag`: `--store`).
pub fn run(root: &Path, flag: Option<&str>, cmd: StoreCommand) -> Result<Outcome, CliError> {
    let value = |value| {
        Ok(Outcome {
            value,
            failure: None,
        })
    };
    match cmd {
        StoreCommand::Show => {
            let (loc, source) = location::resolve(flag, root)?;
            value(json!({
                "store": loc.display(),
                "kind": location::kind(&loc, source)?,
                "from": source.to_string(),
                "root": root,
            }))
        }
        StoreCommand::Init { config } => {
            let (loc, source) = location::resolve(flag, root)?;
            let kind = location::kind(&loc, source)?;
            // Read and checked before anything is written: a missing or
            // invalid file changes nothing, and a configuration every
            // machine would fail to read or use is never shared.
            let text = config
                .as_deref()
                .map(|p| -> Result<String, CliError> {
                    let text = crate::input::read_text(&p.to_string_lossy())?;
                    let config = uwf_state::parse_config(p, &text)?;
                    uwf_state::policy::check(&config)
                        .map_err(|e| e.in_config(p.display().to_string()))?;
                    Ok(text)
                })
                .transpose()?;
            let report = location::init(root, &loc)?;
            let mut v = json!({ "store": loc.display(), "kind": kind });
            if let Some(r) = report {
                v["schemaVersion"] = json!(r.to);
                v["previousVersion"] = json!(r.from);
                v["applied"] = json!(r.applied);
            }
            if let Some(text) = text {
                let engine = location::open(root, &loc)?;
                engine.state().set_config_text(Some(&text))?;
                v["config"] = json!("set");
            }
            value(v)
        }
        StoreCommand::Copy { from, to } => {
            let (from, to) = (named(&from)?, named(&to)?);
            if from == to {
                return Err(CliError::SameStore(from.display()));
            }
            let src = location::open(root, &from)?;
            // The destination's schema is created if it is new.
            location::init(root, &to)?;
            let dst = location::open(root, &to)?;
            let report = copy_store(&src, &dst, &mut |line| {
                tracing::info!("store copy: {line}");
            })?;
            let conflicts = report.conflicts.len();
            let mut v =
                serde_json::to_value(&report).map_err(|e| CliError::Output(e.to_string()))?;
            v["from"] = json!(from.display());
            v["to"] = json!(to.display());
            // The report is the answer either way; the exit status says
            // whether the destination holds everything.
            Ok(Outcome {
                value: v,
                failure: (conflicts > 0).then_some(CliError::CopyConflicts(conflicts)),
            })
        }
    }
}
