//! Per-workflow concurrency limits and the kill flag (docs/state.md, "Slots") end to end:
//! many real `uwf` processes at once, agents that log when they run, and
//! the exit statuses of steps that get no slot or whose thread is killed.
//! Every test runs on both stores (`per_backend!`): on PostgreSQL the
//! slots are advisory locks and the queue a table, shared by every machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::{Child, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Backend, Env, example, mock_bin, processes_matching, wait_no_process, wait_until};
use serde_json::Value;

per_backend!(
    queued_steps_never_exceed_the_limit_and_all_land,
    thread_run_respects_the_limit,
    a_full_queue_pushes_out_its_oldest_waiter,
    dropped_steps_fail_at_once_with_exit_3_and_nothing_is_lost,
    a_slot_is_freed_when_its_uwf_is_killed_with_sigkill,
    a_thread_killed_while_its_agent_runs_exits_5,
    a_thread_killed_while_queued_exits_5_and_never_runs_its_agent,
    steps_that_lose_to_the_step_ending_the_thread_are_conflicts_not_kills,
    answers_that_lose_to_the_answer_ending_the_thread_are_conflicts_not_kills,
    bad_limits_are_refused_naming_the_file,
    limits_of_other_workflows_change_nothing
);

// ---------------------------------------------------------------- helpers

/// Exit status of a step that got no slot (docs/state.md#exit-status).
const EXIT_NO_SLOT: i32 = 3;
/// Exit status of a step whose thread was killed.
const EXIT_KILLED: i32 = 5;

static AGENTS: AtomicUsize = AtomicUsize::new(0);

/// A store with solve-issue registered and `limits` (the body of its
/// `workflows` entry, e.g. `{concurrency: 2}`) in its configuration;
/// `None` when PostgreSQL tests are skipped.
fn limited(backend: Backend, limits: &str) -> Option<Env> {
    let env = Env::on(backend)?;
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    env.set_config(&format!("workflows:\n  solve-issue: {limits}\n"));
    Some(env)
}

/// `--agent` running uwf-mock (every answer taking `delay`), wrapped in a
/// shell that appends `b <ns> <pid>` to `agents.log` before and
/// `e <ns> <pid>` after.
fn logging_agent(env: &Env, delay: &str) -> String {
    logging_agent_after(env, "0", delay)
}

/// [`logging_agent`] whose shell first sleeps `secs` seconds, before
/// uwf-mock starts: an agent process that lives on whether or not it could
/// reach its store (an agent reaches a PostgreSQL store through the relay
/// of its `uwf`, which is gone once that `uwf` is killed).
fn logging_agent_after(env: &Env, secs: &str, delay: &str) -> String {
    let n = AGENTS.fetch_add(1, Ordering::Relaxed);
    let scenario = env.file(
        &format!("scenario-{n}.yaml"),
        &common::solve_scenario(delay),
    );
    let (log, mock) = (log_path(env), mock_bin());
    let (log, mock, scenario) = (log.display(), mock.display(), scenario.display());
    let script = format!(
        r#"echo "b $(date +%s%N) $$" >> "{log}"; sleep {secs}; "{mock}" "{scenario}" "$@"; r=$?; echo "e $(date +%s%N) $$" >> "{log}"; exit $r"#
    );
    assert!(!script.contains('\''));
    format!("sh -c '{script}' agent")
}

fn log_path(env: &Env) -> PathBuf {
    env.dir.path().join("agents.log")
}

/// (begin, end) events of the agents so far.
fn log_events(env: &Env) -> Vec<(u128, bool)> {
    std::fs::read_to_string(log_path(env))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let begin = w.next() == Some("b");
            (w.next().unwrap().parse().unwrap(), begin)
        })
        .collect()
}

fn begun(env: &Env) -> usize {
    log_events(env).iter().filter(|(_, b)| *b).count()
}

fn ended(env: &Env) -> usize {
    log_events(env).iter().filter(|(_, b)| !*b).count()
}

/// The most agents that ran at the same moment (ties count ends first:
/// an agent logs its end before its uwf frees the slot).
fn max_overlap(env: &Env) -> usize {
    let mut events = log_events(env);
    events.sort();
    let (mut now, mut most) = (0usize, 0usize);
    for (_, begin) in events {
        if begin {
            now += 1;
            most = most.max(now);
        } else {
            now = now.saturating_sub(1);
        }
    }
    most
}

