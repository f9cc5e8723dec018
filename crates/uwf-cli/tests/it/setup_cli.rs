//! `uwf setup` and `uwf config show`, through the real binary: scripted
//! runs, merging, refusals, masking, and an interactive run driven through
//! a pseudo-terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Output;

use common::Env;
use serde_json::Value;

/// Variables of the presets, removed from the child's environment so the
/// developer's own keys do not leak into (or change) the tests.
const KEY_VARS: [&str; 10] = [
    "OPENAI_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
    "DEEPSEEK_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "MISTRAL_API_KEY",
    "OLLAMA_API_KEY",
    "LMSTUDIO_API_KEY",
    "MYCORP_API_KEY",
];

const KEY_A: &str = "sk-test-AAAAAAAAAAAAAAAAAAAA1234";
const KEY_B: &str = "sk-or-v1-BBBBBBBBBBBBBBBBBBBB5678";

/// `uwf args…` with no key variables (assert_cmd pipes stdin, so it is
/// never a terminal).
fn run(env: &Env, args: &[&str]) -> Output {
    let mut cmd = env.uwf();
    for var in KEY_VARS {
        cmd.env_remove(var);
    }
    cmd.args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `uwf args…`, expects success, returns stdout as JSON.
fn ok(env: &Env, args: &[&str]) -> Value {
    let out = run(env, args);
    assert!(
        out.status.success(),
        "uwf {args:?} failed:\n{}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", text(&out.stdout)))
}

/// Runs `uwf args…`, expects failure with an empty stdout; returns stderr.
fn fails(env: &Env, args: &[&str]) -> String {
    let out = run(env, args);
    assert!(!out.status.success(), "uwf {args:?} should have failed");
    assert!(
        out.stdout.is_empty(),
        "stdout on failure: {}",
        text(&out.stdout)
    );
    text(&out.stderr)
}

fn config(env: &Env) -> serde_yaml::Value {
    let raw = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    serde_yaml::from_str(&raw).unwrap()
}

fn dotenv(env: &Env) -> String {
    std::fs::read_to_string(env.root().join(".env")).unwrap()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn assert_no_key(out: &Output, key: &str) {
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let s = text(bytes);
        assert!(!s.contains(key), "the key appears on {name}:\n{s}");
        // Not even a long piece of it.
        assert!(
            !s.contains(&key[3..key.len() - 4]),
            "part of the key on {name}:\n{s}"
        );
    }
}

#[test]
fn scripted_setup_writes_config_and_a_private_env() {
    let env = Env::new();
    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_A,
            "--model",
            "gpt-4o-mini",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = env.root();
    assert_eq!(v["config"], root.join("config.yaml").to_str().unwrap());
    assert_eq!(v["env"], root.join(".env").to_str().unwrap());
    assert_eq!(v["provider"], "openai");
    assert_eq!(v["apiKeyEnv"], "OPENAI_API_KEY");
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["defaultModel"], "gpt-4o-mini");
    assert_eq!(v["defaultAgent"], "hermes");
    let changed: Vec<&str> = v["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    for c in [
        "providers.openai",
        "models.gpt-4o-mini",
        "defaultModel",
        "agents.hermes",
        "agents.llm",
        "defaultAgent",
        ".env:OPENAI_API_KEY",
    ] {
        assert!(changed.contains(&c), "{c} missing from {changed:?}");
    }

    let raw = std::fs::read_to_string(root.join("config.yaml")).unwrap();
    assert!(!raw.contains(KEY_A), "key in config.yaml:\n{raw}");
    let c = config(&env);
    assert_eq!(
        c["providers"]["openai"]["baseUrl"],
        "https://api.openai.com/v1"
    );
    assert_eq!(c["providers"]["openai"]["apiKeyEnv"], "OPENAI_API_KEY");
    assert_eq!(c["models"]["gpt-4o-mini"]["provider"], "openai");
    assert_eq!(c["models"]["gpt-4o-mini"]["name"], "gpt-4o-mini");
    assert_eq!(c["defaultModel"], "gpt-4o-mini");
    assert_eq!(c["agents"]["hermes"]["command"], "uwf-hermes");
    assert_eq!(c["agents"]["llm"]["command"], "uwf-llm");
    assert!(c["agents"].get("mock").is_none(), "mock only when asked");
    assert_eq!(c["defaultAgent"], "hermes");

    assert_eq!(dotenv(&env), format!("OPENAI_API_KEY={KEY_A}\n"));
    #[cfg(unix)]
    assert_eq!(mode(&root.join(".env")), 0o600);

    // The file setup wrote is what the engine reads: agent resolution works.
    let shown = ok(&env, &["config", "show"]);
    assert_eq!(shown["defaultAgent"]["command"], "uwf-hermes");

    // Running the same setup again changes nothing, byte for byte.
    let before = env.snapshot();
    let again = ok(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_A,
            "--model",
            "gpt-4o-mini",
        ],
    );
    assert_eq!(again["changed"], serde_json::json!([]));
    assert_eq!(again["env"], Value::Null);
    assert_eq!(env.snapshot(), before);
}

