//! What a model may do through the daemon's tools: read-only defaults, one workspace per user,
//! commands that cannot read the daemon's secrets, and calls that cannot hang a chat.

use std::path::Path;

use serde_json::{Value, json};

use crate::harness::*;
use crate::tools::mcp_test_server;

/// Every tool result of a chat, in order: (tool name, result as text, is_error).
pub(crate) async fn tool_results(
    client: &Client,
    daemon: &Daemon,
    id: &str,
) -> Vec<(String, String, bool)> {
    client
        .messages(daemon, id)
        .await
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .map(|part| {
            let result = match &part["result"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (
                part["tool_name"].as_str().unwrap_or_default().to_owned(),
                result,
                part["is_error"] == true,
            )
        })
        .collect()
}

/// A chat whose model makes the scripted tool calls, one step per entry; waits until it is
/// done.
pub(crate) async fn run_tools(client: &Client, daemon: &Daemon, steps: Value) -> String {
    let script = json!({ "steps": steps });
    let id = client
        .create_chat(daemon, json!({"text": format!("go\n#mock {script}")}))
        .await;
    client.wait_status(daemon, &id, "waiting").await;
    id
}

/// Landlock (ABI 3 or later) confines `run_command`; without it (an old or restricted kernel)
/// the checks that rely on it cannot hold, so they are skipped outside CI.
pub(crate) fn landlock_or_skip() -> bool {
    if keel_tools::sandbox::available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "Landlock is not available in CI"
    );
    eprintln!("Landlock is not available on this kernel: skipping");
    false
}