fn start(env: &Env) -> String {
    let v = env.json(&["thread", "start", "solve-issue", "-p", "Fix the login bug"]);
    v["thread"].as_str().unwrap().to_string()
}

fn spawn_step(env: &Env, id: &str, agent: &str) -> Child {
    env.uwf_process()
        .args(["thread", "step", id, "--agent", agent])
        .spawn()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn contains_all(text: &str, parts: &[&str]) {
    for p in parts {
        assert!(text.contains(p), "{p:?} not in:\n{text}");
    }
}

/// The queue directory of solve-issue's slots (filesystem store).
fn queue_dir(env: &Env) -> PathBuf {
    env.root().join("slots/solve-issue/queue")
}

/// Steps waiting in solve-issue's queue (tickets not evicted, not being
/// created): files of its queue directory, or rows of `uwf_slot_tickets`.
fn tickets(env: &Env) -> usize {
    if let Some(db) = &env.db {
        let row = db.client().query_one(
            "SELECT count(*) FROM uwf_slot_tickets t JOIN uwf_slot_workflows w \
             ON w.id = t.workflow_id WHERE w.name = 'solve-issue' AND NOT t.evicted",
            &[],
        );
        // No table yet: nothing was ever queued.
        return row.map_or(0, |r| usize::try_from(r.get::<_, i64>(0)).unwrap());
    }
    std::fs::read_dir(queue_dir(env)).map_or(0, |rd| {
        rd.filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && !name.ends_with(".evicted")
        })
        .count()
    })
}

/// Whether any slot or queue state exists: the `slots/` directory, or a
/// row of the slot tables.
fn slots_used(env: &Env) -> bool {
    if env.db.is_some() {
        let tables = env.tables();
        return tables.contains_key("uwf_slot_workflows")
            || tables.contains_key("uwf_slot_tickets");
    }
    env.root().join("slots").exists()
}

// ---------------------------------------------------------------- queue

fn queued_steps_never_exceed_the_limit_and_all_land(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 2, overflow: queue}") else {
        return;
    };
    let ids: Vec<String> = (0..8).map(|_| start(&env)).collect();
    let agent = logging_agent(&env, "600ms");
    let children: Vec<Child> = ids.iter().map(|id| spawn_step(&env, id, &agent)).collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for (id, out) in ids.iter().zip(&outs) {
        assert!(out.status.success(), "{id}: {}", stderr(out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["thread"], id.as_str());
        assert_eq!(env.roles(id), ["planner"]);
    }
    assert_eq!((begun(&env), ended(&env)), (8, 8));
    assert_eq!(max_overlap(&env), 2, "{:?}", log_events(&env));
    // The others said they were waiting, and how many were ahead.
    let waited = outs
        .iter()
        .filter(|o| stderr(o).contains("waiting for a slot of workflow solve-issue ("))
        .count();
    assert!(waited >= 3, "only {waited} step(s) reported waiting");
    assert_eq!(tickets(&env), 0);
    env.json(&["cas", "verify"]);
}

fn thread_run_respects_the_limit(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 1}") else {
        return;
    };
    let agent = logging_agent(&env, "50ms");
    let runs: Vec<Child> = (0..3)
        .map(|_| {
            env.uwf_process()
                .args(["thread", "run", "solve-issue", "-p", "x", "--agent", &agent])
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["done"], true);
        let id = v["thread"].as_str().unwrap();
        assert_eq!(env.roles(id), ["planner", "developer", "reviewer"]);
    }
    assert_eq!(begun(&env), 9);
    assert_eq!(max_overlap(&env), 1, "{:?}", log_events(&env));
}

