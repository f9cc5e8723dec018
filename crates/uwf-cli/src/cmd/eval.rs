//! `uwf eval`

use serde_json::Value;
use uwf_cas::Hash;
use uwf_moderator::thread;

use crate::cli::EvalArgs;
use crate::engine::{self, Ctx};
use crate::error::CliError;
use crate::input;

/// Where `uwf eval` takes its input from; the storage root is opened only
/// for a thread or a step.
pub fn needs_store(args: &EvalArgs) -> bool {
    args.thread.is_some() || args.at.is_some()
}

/// Evaluates the expression; `None` is JSONata's `undefined`.
pub fn run(ctx: Option<&Ctx>, args: &EvalArgs) -> Result<Option<Value>, CliError> {
    let input = match (ctx, &args.thread, &args.at, &args.input) {
        (Some(ctx), Some(id), _, _) => {
            let id = crate::lookup::thread(ctx, id)?;
            Some(context_at(ctx, engine::any_head(ctx, id)?)?)
        }
        (Some(ctx), None, Some(at), _) => {
            let hash = at.parse::<Hash>().map_err(CliError::from)?;
            Some(context_at(ctx, hash)?)
        }
        (_, _, _, Some(arg)) => {
            // A document of the user's: its members keep their order, as
            // the reference JSONata has them (docs/workflow.md, "JSONata").
            let document = input::read_json("the input", arg)?;
            return Ok(uwf_moderator::evaluate_document(
                &args.expression,
                Some(&document),
            )?);
        }
        _ => None,
    };
    Ok(uwf_moderator::evaluate_expression(
        &args.expression,
        input.as_ref(),
    )?)
}

/// The moderator context of the thread ending at `head`, as JSON.
fn context_at(ctx: &Ctx, head: Hash) -> Result<Value, CliError> {
    let view = thread::load(ctx.cas(), head)?;
    serde_json::to_value(view.context()).map_err(|e| CliError::Output(e.to_string()))
}