pub(crate) fn add_user(dir: &Path, database: &str, name: &str) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["users", "add", name, "--database", database])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn by_default_only_read_only_tools_are_enabled_and_the_demo_model_says_so() {
    let (_dir, daemon) = demo_daemon();
    let client = Client::new();
    let id = client
        .create_chat(
            &daemon,
            json!({"text": "/run_command {\"command\":\"id\"}"}),
        )
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    assert!(messages.iter().all(|m| m["role"] != "tool"), "{messages:?}");
    assert_eq!(
        text_of(messages.last().unwrap()),
        "I cannot use `run_command`: it is not enabled here. Enabled tools: read_file, list_dir."
    );
    // What is enabled works.
    let id = client
        .create_chat(&daemon, json!({"text": "/list_dir {\"path\":\".\"}"}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let results = tool_results(&client, &daemon, &id).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!((results[0].0.as_str(), results[0].2), ("list_dir", false));
}

#[tokio::test]
async fn a_model_command_gets_nothing_from_the_daemon_environment_or_the_database() {
    if !landlock_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("data").join("keel.db");
    let daemon = Daemon::start_with_env(
        dir.path(),
        &format!("sqlite://{}", database.display()),
        "[tools]\nbuiltin = [\"run_command\"]\n",
        &[("KEEL_TEST_API_KEY", "sk-very-secret-value")],
    );
    let client = Client::new();
    // Create a chat first so the database holds a recognisable message.
    let marker = "database-marker-7f3a";
    let id = client
        .create_chat(&daemon, json!({"text": scripted(marker, 0.0)}))
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let command = format!(
        "cat /proc/$PPID/environ; cat /proc/$PPID/cmdline; cat {db}; cat {db}-wal; \
         grep -r {marker} {data}; env; echo ran-to-the-end",
        db = database.display(),
        data = database.parent().unwrap().display(),
    );
    let id = run_tools(
        &client,
        &daemon,
        json!([{"tool_calls": [{"name": "run_command", "args": {"command": command}}]}]),
    )
    .await;
    let results = tool_results(&client, &daemon, &id).await;
    assert_eq!(results.len(), 1, "{results:?}");
    let output = &results[0].1;
    assert!(output.contains("ran-to-the-end"), "{output}");
    assert!(output.contains("Permission denied"), "{output}");
    for secret in [
        "sk-very-secret-value",
        "KEEL_TEST_API_KEY",
        marker,
        "SQLite format",
    ] {
        assert!(!output.contains(secret), "{secret} leaked: {output}");
    }
}

#[tokio::test]
async fn the_daemon_is_not_dumpable_so_its_environment_is_unreadable_to_its_user() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    // A process of the daemon's own user reads a dumpable process's environment; root reads
    // every one, so as root the daemon and the reader run as `nobody`.
    let user = nix::unistd::geteuid().is_root().then_some(65534);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let daemon = Daemon::start_as(
        dir.path(),
        &sqlite(dir.path()),
        "",
        &[("KEEL_TEST_API_KEY", "sk-secret")],
        user,
    );
    let reads_environment = |pid: u32| {
        let mut cat = std::process::Command::new("cat");
        cat.arg(format!("/proc/{pid}/environ"));
        if let Some(uid) = user {
            cat.uid(uid).gid(uid);
        }
        let output = cat.output().unwrap();
        output.status.success() && !output.stdout.is_empty()
    };
    assert!(
        !reads_environment(daemon.pid()),
        "the daemon's environment is readable"
    );
    // The same reader does read an ordinary process of the same user. Waited for: `spawn`
    // returns once the child's exec closed its descriptors, a moment before the kernel
    // makes a child that changed its user dumpable again; a busy machine reads inside it.
    let mut sleep = std::process::Command::new("sleep");
    sleep.arg("30");
    if let Some(uid) = user {
        sleep.uid(uid).gid(uid);
    }
    let mut sleeper = sleep.spawn().unwrap();
    let pid = sleeper.id();
    wait_until(
        "the check itself cannot read a dumpable process",
        async || reads_environment(pid),
    )
    .await;
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[tokio::test]
async fn a_model_in_one_users_chat_cannot_read_a_file_written_in_another_users_chat() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let alice = Client::with_token(&add_user(dir.path(), &database, "alice"));
    let bob = Client::with_token(&add_user(dir.path(), &database, "bob"));
    let workspace = dir.path().join("workspace");
    let sandboxed = keel_tools::sandbox::available();
    let builtin = if sandboxed {
        r#"["read_file", "write_file", "edit_file", "list_dir", "run_command"]"#
    } else {
        r#"["read_file", "write_file", "edit_file", "list_dir"]"#
    };
    let daemon = Daemon::start(
        dir.path(),
        &database,
        &format!(
            "[tools]\nbuiltin = {builtin}\nworkspace = \"{}\"\n",
            workspace.display()
        ),
    );
    let secret = "alice-only-3b9c";
    let id = run_tools(
        &alice,
        &daemon,
        json!([
            {"tool_calls": [{"name": "write_file", "args": {"path": "notes/secret.txt", "content": secret}}]},
            {"tool_calls": [{"name": "read_file", "args": {"path": "notes/secret.txt"}}]}
        ]),
    )
    .await;
    let written = tool_results(&alice, &daemon, &id).await;
    assert!(
        written[1].1.contains(secret),
        "alice reads her own file: {written:?}"
    );
    let alice_file = workspace.join("alice/notes/secret.txt");
    assert!(alice_file.exists(), "alice works in <workspace>/alice");
    let absolute = alice_file.display().to_string();

    let mut calls = vec![
        json!({"name": "read_file", "args": {"path": "../alice/notes/secret.txt"}}),
        json!({"name": "read_file", "args": {"path": absolute}}),
        json!({"name": "list_dir", "args": {"path": "../alice/notes"}}),
        json!({"name": "edit_file", "args": {"path": absolute, "old": secret, "new": "x"}}),
        json!({"name": "write_file", "args": {"path": "../alice/notes/secret.txt", "content": "x"}}),
    ];
    let mut steps = Vec::new();
    if sandboxed {
        // A link made by a command, then followed by every tool.
        steps.push(json!({"tool_calls": [{"name": "run_command", "args": {"command":
            format!("ln -s {} link; ln -s ../alice alice-dir; cat link; cat {absolute}; cat alice-dir/notes/secret.txt; echo x > alice-dir/new", alice_file.display())}}]}));
        calls.push(json!({"name": "read_file", "args": {"path": "link"}}));
        calls.push(json!({"name": "read_file", "args": {"path": "alice-dir/notes/secret.txt"}}));
    }
    steps.push(json!({ "tool_calls": calls }));
    let id = run_tools(&bob, &daemon, json!(steps)).await;
    let results = tool_results(&bob, &daemon, &id).await;
    assert_eq!(results.len(), calls_len(&steps), "{results:?}");
    for (tool, result, _) in &results {
        assert!(
            !result.contains(secret),
            "{tool} leaked alice's file: {result}"
        );
    }
    for (tool, result, is_error) in results.iter().filter(|r| r.0 != "run_command") {
        assert!(*is_error, "{tool} was allowed: {result}");
        assert!(result.contains("outside the workspace"), "{tool}: {result}");
    }
    assert_eq!(std::fs::read_to_string(&alice_file).unwrap(), secret);
    assert!(!workspace.join("alice/new").exists());
    assert!(workspace.join("bob").is_dir());
}

#[tokio::test]
async fn after_a_live_switch_to_users_each_users_model_reads_only_their_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let workspace = dir.path().join("workspace");
    // What single-user mode left at the root, and a directory named like a later user.
    std::fs::create_dir_all(workspace.join("bob")).unwrap();
    std::fs::write(workspace.join("single-user.txt"), "root-file-41aa").unwrap();
    std::fs::write(workspace.join("bob/old.txt"), "bobs-old-file-93c0").unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &database,
        &format!(
            "[tools]\nbuiltin = [\"read_file\", \"write_file\", \"list_dir\"]\nworkspace = \"{}\"\n",
            workspace.display()
        ),
    );
    let anonymous = Client::new();
    let read = |path: &str| json!({"name": "read_file", "args": {"path": path}});
    // Single-user mode: the root is the workspace itself.
    let id = run_tools(
        &anonymous,
        &daemon,
        json!([{"tool_calls": [read("single-user.txt")]}]),
    )
    .await;
    assert!(
        tool_results(&anonymous, &daemon, &id).await[0]
            .1
            .contains("root-file-41aa")
    );

    let alice = Client::with_token(&add_user(dir.path(), &database, "alice"));
    let bob = Client::with_token(&add_user(dir.path(), &database, "bob"));
    wait_until("the daemon never noticed the users", async || {
        anonymous.get(&daemon.api("/chats")).await.0 == 401
    })
    .await;

    let users = [
        (&alice, "alice", "alice-secret-60d2"),
        (&bob, "bob", "bob-secret-1f7e"),
    ];
    for (client, name, secret) in users {
        let write = json!({"name": "write_file", "args": {"path": "mine.txt", "content": secret}});
        let id = run_tools(client, &daemon, json!([{"tool_calls": [write]}])).await;
        assert!(!tool_results(client, &daemon, &id).await[0].2);
        let written = workspace.join(name).join("mine.txt");
        assert_eq!(std::fs::read_to_string(written).unwrap(), secret);
    }

    let list = json!({"name": "list_dir", "args": {"path": "."}});
    let probes = json!([{"tool_calls": [
        read("mine.txt"), read("old.txt"), read("single-user.txt"), read("bob/old.txt"),
        read("bob/mine.txt"), read("alice/mine.txt"), list
    ]}]);
    for (client, name, secret) in users {
        let id = run_tools(client, &daemon, probes.clone()).await;
        let seen: Vec<String> = tool_results(client, &daemon, &id)
            .await
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert!(seen[0].contains(secret), "{name}: {seen:?}");
        let mut others = vec!["root-file-41aa"];
        others.extend(users.iter().filter(|u| u.1 != name).map(|u| u.2));
        if name == "bob" {
            assert!(
                seen[1].contains("bobs-old-file-93c0"),
                "bob's directory is his: {seen:?}"
            );
        } else {
            others.push("bobs-old-file-93c0");
        }
        let everything = seen.join("\n");
        for other in others {
            assert!(!everything.contains(other), "{name} read {other}: {seen:?}");
        }
    }
}