fn a_full_queue_pushes_out_its_oldest_waiter(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 1, overflow: queue, maxQueue: 1}") else {
        return;
    };
    let (a, b, c) = (start(&env), start(&env), start(&env));
    let b_head = env.json(&["thread", "show", &b])["head"].clone();
    let a_child = spawn_step(&env, &a, &logging_agent(&env, "1500ms"));
    wait_until("a's agent", Duration::from_secs(10), || begun(&env) == 1);
    let b_child = spawn_step(&env, &b, &logging_agent(&env, "0ms"));
    wait_until("b in the queue", Duration::from_secs(10), || {
        tickets(&env) == 1
    });
    let c_child = spawn_step(&env, &c, &logging_agent(&env, "0ms"));

    // b is the oldest waiter of a full queue: it gives up, at once.
    let b_out = b_child.wait_with_output().unwrap();
    assert_eq!(
        b_out.status.code(),
        Some(EXIT_NO_SLOT),
        "{}",
        stderr(&b_out)
    );
    assert!(b_out.stdout.is_empty());
    contains_all(
        &stderr(&b_out),
        &[
            "uwf::thread::evicted",
            &format!("thread {b} was pushed out of the queue of workflow solve-issue"),
            "a newer step arrived while the queue was full (maxQueue 1)",
            "the thread was not stepped",
            "raise `maxQueue`",
        ],
    );
    assert_eq!(begun(&env), 1, "b's agent never ran");
    assert_eq!(env.json(&["thread", "show", &b])["head"], b_head);

    // a finishes, then c gets the slot.
    for (id, child) in [(&a, a_child), (&c, c_child)] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{id}: {}", stderr(&out));
        assert_eq!(env.roles(id), ["planner"]);
        if *id == c {
            contains_all(
                &stderr(&out),
                &["waiting for a slot of workflow solve-issue (0 ahead)"],
            );
        }
    }
    assert_eq!(max_overlap(&env), 1);
    assert_eq!(tickets(&env), 0);
    if env.db.is_none() {
        // Not even a ticket being created or an evicted one left behind.
        assert_eq!(std::fs::read_dir(queue_dir(&env)).unwrap().count(), 0);
    }
}

// ---------------------------------------------------------------- drop

fn dropped_steps_fail_at_once_with_exit_3_and_nothing_is_lost(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 2, overflow: drop}") else {
        return;
    };
    let ids: Vec<String> = (0..6).map(|_| start(&env)).collect();
    let agent = logging_agent(&env, "1s");
    let children: Vec<Child> = ids.iter().map(|id| spawn_step(&env, id, &agent)).collect();
    let mut dropped = Vec::new();
    let mut landed = 0;
    for (id, child) in ids.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        match out.status.code() {
            Some(0) => {
                landed += 1;
                assert_eq!(env.roles(id), ["planner"]);
            }
            Some(EXIT_NO_SLOT) => {
                assert!(out.stdout.is_empty());
                contains_all(
                    &stderr(&out),
                    &[
                        "uwf::thread::no_slot",
                        "no free slot: workflow solve-issue already runs 2 step(s), its limit with `overflow: drop`",
                        &format!("thread {id} was not stepped"),
                        &format!("`uwf thread step {id}`"),
                    ],
                );
                assert!(env.roles(id).is_empty());
                dropped.push(id.clone());
            }
            other => panic!("{id}: exit {other:?}: {}", stderr(&out)),
        }
    }
    assert!(landed >= 1 && !dropped.is_empty(), "{landed} landed");
    assert_eq!(begun(&env), landed, "a dropped step ran its agent");
    assert!(max_overlap(&env) <= 2, "{:?}", log_events(&env));
    assert_eq!(tickets(&env), 0, "drop never queues");
    assert!(!queue_dir(&env).exists(), "drop never queues");

    // Nothing is lost: the dropped threads step fine once slots are free.
    let quick = logging_agent(&env, "0ms");
    for id in &dropped {
        env.json(&["thread", "step", id, "--agent", &quick]);
        assert_eq!(env.roles(id), ["planner"]);
    }
    env.json(&["cas", "verify"]);
}

// ---------------------------------------------------------------- crashes

fn a_slot_is_freed_when_its_uwf_is_killed_with_sigkill(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 1, overflow: queue}") else {
        return;
    };
    let (a, b) = (start(&env), start(&env));
    let a_head = env.json(&["thread", "show", &a])["head"].clone();
    let mut a_child = spawn_step(&env, &a, &logging_agent_after(&env, "4", "0ms"));
    wait_until("a's agent", Duration::from_secs(10), || begun(&env) == 1);
    a_child.kill().unwrap(); // SIGKILL: no chance to free anything itself
    a_child.wait().unwrap();

    // a's agent runs on (its own process group), but the slot was uwf's.
    let t = Instant::now();
    let out = env
        .uwf()
        .args(["thread", "step", &b, "--agent", &logging_agent(&env, "0ms")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains("waiting for a slot"),
        "{}",
        stderr(&out)
    );
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(env.roles(&b), ["planner"]);
    assert_eq!(ended(&env), 1, "only b's agent has ended: a's still runs");

    let dir = env.dir.path().to_str().unwrap().to_string();
    assert!(
        wait_no_process(&dir, Duration::from_secs(8)),
        "{:?}",
        processes_matching(&dir)
    );
    assert_eq!(env.json(&["thread", "show", &a])["head"], a_head);
}

