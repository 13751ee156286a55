//! The MCP client against the reference filesystem server from npm. It needs `npx` and the
//! npm registry, so the ordinary test run ignores it; `KEEL_TEST_NPM_MCP=1 scripts/test`
//! runs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use keel_agent::{ToolCallRequest, ToolOutput};
use keel_core::Cancel;
use keel_tools::mcp::{McpManager, McpOptions, McpServerConfig, McpServerState};

#[tokio::test]
#[ignore = "needs npx and the npm registry: KEEL_TEST_NPM_MCP=1 scripts/test runs it"]
async fn npm_filesystem_server_lists_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("hello.txt"), "hi").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let config = McpServerConfig::stdio(
        "files",
        "npx",
        [
            "-y".to_owned(),
            "@modelcontextprotocol/server-filesystem".to_owned(),
            root.display().to_string(),
        ],
    );
    let manager = McpManager::start_with(
        &[config],
        McpOptions {
            // The first run downloads the package.
            connect_timeout: Duration::from_secs(120),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let status = &manager.status()[0];
    assert_eq!(status.state, McpServerState::Connected, "{status:?}");
    let tools = manager.tools();
    let list = tools
        .iter()
        .find(|t| t.definition().name == "files__list_directory")
        .expect("files__list_directory is offered");
    let request = ToolCallRequest {
        tool_call_id: "c1".into(),
        tool_name: "files__list_directory".into(),
        args: serde_json::json!({ "path": root.display().to_string() }).to_string(),
    };
    let output = list.call(request, Cancel::new()).await.unwrap();
    let text = match output {
        ToolOutput::Text(text) => text,
        ToolOutput::Json(value) => value.to_string(),
        other => panic!("unexpected output {other:?}"),
    };
    assert!(text.contains("[FILE] hello.txt"), "{text}");
    assert!(text.contains("[DIR] sub"), "{text}");
    manager.shutdown().await;
}