fn calls_len(steps: &[Value]) -> usize {
    steps
        .iter()
        .map(|s| s["tool_calls"].as_array().map_or(0, Vec::len))
        .sum()
}

#[tokio::test]
async fn a_hanging_mcp_tool_and_a_fifo_end_with_error_results_and_the_chat_finishes() {
    let Some(server) = mcp_test_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    nix::unistd::mkfifo(&workspace.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let config = format!(
        "[tools]\nbuiltin = [\"read_file\"]\nworkspace = \"{}\"\ntimeout_ms = 500\n\n\
         [[mcp_servers]]\nname = \"test\"\ncommand = \"{}\"\n\n\
         [[mcp_servers]]\nname = \"passing\"\ncommand = \"{}\"\nenv_passthrough = [\"KEEL_TEST_PASSED\"]\ntimeout_ms = 300\n",
        workspace.display(),
        server.display(),
        server.display(),
    );
    let daemon = Daemon::start_with_env(
        dir.path(),
        &sqlite(dir.path()),
        &config,
        &[
            ("KEEL_TEST_API_KEY", "sk-secret"),
            ("KEEL_TEST_PASSED", "yes"),
        ],
    );
    let client = Client::new();
    let started = std::time::Instant::now();
    let id = run_tools(
        &client,
        &daemon,
        json!([{"tool_calls": [
            {"name": "read_file", "args": {"path": "pipe"}},
            {"name": "test__slow", "args": {}},
            {"name": "passing__slow", "args": {}},
            {"name": "test__env", "args": {}},
            {"name": "passing__env", "args": {}}
        ]}]),
    )
    .await;
    assert!(started.elapsed() < WAIT);
    let results = tool_results(&client, &daemon, &id).await;
    let result = |name: &str| {
        results
            .iter()
            .find(|r| r.0 == name)
            .unwrap_or_else(|| panic!("no result of {name}: {results:?}"))
            .clone()
    };
    assert_eq!(
        result("read_file"),
        (
            "read_file".into(),
            "`pipe` is not a regular file".into(),
            true
        )
    );
    assert_eq!(
        result("test__slow").1,
        "tool `test__slow` did not finish within 500 ms and was stopped"
    );
    assert_eq!(
        result("passing__slow").1,
        "tool `passing__slow` did not finish within 300 ms and was stopped"
    );
    // MCP servers get the allow-list and what their entry names, never the rest.
    let plain = result("test__env").1;
    assert!(
        plain.contains("PATH") && !plain.contains("KEEL_TEST"),
        "{plain}"
    );
    let passing = result("passing__env").1;
    assert!(
        passing.contains("KEEL_TEST_PASSED") && !passing.contains("KEEL_TEST_API_KEY"),
        "{passing}"
    );
    // The run went on: the model answered after the errors.
    let messages = client.messages(&daemon, &id).await;
    assert_eq!(messages.last().unwrap()["role"], "assistant");
}

#[tokio::test]
async fn start_up_refuses_a_workspace_that_holds_the_database_or_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = Daemon::refused(
        dir.path(),
        &sqlite(dir.path()),
        &format!("[tools]\nworkspace = \"{}\"\n", dir.path().display()),
    );
    let real = dir.path().canonicalize().unwrap();
    assert!(
        stderr.contains(&format!(
            "the workspace {} contains the database directory {}",
            real.display(),
            dir.path().display()
        )),
        "{stderr}"
    );
    // The configuration file alone is enough (PostgreSQL has no database directory here).
    let stderr = Daemon::refused(
        dir.path(),
        "postgres://postgres@127.0.0.1:1/none",
        &format!("[tools]\nworkspace = \"{}\"\n", dir.path().display()),
    );
    assert!(
        stderr.contains("contains the configuration file"),
        "{stderr}"
    );
}