#[test]
fn rerun_with_another_provider_merges() {
    let env = Env::new();
    let root = env.root();
    std::fs::create_dir_all(&root).unwrap();
    // Settings setup does not manage, and other secrets, must survive.
    std::fs::write(
        root.join("config.yaml"),
        "agents:\n  cursor:\n    command: uwf-cursor\n    args: [--fast]\nagentOverrides:\n  solve-issue:\n    developer: cursor\nmodelOverrides:\n  extract: mini\nroleModels:\n  solve-issue:\n    reviewer: mini\n",
    )
    .unwrap();
    std::fs::write(
        root.join(".env"),
        "# my keys\nGITHUB_TOKEN=ghp_keepme\nexport OTHER='two words'\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join(".env"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
    }

    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_A,
            "--model",
            "gpt-4o-mini",
            "--model-alias",
            "mini",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "openrouter",
            "--api-key",
            KEY_B,
            "--model",
            "anthropic/claude-sonnet-4",
            "--model-alias",
            "sonnet",
            "--agent",
            "llm",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    assert_no_key(&out, KEY_B);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["provider"], "openrouter");
    assert_eq!(v["defaultModel"], "sonnet");
    assert_eq!(v["defaultAgent"], "llm");

    let c = config(&env);
    assert_eq!(c["providers"]["openai"]["apiKeyEnv"], "OPENAI_API_KEY");
    assert_eq!(
        c["providers"]["openrouter"]["baseUrl"],
        "https://openrouter.ai/api/v1"
    );
    assert_eq!(c["models"]["mini"]["name"], "gpt-4o-mini");
    assert_eq!(c["models"]["sonnet"]["name"], "anthropic/claude-sonnet-4");
    assert_eq!(c["models"]["sonnet"]["provider"], "openrouter");
    assert_eq!(c["defaultModel"], "sonnet");
    assert_eq!(c["defaultAgent"], "llm");
    assert_eq!(c["agents"]["cursor"]["args"][0], "--fast");
    assert_eq!(c["agentOverrides"]["solve-issue"]["developer"], "cursor");
    assert_eq!(c["modelOverrides"]["extract"], "mini");
    assert_eq!(c["roleModels"]["solve-issue"]["reviewer"], "mini");

    assert_eq!(
        dotenv(&env),
        format!(
            "# my keys\nGITHUB_TOKEN=ghp_keepme\nexport OTHER='two words'\nOPENAI_API_KEY={KEY_A}\nOPENROUTER_API_KEY={KEY_B}\n"
        )
    );

    // A new key for an existing variable replaces its line in place.
    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            "sk-rotated-000000000000",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        dotenv(&env),
        format!(
            "# my keys\nGITHUB_TOKEN=ghp_keepme\nexport OTHER='two words'\nOPENAI_API_KEY=sk-rotated-000000000000\nOPENROUTER_API_KEY={KEY_B}\n"
        )
    );
    #[cfg(unix)]
    assert_eq!(mode(&env.root().join(".env")), 0o600);
}