// ---------------------------------------------------------------- kill

fn a_thread_killed_while_its_agent_runs_exits_5(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    let id = start(&env);
    let child = spawn_step(&env, &id, &logging_agent(&env, "3s"));
    wait_until("the agent", Duration::from_secs(10), || begun(&env) == 1);
    env.json(&["thread", "kill", &id]);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(EXIT_KILLED), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    contains_all(
        &stderr(&out),
        &[
            "uwf::thread::killed",
            &format!("thread {id} was killed while the step ran"),
        ],
    );
    let dir = env.dir.path().to_str().unwrap().to_string();
    assert!(wait_no_process(&dir, Duration::from_secs(5)));
}

fn a_thread_killed_while_queued_exits_5_and_never_runs_its_agent(backend: Backend) {
    let Some(env) = limited(backend, "{concurrency: 1}") else {
        return;
    };
    let (a, b) = (start(&env), start(&env));
    let a_child = spawn_step(&env, &a, &logging_agent(&env, "2s"));
    wait_until("a's agent", Duration::from_secs(10), || begun(&env) == 1);
    let b_child = spawn_step(&env, &b, &logging_agent(&env, "0ms"));
    wait_until("b in the queue", Duration::from_secs(10), || {
        tickets(&env) == 1
    });
    env.json(&["thread", "kill", &b]);
    let t = Instant::now();
    let out = b_child.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(out.status.code(), Some(EXIT_KILLED), "{}", stderr(&out));
    contains_all(
        &stderr(&out),
        &[
            "waiting for a slot of workflow solve-issue (0 ahead)",
            "uwf::thread::killed",
            &format!("thread {b} was killed before its agent started; nothing was run"),
        ],
    );
    assert_eq!(tickets(&env), 0, "b left the queue");
    let out = a_child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(begun(&env), 1, "b's agent never ran");
}

// ------------------------------------------------- races that end a thread

/// A workflow of one role whose step ends the thread.
const ONE_STEP: &str = "name: one-step\ndescription: one step, then the end\nroles:\n  finisher:\n    description: finishes\n    systemPrompt: finish\n    outputSchema: { type: object, properties: { done: { type: boolean } }, required: [done] }\ngraph:\n  $START: [ { role: finisher, condition: null } ]\n  finisher: [ { role: $END, condition: null } ]\n";

/// The lines of `thread`'s history entries (`reason` of each).
fn reasons(env: &Env, thread: &str) -> Vec<Value> {
    env.history()
        .into_iter()
        .filter(|e| e["thread"] == thread)
        .map(|e| e["reason"].clone())
        .collect()
}

/// Checks the outcome of racing commands on one thread whose first step
/// ends it: exactly one lands (`done: true`), every other exits 1 with
/// nothing on stdout, and none says the thread was killed (exit 5) —
/// nobody killed it. `lost` are the codes a loser may report. Returns the
/// losers' stderr.
fn one_won_none_killed(env: &Env, id: &str, outs: &[Output], lost: &[&str]) -> Vec<String> {
    let won: Vec<&Output> = outs.iter().filter(|o| o.status.success()).collect();
    assert_eq!(
        won.len(),
        1,
        "{:?}",
        outs.iter().map(stderr).collect::<Vec<_>>()
    );
    let v: Value = serde_json::from_slice(&won[0].stdout).unwrap();
    assert_eq!(v["done"], true, "{v}");
    let mut errors = Vec::new();
    for out in outs.iter().filter(|o| !o.status.success()) {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(out.stdout.is_empty(), "{err}");
        assert!(!err.contains("uwf::thread::killed"), "{err}");
        assert!(!err.contains("was killed"), "{err}");
        assert!(lost.iter().any(|c| err.contains(c)), "{err}");
        errors.push(err);
    }
    // Archived once, by the step that reached `$END`.
    assert_eq!(reasons(env, id), ["done"]);
    errors
}

