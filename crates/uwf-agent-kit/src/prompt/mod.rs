//! Prompt assembly for LLM agents.
//!
//! [`AgentContext::prompt`](crate::AgentContext::prompt) is the whole
//! prompt, in this order:
//!
//! 1. the **deliverable format** derived from the role's outputSchema
//!    ([`output_format_instruction`]): the fields with their types, enums
//!    and descriptions, and an example frontmatter built from the schema;
//! 2. the **scope constraint** ([`SCOPE_CONSTRAINT`]);
//! 3. the role's **system prompt**;
//! 4. the **task**: the user's prompt from the thread's StartNode;
//! 5. the **edge prompt** of the graph edge that led to this role, if any;
//! 6. the **history**: the previous steps' outputs, newest first, within a
//!    character quota ([`DEFAULT_HISTORY_QUOTA`], or [`HISTORY_QUOTA_ENV`],
//!    or [`AgentContext::with_history_quota`](crate::AgentContext::with_history_quota)),
//!    with a note saying how many earlier steps were left out and the
//!    `uwf thread read <thread> --before <hash>` command that shows them.
//!
//! 1–3 are [`AgentContext::system_prompt`](crate::AgentContext::system_prompt),
//! 4–6 [`AgentContext::user_prompt`](crate::AgentContext::user_prompt), and
//! `prompt()` is the two joined by a blank line, for agents that take a
//! single prompt. The size is bounded: however long the thread, the history
//! never exceeds its quota (plus a note of fixed size), so the prompt is at
//! most the format instruction, system prompt, task and edge prompt plus
//! `quota + 600 + thread id` characters. The pieces are public for agents
//! that build prompts their own way ([`PromptParts`]).

mod format;

use std::fmt::Write;

use serde_json::Value;
use uwf_cas::Hash;
use uwf_protocol::StepContext;

pub(crate) use format::root_view;
pub use format::{example_frontmatter, output_format_instruction};

/// The scope constraint placed between the format instruction and the
/// role's own system prompt.
pub const SCOPE_CONSTRAINT: &str = "Focus exclusively on YOUR role's deliverable. Do not perform actions outside your role's scope.";

/// Default character quota of the history in a prompt.
pub const DEFAULT_HISTORY_QUOTA: usize = 12_000;

/// Environment variable overriding [`DEFAULT_HISTORY_QUOTA`] (a number of
/// characters; may be set in `<root>/.env`). Read when the context is
/// loaded; [`AgentContext::with_history_quota`](crate::AgentContext::with_history_quota)
/// overrides it.
pub const HISTORY_QUOTA_ENV: &str = "UWF_HISTORY_QUOTA";

/// Fixed upper bound of everything the history adds beyond its quota (its
/// heading, the "earlier steps" note and the cut marker), not counting the
/// thread id and hashes named in the note.
pub const HISTORY_OVERHEAD: usize = 600;

/// The history quota from [`HISTORY_QUOTA_ENV`], or the default. A value
/// that is not a number is ignored with a warning.
pub fn history_quota_from_env() -> usize {
    match std::env::var(HISTORY_QUOTA_ENV) {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) => n,
            Err(_) => {
                tracing::warn!(
                    value = %v,
                    "{HISTORY_QUOTA_ENV} is not a number of characters; using {DEFAULT_HISTORY_QUOTA}"
                );
                DEFAULT_HISTORY_QUOTA
            }
        },
        Err(_) => DEFAULT_HISTORY_QUOTA,
    }
}

/// Everything a prompt is assembled from, borrowed from an
/// [`AgentContext`](crate::AgentContext) (see
/// [`AgentContext::prompt_parts`](crate::AgentContext::prompt_parts)) or
/// built by hand.
#[derive(Debug, Clone, Copy)]
pub struct PromptParts<'a> {
    /// The role's outputSchema.
    pub schema: &'a Value,
    /// The role's own system prompt.
    pub role_prompt: &'a str,
    /// The user's task (the StartNode's prompt).
    pub task: &'a str,
    /// The edge prompt, if any.
    pub edge_prompt: Option<&'a str>,
    /// The thread id (named in the note about left-out steps).
    pub thread: &'a str,
    /// The previous steps, oldest first.
    pub steps: &'a [StepContext],
    /// Their StepNode hashes, parallel to `steps` (may be shorter; the note
    /// then omits `--before`).
    pub step_hashes: &'a [Hash],
    /// The history's character quota.
    pub history_quota: usize,
}