#[test]
fn the_key_is_never_printed() {
    let env = Env::new();
    // Maximum logging, a successful run.
    let out = run(
        &env,
        &[
            "-vvv",
            "setup",
            "--provider",
            "groq",
            "--api-key",
            KEY_A,
            "--model",
            "llama-3.3-70b-versatile",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    // YAML output too.
    let out = run(
        &env,
        &[
            "--format",
            "yaml",
            "setup",
            "--provider",
            "groq",
            "--api-key",
            KEY_B,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_B);
    assert!(dotenv(&env).contains(&format!("GROQ_API_KEY={KEY_B}")));
    // Failing runs with the key on the command line.
    for args in [
        vec!["-vvv", "setup", "--provider", "nosuch", "--api-key", KEY_A],
        vec![
            "setup",
            "--provider",
            "x",
            "--base-url",
            "nope",
            "--api-key",
            KEY_A,
        ],
        vec![
            "setup",
            "--provider",
            "openai",
            "--api-key-env",
            "1BAD",
            "--api-key",
            KEY_A,
        ],
        vec![
            "setup",
            "--provider",
            "openai",
            "--api-key",
            "-sk-starts-with-dash-and has space",
        ],
        // Errors from the argument parser.
        vec!["setup", "--api-key", KEY_A, "--modle", "m"],
        vec!["setup", "--model-alias", "x", "--api-key", KEY_A],
    ] {
        let out = run(&env, &args);
        assert!(!out.status.success(), "{args:?} should fail");
        assert_no_key(&out, KEY_A);
        assert!(
            !text(&out.stderr).contains("has space"),
            "{}",
            text(&out.stderr)
        );
    }
    // A key from stdin (`--api-key -`), so it is not in the process list.
    let mut cmd = env.uwf();
    let out = cmd
        .args(["setup", "--provider", "mistral", "--api-key", "-"])
        .write_stdin(format!("{KEY_B}\n"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_B);
    assert!(dotenv(&env).contains(&format!("MISTRAL_API_KEY={KEY_B}\n")));
    // Nor by `config show`.
    let out = run(&env, &["config", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_B);
}

#[test]
fn corrupt_config_is_refused_and_nothing_changes() {
    let env = Env::new();
    let root = env.root();
    std::fs::create_dir_all(&root).unwrap();
    let corrupt = "providers:\n  openai:\n    baseUrl: [unclosed\n";
    std::fs::write(root.join("config.yaml"), corrupt).unwrap();
    std::fs::write(root.join(".env"), "OPENAI_API_KEY=old\n").unwrap();
    let before = env.snapshot();

    let err = fails(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_A,
            "--model",
            "gpt-4o",
        ],
    );
    // Which file, where in it, what to do: whole, as a snapshot.
    insta::assert_snapshot!("corrupt_config_setup", env.redact(&err));
    assert!(!err.contains(KEY_A), "{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("config.yaml")).unwrap(),
        corrupt
    );
    assert_eq!(dotenv(&env), "OPENAI_API_KEY=old\n");
    // Not even the lock file is new: the snapshot ignores nothing else.
    let after = env.snapshot();
    for (path, bytes) in &before {
        assert_eq!(after.get(path), Some(bytes), "{} changed", path.display());
    }
    // A config that parses as YAML but not as a configuration: same.
    std::fs::write(root.join("config.yaml"), "providers:\n  openai: 3\n").unwrap();
    let err = fails(&env, &["setup", "--agent", "llm"]);
    insta::assert_snapshot!("not_a_config_setup", env.redact(&err));
    assert_eq!(
        std::fs::read_to_string(root.join("config.yaml")).unwrap(),
        "providers:\n  openai: 3\n"
    );
    // `config show` reports it too.
    let err = fails(&env, &["config", "show"]);
    insta::assert_snapshot!("not_a_config_config_show", env.redact(&err));
}

#[test]
fn bad_url_is_refused() {
    let env = Env::new();
    for (name, url) in [
        ("not_a_url", "not a url"),
        ("ftp", "ftp://example.com/v1"),
        ("no_host", "https://"),
        ("no_scheme", "localhost:11434/v1"),
    ] {
        let err = fails(&env, &["setup", "--provider", "custom", "--base-url", url]);
        insta::assert_snapshot!(format!("bad_base_url_{name}"), err);
    }
    let err = fails(
        &env,
        &[
            "setup",
            "--provider",
            "mine",
            "--base-url",
            "https://me:hunter2@example.com/v1",
        ],
    );
    assert!(!err.contains("hunter2"), "{err}");
    insta::assert_snapshot!("bad_base_url_credentials", err);
    assert!(env.snapshot().keys().all(|p| !p.ends_with("config.yaml")));
}

#[test]
fn unknown_preset_lists_the_presets() {
    let env = Env::new();
    // The name, every preset, how to name a provider of one's own.
    let err = fails(&env, &["setup", "--provider", "nosuch", "--model", "m"]);
    insta::assert_snapshot!("unknown_preset", err);
    assert!(!env.root().join("config.yaml").exists());
    // Other bad names.
    let err = fails(&env, &["setup", "--provider", "openai", "--model", "a b"]);
    insta::assert_snapshot!("bad_model_name", err);
    let err = fails(&env, &["setup", "--provider", ""]);
    insta::assert_snapshot!("empty_provider_name", err);
    let err = fails(
        &env,
        &["setup", "--provider", "openai", "--api-key-env", "NOT-OK"],
    );
    insta::assert_snapshot!("bad_api_key_env", err);
    assert!(!env.root().join("config.yaml").exists());
}

#[test]
fn no_flags_without_a_terminal_is_an_error() {
    let env = Env::new();
    let err = fails(&env, &["setup"]);
    assert!(err.contains("not a terminal"), "{err}");
    for flag in [
        "--provider",
        "--base-url",
        "--api-key",
        "--api-key-env",
        "--model",
        "--agent",
    ] {
        assert!(err.contains(flag), "{flag} not listed: {err}");
    }
    assert!(env.snapshot().is_empty(), "{:?}", env.snapshot().keys());
}

#[test]
fn custom_and_local_providers() {
    let env = Env::new();
    // A custom provider needs --base-url; its variable is derived.
    let v = ok(
        &env,
        &[
            "setup",
            "--provider",
            "mycorp",
            "--base-url",
            "https://llm.example.com/v1/",
            "--model",
            "big",
        ],
    );
    assert_eq!(v["apiKeyEnv"], "MYCORP_API_KEY");
    assert_eq!(v["env"], Value::Null, "no key given, .env untouched");
    let c = config(&env);
    assert_eq!(
        c["providers"]["mycorp"]["baseUrl"],
        "https://llm.example.com/v1"
    );
    // Once configured, its name is enough.
    let v = ok(&env, &["setup", "--provider", "mycorp", "--model", "small"]);
    assert_eq!(v["defaultModel"], "small");
    assert_eq!(config(&env)["models"]["small"]["provider"], "mycorp");
    // `custom` itself is a name like any other.
    let err = fails(&env, &["setup", "--provider", "custom"]);
    assert!(err.contains("--base-url"), "{err}");

    // Local servers: no key needed; a placeholder makes clients happy.
    let v = ok(
        &env,
        &["setup", "--provider", "ollama", "--model", "llama3.2"],
    );
    assert_eq!(v["apiKeyEnv"], "OLLAMA_API_KEY");
    assert!(dotenv(&env).contains("OLLAMA_API_KEY=ollama\n"));
    assert_eq!(
        config(&env)["providers"]["ollama"]["baseUrl"],
        "http://localhost:11434/v1"
    );
    let v = ok(
        &env,
        &[
            "setup",
            "--provider",
            "lmstudio",
            "--model",
            "qwen2.5-7b-instruct",
        ],
    );
    assert_eq!(v["model"], "qwen2.5-7b-instruct");
    assert!(dotenv(&env).contains("LMSTUDIO_API_KEY=lm-studio\n"));
    assert_eq!(
        config(&env)["providers"]["lmstudio"]["baseUrl"],
        "http://localhost:1234/v1"
    );
    // A flag that needs a provider, with several configured: which one?
    let err = fails(&env, &["setup", "--model", "x"]);
    assert!(
        err.contains("--provider") && err.contains("mycorp"),
        "{err}"
    );
}

#[test]
fn agent_aliases_and_commands() {
    let env = Env::new();
    let v = ok(&env, &["setup", "--agent", "mock"]);
    assert_eq!(v["defaultAgent"], "mock");
    let c = config(&env);
    assert_eq!(c["agents"]["mock"]["command"], "uwf-mock");
    assert_eq!(c["agents"]["hermes"]["command"], "uwf-hermes");
    // A command line becomes a new alias.
    let v = ok(
        &env,
        &["setup", "--agent", "/opt/bin/uwf-cursor --model 'fast one'"],
    );
    assert_eq!(v["defaultAgent"], "cursor");
    let c = config(&env);
    assert_eq!(c["agents"]["cursor"]["command"], "/opt/bin/uwf-cursor");
    assert_eq!(c["agents"]["cursor"]["args"][1], "fast one");
    // The same command again reuses the alias; a different one gets a new one.
    let v = ok(
        &env,
        &["setup", "--agent", "/opt/bin/uwf-cursor --model 'fast one'"],
    );
    assert_eq!(v["defaultAgent"], "cursor");
    assert_eq!(v["changed"], serde_json::json!([]));
    let v = ok(&env, &["setup", "--agent", "uwf-cursor"]);
    assert_eq!(v["defaultAgent"], "cursor-2");
    // A command naming an existing alias's program resolves to it.
    let v = ok(&env, &["setup", "--agent", "uwf-hermes"]);
    assert_eq!(v["defaultAgent"], "hermes");
    let err = fails(&env, &["setup", "--agent", "'unclosed"]);
    assert!(err.contains("--agent"), "{err}");
}

#[cfg(unix)]
#[test]
fn world_readable_env_is_warned_about_and_fixed() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    let root = env.root();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join(".env"), "# shared\nGITHUB_TOKEN=ghp_x\n").unwrap();
    std::fs::set_permissions(root.join(".env"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(&env, &["setup", "--provider", "openai", "--api-key", KEY_A]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(".env") && err.contains("0644") && err.contains("0600"),
        "{err}"
    );
    assert_no_key(&out, KEY_A);
    assert_eq!(mode(&root.join(".env")), 0o600);
    assert_eq!(
        dotenv(&env),
        format!("# shared\nGITHUB_TOKEN=ghp_x\nOPENAI_API_KEY={KEY_A}\n")
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["changed"]
            .as_array()
            .unwrap()
            .contains(&Value::from(".env:mode"))
    );
}

#[test]
fn config_show_masks_keys() {
    let env = Env::new();
    // Nothing configured yet: config is null, with a hint on stderr.
    let out = run(&env, &["config", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"], Value::Null);
    assert_eq!(v["defaultAgent"], Value::Null);
    assert_eq!(v["root"], env.root().to_str().unwrap());
    assert_eq!(v["rootSource"], "$UNCAGED_WORKFLOW_STORAGE_ROOT");
    assert!(
        text(&out.stderr).contains("uwf setup"),
        "{}",
        text(&out.stderr)
    );

    ok(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_A,
            "--model",
            "gpt-4o-mini",
        ],
    );
    ok(
        &env,
        &[
            "setup",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-0",
            "--model-alias",
            "sonnet",
        ],
    );
    ok(
        &env,
        &["setup", "--provider", "deepseek", "--api-key", "short-key"],
    );

    let out = run(&env, &["config", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["defaultModel"], "sonnet");
    let openai = &v["providers"]["openai"];
    assert_eq!(openai["set"], true);
    assert_eq!(openai["source"], ".env");
    assert_eq!(openai["key"], "sk-…1234");
    assert_eq!(openai["apiKeyEnv"], "OPENAI_API_KEY");
    let anthropic = &v["providers"]["anthropic"];
    assert_eq!(anthropic["set"], false);
    assert_eq!(anthropic["key"], Value::Null);
    assert_eq!(v["providers"]["deepseek"]["key"], "****");
    assert!(!text(&out.stdout).contains("short-key"));
    assert_eq!(v["defaultModel"]["alias"], "sonnet");
    assert_eq!(v["defaultModel"]["provider"], "anthropic");
    assert_eq!(v["defaultModel"]["keySet"], false);
    assert_eq!(v["defaultAgent"]["alias"], "hermes");
    assert_eq!(v["defaultAgent"]["command"], "uwf-hermes");
    assert_eq!(v["envFile"], env.root().join(".env").to_str().unwrap());
    assert!(
        v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().contains("ANTHROPIC_API_KEY")),
        "{v}"
    );

    // A variable already in the environment wins over .env (never overridden).
    let out = env
        .uwf()
        .args(["config", "show"])
        .env("ANTHROPIC_API_KEY", "sk-ant-from-environment-9999")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("from-environment"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["providers"]["anthropic"]["set"], true);
    assert_eq!(v["providers"]["anthropic"]["source"], "environment");
    assert_eq!(v["providers"]["anthropic"]["key"], "sk-…9999");

    // --format yaml works.
    let out = run(&env, &["--format", "yaml", "config", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let y: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(y["providers"]["openai"]["key"], "sk-…1234");
    assert_no_key(&out, KEY_A);
}

/// `uwf setup` running in a pseudo-terminal, with everything it printed.
#[cfg(unix)]
struct Pty {
    session: rexpect::session::PtySession,
    screen: String,
}

#[cfg(unix)]
impl Pty {
    /// Starts `uwf setup` (no flags) for `env` in a new pseudo-terminal.
    ///
    /// rexpect turns echo off in the child; `stty echo` turns it back on, as
    /// in a real terminal, so a key typed at a prompt that failed to hide it
    /// would show up on the screen.
    fn setup(env: &Env) -> Self {
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg("stty echo && exec \"$0\" setup")
            .arg(assert_cmd::cargo::cargo_bin("uwf"))
            .env("UNCAGED_WORKFLOW_STORAGE_ROOT", env.root())
            .env_remove("WORKFLOW_STORAGE_ROOT")
            .env_remove("RUST_LOG")
            .env("TERM", "xterm")
            .env("NO_COLOR", "1")
            .env("COLUMNS", "200");
        for var in KEY_VARS {
            cmd.env_remove(var);
        }
        let options = rexpect::reader::Options::new()
            .timeout_ms(Some(30_000))
            .strip_ansi_escape_codes(true);
        let session = rexpect::spawn_with_options(cmd, options)
            .expect("cannot start uwf in a pseudo-terminal");
        Pty {
            session,
            screen: String::new(),
        }
    }

    /// Waits until `needle` is on the screen.
    fn expect(&mut self, needle: &str) {
        match self.session.exp_string(needle) {
            Ok(before) => {
                self.screen.push_str(&before);
                self.screen.push_str(needle);
            }
            Err(e) => panic!("waiting for {needle:?}: {e}\nso far:\n{}", self.screen),
        }
    }

    /// Types `keys`.
    fn send(&mut self, keys: &str) {
        self.session.send(keys).unwrap();
        self.session.flush().unwrap();
    }

    /// Whether the terminal echoes what is typed.
    fn echo_on(&self) -> bool {
        use nix::sys::termios::{LocalFlags, tcgetattr};
        let tty = self.session.process().get_file_handle().unwrap();
        tcgetattr(&tty)
            .unwrap()
            .local_flags
            .contains(LocalFlags::ECHO)
    }

    /// Waits (up to 10 s) for the program to turn echo off, as a hidden
    /// prompt does; typing earlier would be echoed by the terminal itself.
    /// Returns whether it did.
    fn wait_echo_off(&self) -> bool {
        use std::time::{Duration, Instant};
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.echo_on() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        !self.echo_on()
    }

    /// Reads to the end and returns the exit code (`None`: killed).
    fn finish(&mut self) -> Option<i32> {
        use nix::sys::wait::WaitStatus;
        let rest = self.session.exp_eof().unwrap();
        self.screen.push_str(&rest);
        match self.session.process().wait().unwrap() {
            WaitStatus::Exited(_, code) => Some(code),
            _ => None,
        }
    }

    /// Answers up to the hidden key prompt: arrow down once (openai →
    /// openrouter), keep the base URL, type a model and an alias.
    fn answer_up_to_the_key(&mut self, model: &str, alias: &str) {
        self.expect("Provider");
        self.expect("custom");
        self.send("\x1b[B\r");
        self.expect("Base URL");
        self.send("\r");
        self.expect("Model name");
        self.send(&format!("{model}\r"));
        self.expect("Model alias");
        self.send(&format!("{alias}\r"));
        self.expect("API key");
        self.expect("hidden");
    }
}

/// Drives `uwf setup` through a pseudo-terminal with echo on, as a person
/// would: picks a provider with the arrow-down key, accepts the base URL,
/// types a model and alias, types the key at the hidden prompt, picks an
/// agent. The key must not come back in the terminal output.
#[cfg(unix)]
#[test]
fn interactive_setup_through_a_pseudo_terminal() {
    const KEY: &str = "sk-or-INTERACTIVE-SECRET-424242";
    let env = Env::new();
    let root = env.root();
    std::fs::create_dir_all(&root).unwrap();
    // Something to keep.
    std::fs::write(
        root.join("config.yaml"),
        "providers:\n  mycorp:\n    baseUrl: https://llm.example.com/v1\n    apiKeyEnv: MYCORP_API_KEY\n",
    )
    .unwrap();

    let mut pty = Pty::setup(&env);
    pty.answer_up_to_the_key("meta-llama/llama-3.3-70b-instruct", "llama");
    // If echo never goes off, type anyway: the checks below show the damage.
    let hidden = pty.wait_echo_off();
    pty.send(KEY);
    pty.send("\r");
    pty.expect("Default agent");
    pty.expect("uwf-llm");
    pty.send("\x1b[B\r"); // hermes → llm
    let code = pty.finish();
    let screen = &pty.screen;
    assert_eq!(code, Some(0), "{screen}");

    assert!(!screen.contains(KEY), "the key was echoed:\n{screen}");
    assert!(
        !screen.contains("INTERACTIVE-SECRET"),
        "part of the key was echoed:\n{screen}"
    );
    assert!(hidden, "the key prompt did not turn terminal echo off");
    // Sanity: what was typed at visible prompts does show.
    assert!(
        screen.contains("meta-llama/llama-3.3-70b-instruct"),
        "{screen}"
    );
    assert!(screen.contains("\"provider\": \"openrouter\""), "{screen}");

    let c = config(&env);
    assert_eq!(
        c["providers"]["openrouter"]["baseUrl"],
        "https://openrouter.ai/api/v1"
    );
    assert_eq!(
        c["providers"]["openrouter"]["apiKeyEnv"],
        "OPENROUTER_API_KEY"
    );
    assert_eq!(
        c["providers"]["mycorp"]["apiKeyEnv"], "MYCORP_API_KEY",
        "kept"
    );
    assert_eq!(c["models"]["llama"]["provider"], "openrouter");
    assert_eq!(
        c["models"]["llama"]["name"],
        "meta-llama/llama-3.3-70b-instruct"
    );
    assert_eq!(c["defaultModel"], "llama");
    assert_eq!(c["defaultAgent"], "llm");
    assert_eq!(dotenv(&env), format!("OPENROUTER_API_KEY={KEY}\n"));
    assert_eq!(mode(&root.join(".env")), 0o600);
}

/// Ctrl-C at the hidden key prompt (echo off, and uwf's own SIGINT handler
/// installed) and in a menu: setup stops at once, writes nothing, and
/// leaves the terminal echoing again.
#[cfg(unix)]
#[test]
fn interactive_ctrl_c_cancels_and_writes_nothing() {
    let env = Env::new();
    let mut pty = Pty::setup(&env);
    pty.answer_up_to_the_key("some-model", "some");
    assert!(pty.wait_echo_off(), "{}", pty.screen);
    pty.send("sk-half-typed");
    pty.send("\x03");
    assert_eq!(pty.finish(), Some(130), "{}", pty.screen);
    assert!(pty.screen.contains("cancelled"), "{}", pty.screen);
    assert!(!pty.screen.contains("sk-half-typed"), "{}", pty.screen);
    assert!(pty.echo_on(), "echo was left off");
    assert!(!env.root().join("config.yaml").exists());
    assert!(!env.root().join(".env").exists());

    let mut pty = Pty::setup(&env);
    pty.expect("Provider");
    pty.expect("custom");
    pty.send("\x03");
    assert_eq!(pty.finish(), Some(130), "{}", pty.screen);
    assert!(pty.screen.contains("cancelled"), "{}", pty.screen);
    assert!(pty.echo_on(), "echo was left off");
    assert!(!env.root().join("config.yaml").exists());
}

#[test]
fn comments_in_config_are_saved_in_a_backup() {
    let env = Env::new();
    let root = env.root();
    std::fs::create_dir_all(&root).unwrap();
    let original = "# my notes\nagents:\n  cursor:\n    command: uwf-cursor # fast\n";
    std::fs::write(root.join("config.yaml"), original).unwrap();
    let out = run(&env, &["setup", "--agent", "cursor"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let backup = root.join("config.yaml.bak");
    assert_eq!(v["backup"], backup.to_str().unwrap());
    assert!(
        text(&out.stderr).contains("comments"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original);
    assert_eq!(config(&env)["agents"]["cursor"]["command"], "uwf-cursor");
    assert_eq!(config(&env)["defaultAgent"], "cursor");
    // The header setup writes itself does not count as a comment.
    let v = ok(&env, &["setup", "--agent", "llm"]);
    assert!(v.get("backup").is_none(), "{v}");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original);
}

#[test]
fn presets_for_claude_code_and_codex() {
    let env = Env::new();
    // Claude Code: the anthropic preset's key variable is what uwf-claude
    // (and Claude Code) read from .env.
    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "anthropic",
            "--api-key",
            KEY_A,
            "--agent",
            "claude",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_A);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["defaultAgent"], "claude");
    let c = config(&env);
    assert_eq!(c["agents"]["claude"]["command"], "uwf-claude");
    assert_eq!(c["defaultAgent"], "claude");
    assert_eq!(
        c["providers"]["anthropic"]["apiKeyEnv"],
        "ANTHROPIC_API_KEY"
    );
    assert_eq!(dotenv(&env), format!("ANTHROPIC_API_KEY={KEY_A}\n"));
    let shown = ok(&env, &["config", "show"]);
    assert_eq!(shown["defaultAgent"]["command"], "uwf-claude");

    // Codex: the openai preset, added next to it.
    let out = run(
        &env,
        &[
            "setup",
            "--provider",
            "openai",
            "--api-key",
            KEY_B,
            "--agent",
            "codex",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_no_key(&out, KEY_B);
    let c = config(&env);
    assert_eq!(c["agents"]["codex"]["command"], "uwf-codex");
    assert_eq!(c["agents"]["claude"]["command"], "uwf-claude");
    assert_eq!(c["defaultAgent"], "codex");
    let dot = dotenv(&env);
    assert!(dot.contains(&format!("OPENAI_API_KEY={KEY_B}\n")), "{dot}");
    assert!(
        dot.contains(&format!("ANTHROPIC_API_KEY={KEY_A}\n")),
        "{dot}"
    );

    // uwf-agent, the built-in agent with tools: the alias `tools`.
    let out = run(&env, &["setup", "--agent", "tools"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let c = config(&env);
    assert_eq!(c["agents"]["tools"]["command"], "uwf-agent");
    assert_eq!(c["defaultAgent"], "tools");
}
