//! Server-wide settings.

/// Tokens per second that reads like a person typing quickly; the demo model's pace.
pub const HUMAN_PACE: f64 = 30.0;

/// Settings of a mock server. Scripts override the rate per step.
#[derive(Debug, Clone, PartialEq)]
pub struct MockConfig {
    /// Default tokens per second; 0 streams as fast as possible.
    pub rate: f64,
    /// Model ids listed by `GET /v1/models`. Requests may name any model; it is echoed back.
    pub models: Vec<String>,
    /// How many Responses-API responses are kept for `previous_response_id`; the oldest are
    /// forgotten first, so a long benchmark cannot grow memory without bound.
    pub max_stored_responses: usize,
    /// Refuse requests that break a rule the real API enforces (see `rules`), with the `400`
    /// the real API answers. On by default; off only to test a client's handling of a server
    /// that accepts anything.
    pub strict: bool,
    /// Which Chat Completions server the mock stands in for, beyond the rules all of them
    /// share.
    pub chat_server: ChatServer,
}

/// A Chat Completions server whose own rules the mock enforces on `/v1/chat/completions`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ChatServer {
    /// OpenAI and the servers that take what it takes.
    #[default]
    Standard,
    /// Cerebras: refuses `reasoning_content` in assistant messages.
    Cerebras,
}

impl MockConfig {
    /// As fast as possible: the default, for tests and benchmarks.
    pub fn fast() -> Self {
        Self::default()
    }

    /// Streams at [`HUMAN_PACE`], for demos.
    pub fn human_pace() -> Self {
        Self::default().with_rate(HUMAN_PACE)
    }

    pub fn with_rate(mut self, tokens_per_second: f64) -> Self {
        self.rate = tokens_per_second;
        self
    }

    pub fn with_chat_server(mut self, server: ChatServer) -> Self {
        self.chat_server = server;
        self
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            rate: 0.0,
            models: vec!["mock".into(), "mock-reasoning".into(), "demo".into()],
            max_stored_responses: 10_000,
            strict: true,
            chat_server: ChatServer::Standard,
        }
    }
}
