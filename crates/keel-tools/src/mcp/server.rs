//! One configured MCP server: its connection, its tool list and its health.
//!
//! The connection is made at start and again on the first use after it died (a crashed stdio
//! server, a dropped HTTP connection). The call that found it dead is answered with an error;
//! the server is not restarted in a loop behind the model's back. An expired HTTP session is
//! re-initialised once by the transport itself (`reinit_on_expired_session`).

use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use keel_agent::{ToolError, ToolOutput};
use keel_core::Cancel;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceError, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;

use super::config::McpServerConfig;
use super::convert::to_output;
use super::names::{exposed_names, sanitise};
use super::status::{McpServerState, McpServerStatus};
use crate::env;

type Client = RunningService<RoleClient, Listener>;

/// Receives the server's notifications.
pub(crate) struct Listener {
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

/// A tool of the server as offered to the model.
#[derive(Debug, Clone)]
pub(crate) struct RemoteTool {
    pub exposed: String,
    pub remote: String,
    pub description: String,
    pub parameters: serde_json::Value,
    pub idempotent: bool,
}

/// A live connection and, for a stdio server, the process group it runs in.
struct Connection {
    client: Arc<Client>,
    group: Option<Pid>,
}

impl Connection {
    /// Closes the connection once no call holds it any more (a call in flight keeps its
    /// clone, and the connection closes when that call ends), then kills what is left of the
    /// server's process group: a server that exits cleanly may leave children behind.
    async fn close(self) {
        if let Ok(mut client) = Arc::try_unwrap(self.client) {
            let _ = client.close_with_timeout(Duration::from_secs(5)).await;
        }
        if let Some(group) = self.group {
            // ESRCH (nothing left) is the usual answer.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Why there is no connection.
enum Down {
    /// Never connected yet.
    NotStarted,
    /// The last attempt to connect failed.
    Failed(String),
    /// The connection died; the next use reconnects.
    Lost(String),
}

struct State {
    connection: Option<Connection>,
    down: Down,
    tools: Arc<Vec<RemoteTool>>,
    restarts: u32,
    connected_once: bool,
}

pub(crate) struct Server {
    config: McpServerConfig,
    prefix: String,
    connect_timeout: Duration,
    http: Option<reqwest::Client>,
    /// The limit on one tool call: the entry's `timeout_ms`, else the daemon's.
    call_timeout: Duration,
    /// Held while connecting, so concurrent calls that find the server dead start it once.
    connecting: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    tools_changed: Arc<Notify>,
}

impl Server {
    pub(super) fn new(
        config: McpServerConfig,
        connect_timeout: Duration,
        http: Option<reqwest::Client>,
        call_timeout: Duration,
    ) -> Self {
        Self {
            prefix: sanitise(&config.name),
            call_timeout: config
                .timeout_ms
                .map_or(call_timeout, Duration::from_millis),
            config,
            connect_timeout,
            http,
            connecting: tokio::sync::Mutex::new(()),
            state: Mutex::new(State {
                connection: None,
                down: Down::NotStarted,
                tools: Arc::new(Vec::new()),
                restarts: 0,
                connected_once: false,
            }),
            tools_changed: Arc::new(Notify::new()),
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.config.name
    }

    pub(super) fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    fn state(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(super) fn tools(&self) -> Arc<Vec<RemoteTool>> {
        self.state().tools.clone()
    }

    pub(super) fn status(&self) -> McpServerStatus {
        let state = self.state();
        let live = state
            .connection
            .as_ref()
            .map(|c| !c.client.peer().is_transport_closed());
        let (state_kind, error) = match (live, &state.down) {
            (Some(true), _) => (McpServerState::Connected, None),
            (Some(false), _) => (
                McpServerState::Disconnected,
                Some("the connection closed; it is reopened on next use".to_owned()),
            ),
            (None, Down::Failed(error)) => (McpServerState::Failed, Some(error.clone())),
            (None, Down::Lost(error)) => (McpServerState::Disconnected, Some(error.clone())),
            (None, Down::NotStarted) => (McpServerState::NotStarted, None),
        };
        McpServerStatus {
            name: self.config.name.clone(),
            transport: self.config.transport(),
            state: state_kind,
            tools: state.tools.len(),
            restarts: state.restarts,
            error,
        }
    }

    /// The live connection, connecting when there is none or it died.
    async fn client(&self) -> Result<Arc<Client>, String> {
        if let Some(client) = self.live_client() {
            return Ok(client);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(client) = self.live_client() {
            return Ok(client);
        }
        let old = self.state().connection.take();
        if let Some(old) = old {
            old.close().await;
        }
        match self.connect().await {
            Ok(connection) => {
                let client = connection.client.clone();
                {
                    let mut state = self.state();
                    if state.connected_once {
                        state.restarts += 1;
                    }
                    state.connected_once = true;
                    state.connection = Some(connection);
                }
                tracing::info!(server = %self.config.name, "MCP server connected");
                if let Err(error) = self.list_tools(&client).await {
                    tracing::warn!(server = %self.config.name, %error, "listing MCP tools failed");
                }
                Ok(client)
            }
            Err(error) => {
                tracing::warn!(server = %self.config.name, %error, "MCP server failed to start");
                self.state().down = Down::Failed(error.clone());
                Err(error)
            }
        }
    }

    fn live_client(&self) -> Option<Arc<Client>> {
        self.state()
            .connection
            .as_ref()
            .map(|c| c.client.clone())
            .filter(|c| !c.peer().is_transport_closed())
    }

    /// Connects (if needed) and lists the tools; failures are recorded in the status.
    pub(super) async fn start(&self) {
        // Connecting lists the tools; a failure is already recorded and logged.
        let _ = self.client().await;
    }

    /// Lists the tools again (after `notifications/tools/list_changed`).
    pub(super) async fn refresh(&self) {
        match self.client().await {
            Ok(client) => {
                if let Err(error) = self.list_tools(&client).await {
                    tracing::warn!(server = %self.config.name, %error, "listing MCP tools failed");
                }
            }
            Err(error) => {
                tracing::warn!(server = %self.config.name, %error, "MCP server unavailable");
            }
        }
    }

    async fn list_tools(&self, client: &Client) -> Result<(), String> {
        let tools = tokio::time::timeout(self.connect_timeout, client.peer().list_all_tools())
            .await
            .map_err(|_| "tools/list timed out".to_owned())?
            .map_err(|e| format!("tools/list failed: {e}"))?;
        let names = exposed_names(&self.prefix, tools.iter().map(|t| t.name.as_ref()));
        let tools: Vec<RemoteTool> = tools
            .into_iter()
            .zip(names)
            .map(|(tool, exposed)| RemoteTool {
                exposed,
                remote: tool.name.to_string(),
                description: tool.description.as_deref().unwrap_or_default().to_owned(),
                parameters: serde_json::Value::Object(tool.input_schema.as_ref().clone()),
                // A tool that changes nothing can be run again after a crash.
                idempotent: tool
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.read_only_hint == Some(true)),
            })
            .collect();
        tracing::debug!(server = %self.config.name, count = tools.len(), "MCP tools listed");
        self.state().tools = Arc::new(tools);
        Ok(())
    }

    /// The given HTTP client, else a default one. reqwest panics when it builds a TLS client
    /// without a crypto provider, so its absence is checked first and reported.
    fn http_client(&self) -> Result<reqwest::Client, String> {
        if let Some(http) = &self.http {
            return Ok(http.clone());
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err("no rustls crypto provider is installed for HTTPS".to_owned());
        }
        reqwest::Client::builder()
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    async fn connect(&self) -> Result<Connection, String> {
        let listener = Listener {
            tools_changed: self.tools_changed.clone(),
        };
        let connect = async {
            match (&self.config.url, &self.config.command) {
                (Some(url), _) => {
                    let transport = StreamableHttpClientTransport::with_client(
                        self.http_client()?,
                        StreamableHttpClientTransportConfig::with_uri(url.as_str())
                            .reinit_on_expired_session(true),
                    );
                    let client = listener.serve(transport).await.map_err(|e| e.to_string())?;
                    Ok(Connection {
                        client: Arc::new(client),
                        group: None,
                    })
                }
                (None, Some(command)) => {
                    let mut cmd = tokio::process::Command::new(command);
                    // The allow-list and what the entry names, never the daemon's whole
                    // environment (API keys).
                    cmd.args(&self.config.args)
                        .env_clear()
                        .envs(env::for_server(
                            &self.config.env_passthrough,
                            &self.config.env,
                        ));
                    let mut cmd = CommandWrap::from(cmd);
                    // Its own group, so stopping it also stops what it started (npx → node).
                    cmd.wrap(ProcessGroup::leader());
                    let (transport, stderr) = TokioChildProcess::builder(cmd)
                        .stderr(Stdio::piped())
                        .spawn()
                        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                    // As the leader of its group, its pid is the group id.
                    let group = transport
                        .id()
                        .and_then(|id| i32::try_from(id).ok())
                        .map(Pid::from_raw);
                    if let Some(stderr) = stderr {
                        let name = self.config.name.clone();
                        tokio::spawn(async move {
                            let mut lines = BufReader::new(stderr).lines();
                            while let Ok(Some(line)) = lines.next_line().await {
                                tracing::info!(server = %name, "{line}");
                            }
                        });
                    }
                    match listener.serve(transport).await {
                        Ok(client) => Ok(Connection {
                            client: Arc::new(client),
                            group,
                        }),
                        Err(error) => {
                            if let Some(group) = group {
                                let _ = killpg(group, Signal::SIGKILL);
                            }
                            Err(error.to_string())
                        }
                    }
                }
                (None, None) => Err("neither `command` nor `url` is set".to_owned()),
            }
        };
        tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| {
                format!(
                    "no answer to initialize within {} s",
                    self.connect_timeout.as_secs()
                )
            })?
    }

    /// Calls `remote` with `arguments`. Cancelling drops the request, which makes rmcp send
    /// `notifications/cancelled` for it.
    pub(super) async fn call(
        &self,
        remote: &str,
        arguments: Option<JsonObject>,
        cancel: &Cancel,
    ) -> Result<ToolOutput, ToolError> {
        let name = &self.config.name;
        let client = tokio::select! {
            client = self.client() => client.map_err(|e| {
                ToolError(format!("MCP server `{name}` is unavailable: {e}"))
            })?,
            _ = cancel.cancelled() => return Err(cancelled()),
        };
        let mut params = CallToolRequestParams::new(remote.to_owned());
        params.arguments = arguments;
        let result = tokio::select! {
            result = client.peer().call_tool(params) => result,
            _ = cancel.cancelled() => return Err(cancelled()),
        };
        match result {
            Ok(result) => Ok(to_output(result)),
            Err(ServiceError::McpError(error)) => Err(ToolError(format!(
                "MCP server `{name}` refused the call: {}",
                error.message
            ))),
            Err(error) => {
                let dead = client.peer().is_transport_closed()
                    || matches!(
                        error,
                        ServiceError::TransportClosed | ServiceError::TransportSend(_)
                    );
                if dead {
                    self.forget(
                        &client,
                        format!("the connection failed during a call: {error}"),
                    )
                    .await;
                    return Err(ToolError(format!(
                        "MCP server `{name}` failed during the call ({error}); it is restarted \
                         on next use"
                    )));
                }
                Err(ToolError(format!("MCP server `{name}`: {error}")))
            }
        }
    }

    /// Drops `client` if it is still the current connection, so the next use reconnects.
    async fn forget(&self, client: &Arc<Client>, error: String) {
        let old = {
            let mut state = self.state();
            if state
                .connection
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(&c.client, client))
            {
                state.down = Down::Lost(error);
                state.connection.take()
            } else {
                None
            }
        };
        if let Some(old) = old {
            old.close().await;
        }
    }

    /// Closes the connection (stopping a stdio server).
    pub(super) async fn shutdown(&self) {
        let old = self.state().connection.take();
        if let Some(old) = old {
            old.close().await;
        }
    }
}

fn cancelled() -> ToolError {
    ToolError("the MCP tool call was cancelled".to_owned())
}

/// Listens for changed tool lists until the server is dropped.
pub(crate) fn spawn_refresher(server: &Arc<Server>) -> tokio::task::JoinHandle<()> {
    let weak: Weak<Server> = Arc::downgrade(server);
    let changed = server.tools_changed.clone();
    tokio::spawn(async move {
        loop {
            changed.notified().await;
            let Some(server) = weak.upgrade() else { return };
            tracing::info!(server = %server.name(), "MCP tool list changed");
            server.refresh().await;
        }
    })
}