fn steps_that_lose_to_the_step_ending_the_thread_are_conflicts_not_kills(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    let wf = env.file("one-step.yaml", ONE_STEP);
    env.json(&["workflow", "put", wf.to_str().unwrap()]);
    let v = env.json(&["thread", "start", "one-step", "-p", "finish it"]);
    let id = v["thread"].as_str().unwrap().to_string();
    let scenario = env.file(
        "finish.yaml",
        "roles:\n  finisher:\n    - output: { done: true }\n      delay: 1s\n",
    );
    let agent = common::mock_agent(&scenario);
    let children: Vec<Child> = (0..8).map(|_| spawn_step(&env, &id, &agent)).collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let errors = one_won_none_killed(
        &env,
        &id,
        &outs,
        // A step that began after the thread ended is `finished` (it never
        // ran); one that ran meanwhile lost a race: `conflict`.
        &["uwf::thread::conflict", "uwf::thread::finished"],
    );
    let finished = format!("thread {id} was finished by another step while this one ran");
    assert!(
        errors.iter().any(|e| e.contains(&finished)),
        "no step says the thread was finished by another: {errors:#?}"
    );
    assert!(wait_no_process(
        env.dir.path().to_str().unwrap(),
        Duration::from_secs(5)
    ));
}

fn answers_that_lose_to_the_answer_ending_the_thread_are_conflicts_not_kills(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.set_config(
        "agents:\n  me: { human: true }\nagentOverrides:\n  one-step: { finisher: me }\n",
    );
    let wf = env.file("one-step.yaml", ONE_STEP);
    env.json(&["workflow", "put", wf.to_str().unwrap()]);
    let v = env.json(&["thread", "start", "one-step", "-p", "finish it"]);
    let id = v["thread"].as_str().unwrap().to_string();
    let out = env.output(&["thread", "step", &id]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let children: Vec<Child> = (0..16)
        .map(|n| {
            env.uwf_process()
                .args(["thread", "answer", &id, "--as", &format!("person{n}")])
                .args(["--output", r#"{"done": true}"#])
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<Output> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    one_won_none_killed(
        &env,
        &id,
        &outs,
        &[
            // Lost the compare-and-swap: to the head that ended the
            // thread, or to the thread already archived by it.
            "uwf::thread::conflict",
            // Began once the thread had ended, or found it at `$END`.
            "uwf::thread::finished",
            "uwf::thread::not_waiting",
        ],
    );
}

// ---------------------------------------------------------------- config

fn bad_limits_are_refused_naming_the_file(backend: Backend) {
    for (limits, expect) in [
        (
            "{concurrency: 0}",
            "concurrency must be between 1 and 1024, not 0",
        ),
        (
            "{concurrency: 1, overflow: drop, maxQueue: 4}",
            "maxQueue applies only to `overflow: queue`",
        ),
        ("{concurrency: 1, overflow: fifo}", "unknown variant `fifo`"),
        ("{concurrency: 1, maxqueue: 4}", "unknown field `maxqueue`"),
    ] {
        let Some(env) = Env::on(backend) else {
            return;
        };
        env.json(&["workflow", "put", &example("solve-issue.yaml")]);
        let yaml = format!("workflows:\n  solve-issue: {limits}\n");
        // `store init --config` checks what it would share, and shares
        // nothing when it is wrong.
        let file = env.file("limits.yaml", &yaml);
        let before = env.snapshot();
        let err = env.fails(&["store", "init", "--config", file.to_str().unwrap()]);
        contains_all(
            &err,
            &[
                &format!("cannot parse {} at line 2", file.display()),
                expect,
            ],
        );
        assert_eq!(env.snapshot(), before, "{limits}");
        // Put there all the same, the step names where it is.
        env.set_config_unchecked(&yaml);
        let id = start(&env);
        let out = env.output(&["thread", "step", &id, "--agent", "true"]);
        assert_eq!(out.status.code(), Some(1), "{limits}");
        contains_all(
            &stderr(&out),
            &[
                &format!("cannot parse {} at line 2", env.config_origin()),
                expect,
            ],
        );
        assert!(env.roles(&id).is_empty());
    }
}

fn limits_of_other_workflows_change_nothing(backend: Backend) {
    let Some(env) = Env::on(backend) else {
        return;
    };
    env.json(&["workflow", "put", &example("solve-issue.yaml")]);
    env.set_config("workflows:\n  triage: {concurrency: 1, overflow: drop}\n");
    let ids = [start(&env), start(&env)];
    let agent = logging_agent(&env, "300ms");
    let children: Vec<Child> = ids.iter().map(|id| spawn_step(&env, id, &agent)).collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert!(!slots_used(&env));
}
