//! The MCP server the MCP tests start as a child process (stdio transport).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/server.rs"]
mod server;

use rmcp::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = std::env::var_os("MCP_TEST_DIR").map(std::path::PathBuf::from);
    if let Some(dir) = &dir {
        std::fs::write(dir.join("pid"), std::process::id().to_string()).unwrap();
    }
    let service = server::TestServer::new(dir)
        .serve(rmcp::transport::stdio())
        .await
        .expect("initialize");
    let _ = service.waiting().await;
}