impl PromptParts<'_> {
    /// Format instruction, scope constraint, role system prompt.
    pub fn system(&self) -> String {
        format!(
            "{}\n{SCOPE_CONSTRAINT}\n\n{}",
            output_format_instruction(self.schema),
            self.role_prompt.trim_end()
        )
    }

    /// Task, edge prompt, history (newest first, within the quota).
    pub fn user(&self) -> String {
        let mut out = format!("## Task\n\n{}\n", self.task.trim_end());
        if let Some(p) = self.edge_prompt.filter(|p| !p.trim().is_empty()) {
            let _ = write!(out, "\n## Instructions for this step\n\n{}\n", p.trim_end());
        }
        out.push_str(&history_text(
            self.thread,
            self.steps,
            self.step_hashes,
            self.history_quota,
        ));
        out
    }

    /// [`system`](Self::system) and [`user`](Self::user), separated by a
    /// blank line.
    pub fn full(&self) -> String {
        format!("{}\n\n{}", self.system(), self.user())
    }
}

/// The history section: the steps' outputs as YAML, newest first, as many
/// as fit in `quota` characters (counted in `char`s). The newest step is
/// cut to the quota if it alone is larger. When steps are left out, a note
/// says how many and how to read them. Empty when there are no steps.
///
/// The result is at most `quota + HISTORY_OVERHEAD + thread.len() + 2 × 13`
/// characters, however many steps there are.
pub fn history_text(thread: &str, steps: &[StepContext], hashes: &[Hash], quota: usize) -> String {
    if steps.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n## Previous steps (newest first)\n");
    let mut used = 0usize;
    let mut shown = 0usize;
    for (i, s) in steps.iter().enumerate().rev() {
        let block = step_block(i, s, hashes.get(i));
        let len = block.chars().count();
        if used + len <= quota {
            out.push_str(&block);
            used += len;
            shown += 1;
            continue;
        }
        if shown == 0 && quota > 0 {
            // The newest step alone is over the quota: show its start.
            let cut: String = block.chars().take(quota).collect();
            out.push_str(&cut);
            let how = match hashes.get(i) {
                Some(h) => format!("`uwf thread step-details {h}` and `uwf cas get`"),
                None => "`uwf thread read`".to_owned(),
            };
            let _ = write!(
                out,
                "\n… (cut at the history quota of {quota} characters; read it in full with {how})\n"
            );
            shown = 1;
        }
        break;
    }
    let earlier = steps.len() - shown;
    if earlier > 0 {
        let command = match shown
            .checked_sub(1)
            .and_then(|_| hashes.get(steps.len() - shown))
        {
            Some(oldest_shown) => format!("uwf thread read {thread} --before {oldest_shown}"),
            None => format!("uwf thread read {thread}"),
        };
        let _ = write!(
            out,
            "\n> {earlier} earlier step(s) not shown (history quota: {quota} characters). \
             Read them with `{command}`.\n"
        );
    }
    out
}

