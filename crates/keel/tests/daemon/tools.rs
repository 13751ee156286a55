//! Tools through the daemon: a built-in workspace tool and an MCP server's tool in one step.

use serde_json::json;

use crate::harness::*;

/// The MCP test server of the tools crate, built next to this binary by `cargo test`.
pub fn mcp_test_server() -> Option<std::path::PathBuf> {
    let keel = std::path::PathBuf::from(env!("CARGO_BIN_EXE_keel"));
    let path = keel.parent()?.join("examples").join("mcp_test_server");
    if path.exists() {
        Some(path)
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing in CI",
            path.display()
        );
        eprintln!(
            "{} is missing (build it with `cargo build -p keel-tools --examples`): skipping",
            path.display()
        );
        None
    }
}

#[tokio::test]
async fn a_model_calls_a_builtin_and_an_mcp_tool_and_reads_their_results() {
    let Some(server) = mcp_test_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "remember the milk").unwrap();
    let config = format!(
        "[tools]\nbuiltin = [\"read_file\", \"list_dir\"]\nworkspace = \"{}\"\n\n[[mcp_servers]]\nname = \"test\"\ncommand = \"{}\"\n",
        workspace.display(),
        server.display()
    );
    // `[runs]` is opened by the harness; the tool sections follow it.
    let daemon = Daemon::start(
        dir.path(),
        &format!("sqlite://{}/keel.db", dir.path().display()),
        &config,
    );
    let client = Client::new();
    let script = json!({"steps": [
        {"tool_calls": [
            {"name": "read_file", "args": {"path": "notes.txt"}},
            {"name": "test__echo", "args": {"text": "hello from mcp"}}
        ]}
    ]});
    let id = client
        .create_chat(
            &daemon,
            json!({"text": format!("use tools\n#mock {script}")}),
        )
        .await;
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    let tool_message = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message");
    let results = tool_message["parts"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{tool_message}");
    assert_eq!(results[0]["tool_name"], "read_file");
    assert!(
        results[0]["result"]
            .to_string()
            .contains("remember the milk"),
        "{tool_message}"
    );
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(results[1]["tool_name"], "test__echo");
    assert!(
        results[1]["result"].to_string().contains("hello from mcp"),
        "{tool_message}"
    );
    // The model's final answer was written from both results.
    let answer = text_of(messages.last().unwrap());
    assert!(
        answer.contains("remember the milk") && answer.contains("hello from mcp"),
        "{answer}"
    );
    let ready: serde_json::Value = http_client()
        .get(format!("{}/readyz", daemon.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["mcp_servers"][0]["state"], "connected", "{ready}");
}

#[tokio::test]
async fn interrupting_a_slow_mcp_call_records_an_interrupted_result_and_cancels_it() {
    let Some(server) = mcp_test_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let config = format!(
        "[tools]\nbuiltin = []\n\n[[mcp_servers]]\nname = \"test\"\ncommand = \"{}\"\nenv = {{ MCP_TEST_DIR = \"{}\" }}\n",
        server.display(),
        marks.display()
    );
    let daemon = Daemon::start(
        dir.path(),
        &format!("sqlite://{}/keel.db", dir.path().display()),
        &config,
    );
    let client = Client::new();
    let script = json!({"steps": [{"tool_calls": [{"name": "test__slow", "args": {}}]}]});
    let id = client
        .create_chat(&daemon, json!({"text": format!("wait\n#mock {script}")}))
        .await;
    wait_until("the slow tool never started", async || {
        marks.join("slow-started").exists()
    })
    .await;
    let (status, _) = client
        .post(&daemon.api(&format!("/chats/{id}/interrupt")), json!({}))
        .await;
    assert_eq!(status, 202);
    client.wait_status(&daemon, &id, "waiting").await;
    let messages = client.messages(&daemon, &id).await;
    let tool_message = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("a tool message");
    assert_eq!(tool_message["interrupted"], true);
    let result = &tool_message["parts"][0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["result"].as_str().unwrap().contains("interrupted"),
        "{result}"
    );
    wait_until("the server never saw the cancellation", async || {
        marks.join("cancelled-notification").exists()
    })
    .await;
}
