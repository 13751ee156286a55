//! MCP client tests against a real server: the `mcp_test_server` example as a stdio child
//! process, and the same server over streamable HTTP in-process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_agent::{Tool, ToolCallRequest, ToolError, ToolOutput};
use keel_core::{Cancel, CancelCause};
use keel_tools::mcp::{McpManager, McpServerConfig, McpServerState, McpTransportKind};
use serde_json::json;

/// The example binary, built by `cargo test` next to the test binaries.
fn server_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = profile_dir.join("examples").join("mcp_test_server");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p keel-tools --example mcp_test_server` \
         (plain `cargo test -p keel-tools` builds it)",
        bin.display()
    );
    bin
}

fn stdio_config(name: &str, dir: &Path) -> McpServerConfig {
    let mut config = McpServerConfig::stdio(
        name,
        server_binary().display().to_string(),
        Vec::<String>::new(),
    );
    config
        .env
        .insert("MCP_TEST_DIR".into(), dir.display().to_string());
    config
}

fn tool(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.definition().name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool {name}"))
}

async fn call(tool: &dyn Tool, args: &str) -> Result<ToolOutput, ToolError> {
    call_with(tool, args, Cancel::new()).await
}

async fn call_with(tool: &dyn Tool, args: &str, cancel: Cancel) -> Result<ToolOutput, ToolError> {
    let request = ToolCallRequest {
        tool_call_id: "c1".into(),
        tool_name: tool.definition().name,
        args: args.into(),
    };
    tool.call(request, cancel).await
}

async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn check_basic_calls(tools: &[Arc<dyn Tool>], prefix: &str) {
    let echo = tool(tools, &format!("{prefix}__echo"));
    assert_eq!(echo.definition().description, "Echoes its text.");
    assert_eq!(echo.definition().parameters["required"], json!(["text"]));
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"héllo"}"#).await.unwrap(),
        ToolOutput::Text("héllo".into())
    );
    let add = tool(tools, &format!("{prefix}__add"));
    assert_eq!(
        call(add.as_ref(), r#"{"a":2,"b":3.5}"#).await.unwrap(),
        ToolOutput::Json(json!({"sum": 5.5}))
    );
    let image = tool(tools, &format!("{prefix}__image"));
    assert_eq!(
        call(image.as_ref(), "").await.unwrap(),
        ToolOutput::Media {
            media_type: "image/png".into(),
            data: server::PNG_1X1.into()
        }
    );
    let fail = tool(tools, &format!("{prefix}__fail"));
    assert_eq!(
        call(fail.as_ref(), "{}").await.unwrap(),
        ToolOutput::Error("it failed".into())
    );
    let err = call(echo.as_ref(), "[1,2]").await.unwrap_err();
    assert_eq!(
        err.0,
        format!("invalid arguments for {prefix}__echo: expected a JSON object")
    );
    let err = call(echo.as_ref(), "{oops").await.unwrap_err();
    assert!(err.0.starts_with("invalid arguments"), "{err}");
}

#[tokio::test]
async fn stdio_server_tools_are_listed_and_called() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::start(&[stdio_config("test.srv", dir.path())])
        .await
        .unwrap();
    let status = manager.status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].state, McpServerState::Connected, "{status:?}");
    assert_eq!(status[0].transport, McpTransportKind::Stdio);
    let tools = manager.tools();
    let mut names: Vec<String> = tools.iter().map(|t| t.definition().name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "test_srv__add",
            "test_srv__echo",
            "test_srv__env",
            "test_srv__fail",
            "test_srv__grow",
            "test_srv__image",
            "test_srv__slow"
        ]
    );
    check_basic_calls(&tools, "test_srv").await;
    manager.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_call_sends_notifications_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::start(&[stdio_config("s", dir.path())])
        .await
        .unwrap();
    let slow = tool(&manager.tools(), "s__slow");
    let cancel = Cancel::new();
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move { call_with(slow.as_ref(), "{}", cancel).await }
    });
    wait_for_file(&dir.path().join("slow-started")).await;
    cancel.cancel(CancelCause::Interrupted);
    let err = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.0, "the MCP tool call was cancelled");
    let reason = wait_for_file(&dir.path().join("cancelled-notification")).await;
    assert_eq!(reason, "request abandoned by the caller");
    wait_for_file(&dir.path().join("slow-cancelled")).await;
    // The connection is still usable.
    let echo = tool(&manager.tools(), "s__echo");
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"still here"}"#)
            .await
            .unwrap(),
        ToolOutput::Text("still here".into())
    );
    manager.shutdown().await;
}

fn kill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

async fn read_pid(dir: &Path) -> i32 {
    let pid = wait_for_file(&dir.join("pid")).await.parse().unwrap();
    std::fs::remove_file(dir.join("pid")).unwrap();
    pid
}

async fn wait_for_state(manager: &McpManager, state: McpServerState) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while manager.status()[0].state != state {
        assert!(Instant::now() < deadline, "{:?}", manager.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_server_that_dies_during_a_call_fails_it_and_restarts_on_next_use() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::start(&[stdio_config("s", dir.path())])
        .await
        .unwrap();
    let first_pid = read_pid(dir.path()).await;
    let slow = tool(&manager.tools(), "s__slow");
    let task = tokio::spawn(async move { call(slow.as_ref(), "{}").await });
    wait_for_file(&dir.path().join("slow-started")).await;
    kill(first_pid);

    let err = task.await.unwrap().unwrap_err();
    assert!(
        err.0.starts_with("MCP server `s` failed during the call")
            && err.0.ends_with("it is restarted on next use"),
        "{err}"
    );
    let status = &manager.status()[0];
    assert_eq!(status.state, McpServerState::Disconnected, "{status:?}");
    assert!(status.error.is_some());

    let echo = tool(&manager.tools(), "s__echo");
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"again"}"#).await.unwrap(),
        ToolOutput::Text("again".into())
    );
    let second_pid = read_pid(dir.path()).await;
    assert_ne!(first_pid, second_pid);
    let status = &manager.status()[0];
    assert_eq!(status.state, McpServerState::Connected);
    assert_eq!(status.restarts, 1);
    manager.shutdown().await;
}

#[tokio::test]
async fn an_idle_server_that_died_is_restarted_on_next_use() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::start(&[stdio_config("s", dir.path())])
        .await
        .unwrap();
    let first_pid = read_pid(dir.path()).await;
    kill(first_pid);
    // The closed connection is noticed without any call, and shown in the status.
    wait_for_state(&manager, McpServerState::Disconnected).await;

    let echo = tool(&manager.tools(), "s__echo");
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"again"}"#).await.unwrap(),
        ToolOutput::Text("again".into())
    );
    assert_ne!(first_pid, read_pid(dir.path()).await);
    assert_eq!(manager.status()[0].restarts, 1);
    manager.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_the_server_and_what_it_started() {
    let dir = tempfile::tempdir().unwrap();
    // A server that leaves a background child behind.
    let script = format!(
        "sleep 1000 & echo $! > '{}/child.pid'; exec '{}'",
        dir.path().display(),
        server_binary().display()
    );
    let mut config = McpServerConfig::stdio("s", "sh", ["-c", script.as_str()]);
    config
        .env
        .insert("MCP_TEST_DIR".into(), dir.path().display().to_string());
    let manager = McpManager::start(&[config]).await.unwrap();
    assert_eq!(manager.status()[0].state, McpServerState::Connected);
    let server_pid = read_pid(dir.path()).await;
    let child_pid: i32 = wait_for_file(&dir.path().join("child.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    manager.shutdown().await;
    for pid in [server_pid, child_pid] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_gone(pid) {
            assert!(
                Instant::now() < deadline,
                "process {pid} outlived the manager"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Gone, or a zombie waiting for an init process that may not reap it.
fn is_gone(pid: i32) -> bool {
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[tokio::test]
async fn a_server_that_fails_to_start_does_not_stop_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let broken = McpServerConfig::stdio("broken", "/nonexistent/mcp-server", ["--x"]);
    let not_mcp = McpServerConfig::stdio("not_mcp", "sh", ["-c", "echo hello; exit 1"]);
    let manager = McpManager::start(&[broken, stdio_config("good", dir.path()), not_mcp])
        .await
        .unwrap();
    let status = manager.status();
    assert_eq!(status[0].state, McpServerState::Failed);
    assert!(
        status[0]
            .error
            .as_deref()
            .unwrap()
            .contains("cannot start `/nonexistent/mcp-server`"),
        "{status:?}"
    );
    assert_eq!(status[1].state, McpServerState::Connected);
    assert_eq!(status[2].state, McpServerState::Failed);
    assert!(status[2].error.is_some());
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json[0]["state"], "failed");
    assert_eq!(json[1]["state"], "connected");
    assert!(
        manager
            .tools()
            .iter()
            .all(|t| t.definition().name.starts_with("good__"))
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn tool_list_changes_are_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::start(&[stdio_config("s", dir.path())])
        .await
        .unwrap();
    assert!(
        !manager
            .tools()
            .iter()
            .any(|t| t.definition().name == "s__extra")
    );
    let grow = tool(&manager.tools(), "s__grow");
    call(grow.as_ref(), "{}").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !manager
        .tools()
        .iter()
        .any(|t| t.definition().name == "s__extra")
    {
        assert!(Instant::now() < deadline, "the new tool never appeared");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let extra = tool(&manager.tools(), "s__extra");
    assert_eq!(
        call(extra.as_ref(), "{}").await.unwrap(),
        ToolOutput::Text("extra".into())
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn servers_can_be_connected_after_the_manager_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let manager = McpManager::new(
        &[stdio_config("s", dir.path())],
        keel_tools::mcp::McpOptions::default(),
    )
    .unwrap();
    assert_eq!(manager.status()[0].state, McpServerState::NotStarted);
    assert!(manager.tools().is_empty());
    manager.connect_all().await;
    assert_eq!(manager.status()[0].state, McpServerState::Connected);
    assert_eq!(manager.tools().len(), 7);
    manager.shutdown().await;
}

#[tokio::test]
async fn a_stdio_server_gets_the_allow_list_and_only_the_variables_its_entry_names() {
    let dir = tempfile::tempdir().unwrap();
    // Some variable of the test process outside the allow-list, as an API key would be.
    let (secret, _) = std::env::vars()
        .find(|(k, _)| !keel_tools::env::ALLOWED.contains(&k.as_str()))
        .expect("the test process has a variable outside the allow-list");
    let plain = stdio_config("plain", dir.path());
    let mut passing = stdio_config("passing", dir.path());
    passing.env_passthrough = vec![secret.clone()];
    let manager = McpManager::start(&[plain, passing]).await.unwrap();
    let names = |server: &str| {
        let tool = tool(&manager.tools(), &format!("{server}__env"));
        async move {
            match call(tool.as_ref(), "{}").await.unwrap() {
                ToolOutput::Text(text) => text.lines().map(str::to_owned).collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            }
        }
    };
    let plain = names("plain").await;
    assert!(!plain.contains(&secret), "{plain:?}");
    assert!(plain.contains(&"MCP_TEST_DIR".to_owned()), "{plain:?}");
    assert!(plain.contains(&"PATH".to_owned()), "{plain:?}");
    assert!(names("passing").await.contains(&secret));
    manager.shutdown().await;
}

#[tokio::test]
async fn a_hanging_call_ends_with_an_error_after_the_servers_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stdio_config("s", dir.path());
    config.timeout_ms = Some(300);
    let manager = McpManager::start(&[config]).await.unwrap();
    let slow = tool(&manager.tools(), "s__slow");
    let err = call(slow.as_ref(), "{}").await.unwrap_err();
    assert_eq!(
        err.0,
        "tool `s__slow` did not finish within 300 ms and was stopped"
    );
    // Dropping the request cancels it on the server.
    wait_for_file(&dir.path().join("slow-cancelled")).await;
    manager.shutdown().await;
}

#[tokio::test]
async fn invalid_configuration_is_an_error() {
    let err = McpManager::start(&[
        McpServerConfig::http("a", "http://127.0.0.1:1/mcp"),
        McpServerConfig::http("a", "http://127.0.0.1:2/mcp"),
    ])
    .await
    .unwrap_err();
    assert!(err.to_string().starts_with("mcp_servers[1].name"), "{err}");
}

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

/// The process's rustls crypto provider, as the `keel` binary installs it in `main`: the MCP
/// client over HTTP needs one.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn serve_http(
    dir: PathBuf,
) -> (
    String,
    Arc<LocalSessionManager>,
    tokio::task::JoinHandle<()>,
) {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    install_crypto_provider();
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(server::TestServer::new(Some(dir.clone()))),
        sessions.clone(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (
        format!("http://127.0.0.1:{}/mcp", addr.port()),
        sessions,
        handle,
    )
}

async fn session_ids(sessions: &LocalSessionManager) -> Vec<String> {
    sessions
        .sessions
        .read()
        .await
        .keys()
        .map(|id| id.to_string())
        .collect()
}

#[tokio::test]
async fn an_expired_http_session_is_reinitialised() {
    use rmcp::transport::streamable_http_server::SessionManager;
    let dir = tempfile::tempdir().unwrap();
    let (url, sessions, server) = serve_http(dir.path().to_path_buf()).await;
    let manager = McpManager::start(&[McpServerConfig::http("web", url)])
        .await
        .unwrap();
    let echo = tool(&manager.tools(), "web__echo");
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"one"}"#).await.unwrap(),
        ToolOutput::Text("one".into())
    );
    let before = session_ids(&sessions).await;
    assert_eq!(before.len(), 1);
    // The server forgets the session: its next request gets 404.
    let ids: Vec<_> = sessions.sessions.read().await.keys().cloned().collect();
    for id in ids {
        sessions.close_session(&id).await.unwrap();
    }
    assert_eq!(
        call(echo.as_ref(), r#"{"text":"two"}"#).await.unwrap(),
        ToolOutput::Text("two".into())
    );
    let after = session_ids(&sessions).await;
    assert_eq!(after.len(), 1);
    assert_ne!(before, after);
    assert_eq!(manager.status()[0].state, McpServerState::Connected);
    manager.shutdown().await;
    server.abort();
}

#[tokio::test]
async fn streamable_http_server_tools_are_listed_called_and_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let (url, _sessions, server) = serve_http(dir.path().to_path_buf()).await;
    let manager = McpManager::start(&[McpServerConfig::http("web", url)])
        .await
        .unwrap();
    let status = &manager.status()[0];
    assert_eq!(status.state, McpServerState::Connected, "{status:?}");
    assert_eq!(status.transport, McpTransportKind::Http);
    let tools = manager.tools();
    assert_eq!(tools.len(), 7);
    check_basic_calls(&tools, "web").await;

    let slow = tool(&tools, "web__slow");
    let cancel = Cancel::new();
    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move { call_with(slow.as_ref(), "{}", cancel).await }
    });
    wait_for_file(&dir.path().join("slow-started")).await;
    cancel.cancel(CancelCause::Interrupted);
    let err = task.await.unwrap().unwrap_err();
    assert_eq!(err.0, "the MCP tool call was cancelled");
    let reason = wait_for_file(&dir.path().join("cancelled-notification")).await;
    assert_eq!(reason, "request abandoned by the caller");
    manager.shutdown().await;
    server.abort();
}

#[tokio::test]
async fn unreachable_http_server_is_recorded() {
    install_crypto_provider();
    // Bind then drop, so the port is (almost certainly) closed.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let manager = McpManager::start_with(
        &[McpServerConfig::http(
            "gone",
            format!("http://127.0.0.1:{port}/mcp"),
        )],
        keel_tools::mcp::McpOptions {
            connect_timeout: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let status = &manager.status()[0];
    assert_eq!(status.state, McpServerState::Failed, "{status:?}");
    assert!(manager.tools().is_empty());
}