fn step_block(i: usize, s: &StepContext, hash: Option<&Hash>) -> String {
    let output = serde_yaml::to_string(&s.output).unwrap_or_else(|_| s.output.to_string());
    let hash = hash.map(|h| format!(" · `{h}`")).unwrap_or_default();
    format!(
        "\n### Step {} · {} (by {}){hash}\n\n```yaml\n{}```\n",
        i + 1,
        s.role,
        s.agent,
        output
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(i: usize, size: usize) -> StepContext {
        StepContext {
            role: if i.is_multiple_of(2) {
                "planner"
            } else {
                "reviewer"
            }
            .into(),
            output: json!({ "plan": format!("{i}:{}", "x".repeat(size)) }),
            detail: Hash::from_u64(0),
            agent: "uwf-mock".into(),
        }
    }

    fn hashes(n: usize) -> Vec<Hash> {
        (0..n as u64).map(|i| Hash::from_u64(i + 1)).collect()
    }

    fn parts<'a>(
        steps: &'a [StepContext],
        hashes: &'a [Hash],
        schema: &'a Value,
    ) -> PromptParts<'a> {
        PromptParts {
            schema,
            role_prompt: "You are a planning agent.",
            task: "Fix the login bug",
            edge_prompt: Some("Review the plan."),
            thread: "01J0000000000000000000000",
            steps,
            step_hashes: hashes,
            history_quota: DEFAULT_HISTORY_QUOTA,
        }
    }

    fn schema() -> Value {
        json!({ "type": "object", "required": ["plan"], "properties": { "plan": { "type": "string" } } })
    }

    #[test]
    fn order_of_the_pieces() {
        let steps = vec![step(0, 3), step(1, 3)];
        let h = hashes(2);
        let s = schema();
        let p = parts(&steps, &h, &s);
        let full = p.full();
        let at = |needle: &str| {
            full.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing from\n{full}"))
        };
        let order = [
            at("## Deliverable format"),
            at(SCOPE_CONSTRAINT),
            at("You are a planning agent."),
            at("## Task\n\nFix the login bug"),
            at("## Instructions for this step\n\nReview the plan."),
            at("## Previous steps (newest first)"),
            at("### Step 2 · reviewer (by uwf-mock) · `"),
            at("### Step 1 · planner"),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{full}");
        assert_eq!(full, format!("{}\n\n{}", p.system(), p.user()));
        assert!(!full.contains("earlier step"), "{full}");
    }

    #[test]
    fn no_history_and_no_edge_prompt() {
        let s = schema();
        let mut p = parts(&[], &[], &s);
        p.edge_prompt = None;
        assert_eq!(p.user(), "## Task\n\nFix the login bug\n");
        p.edge_prompt = Some("  ");
        assert_eq!(p.user(), "## Task\n\nFix the login bug\n");
    }

    #[test]
    fn history_is_bounded_however_long_the_thread() {
        let s = schema();
        let quota = 2_000;
        let thread = "01J0000000000000000000000";
        let mut fixed = None;
        for n in [10, 100, 1_000] {
            let steps: Vec<StepContext> = (0..n).map(|i| step(i, 150)).collect();
            let h = hashes(n);
            let mut p = parts(&steps, &h, &s);
            p.history_quota = quota;
            let empty = PromptParts {
                steps: &[],
                step_hashes: &[],
                ..p
            }
            .full()
            .chars()
            .count();
            let bound = empty + quota + HISTORY_OVERHEAD + thread.len() + 26;
            let full = p.full();
            let len = full.chars().count();
            assert!(len <= bound, "{n} steps: {len} > {bound}");
            let fixed_len = *fixed.get_or_insert(len);
            assert!(
                len.abs_diff(fixed_len) < 400,
                "{n} steps: {len} vs {fixed_len}"
            );
            // The newest steps are shown, the note points at the oldest shown.
            assert!(full.contains(&format!("### Step {n} ·")), "{full}");
            let history = history_text(thread, &steps, &h, quota);
            let shown = history.matches("### Step ").count();
            assert!(shown >= 1 && shown < n, "{shown} of {n}");
            let oldest_shown = h[n - shown];
            assert!(
                history.contains(&format!(
                    "> {} earlier step(s) not shown (history quota: {quota} characters). Read them with `uwf thread read {thread} --before {oldest_shown}`.",
                    n - shown
                )),
                "{history}"
            );
        }
    }

    #[test]
    fn a_huge_newest_step_is_cut_to_the_quota() {
        let steps = vec![step(0, 10), step(1, 50_000)];
        let h = hashes(2);
        let text = history_text("T", &steps, &h, 1_000);
        assert!(
            text.chars().count() < 1_000 + HISTORY_OVERHEAD + 30,
            "{}",
            text.len()
        );
        assert!(
            text.contains("… (cut at the history quota of 1000 characters"),
            "{text}"
        );
        assert!(
            text.contains(&format!("uwf thread step-details {}", h[1])),
            "{text}"
        );
        assert!(
            text.contains(&format!("> 1 earlier step(s) not shown (history quota: 1000 characters). Read them with `uwf thread read T --before {}`", h[1])),
            "{text}"
        );
    }

    #[test]
    fn zero_quota_shows_no_step_but_says_where_they_are() {
        let steps = vec![step(0, 10)];
        let text = history_text("T", &steps, &hashes(1), 0);
        assert!(!text.contains("### Step"), "{text}");
        assert!(text.contains("> 1 earlier step(s) not shown"), "{text}");
        assert!(text.contains("`uwf thread read T`"), "{text}");
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let steps = vec![StepContext {
            role: "r".into(),
            output: json!({ "plan": "é".repeat(5_000) }),
            detail: Hash::from_u64(0),
            agent: "a".into(),
        }];
        let text = history_text("T", &steps, &[], 333);
        assert!(
            text.contains("read it in full with `uwf thread read`"),
            "{text}"
        );
    }
}
