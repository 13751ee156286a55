//! The real router over a SQLite store in a temporary directory, and the structured requests
//! the `api_requests` target sends it.

use std::sync::{Arc, Mutex, OnceLock};

use arbitrary::Arbitrary;
use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use keel_server::api::Doors;
use keel_server::api::state::{AppState, AuthMode};
use keel_server::config::{Config, Env, FileConfig, Overrides};
use keel_server::hub::Hub;
use keel_server::metrics::Metrics;
use keel_server::models::ModelRegistry;
use serde_json::{Map, Value};
use tower::ServiceExt;

struct NoEnv;

impl Env for NoEnv {
    fn var(&self, _name: &str) -> Option<String> {
        None
    }
}

/// One process-wide daemon: opening SQLite and starting the demo model per input would
/// spend every execution on set-up.
pub struct App {
    pub runtime: tokio::runtime::Runtime,
    pub router: Router,
    /// Chats created by earlier inputs, so later ones reach handlers past the id lookup.
    pub chats: Mutex<Vec<String>>,
    _dir: tempfile::TempDir,
}

pub fn app() -> &'static App {
    static APP: OnceLock<App> = OnceLock::new();
    APP.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let database = format!("sqlite://{}", dir.path().join("keel.db").display());
        let overrides = Overrides {
            database: Some(database.clone()),
            ..Overrides::default()
        };
        let config = Config::resolve(FileConfig::default(), None, &overrides, &NoEnv)
            .unwrap_or_else(|e| panic!("config: {e}"));
        let router = runtime.block_on(async {
            let store = keel_store::open(&database)
                .await
                .unwrap_or_else(|e| panic!("store: {e}"));
            let models = ModelRegistry::build(&config)
                .await
                .unwrap_or_else(|e| panic!("models: {e}"));
            let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 8700));
            let state = AppState::new(
                store,
                Arc::new(Hub::new()),
                Arc::new(Metrics::new()),
                models,
                Arc::new(config),
                AuthMode::SingleUser,
                listen,
            );
            // The compatible doors are not among `ROUTES`: the API's own routes alone.
            keel_server::api::router(state, Doors::none())
        });
        App {
            runtime,
            router,
            chats: Mutex::new(Vec::new()),
            _dir: dir,
        }
    })
}

/// Every route with a body or an id, by method and path with `{id}` and `{sub}` holes.
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/api/v1/chats"),
    ("GET", "/api/v1/chats"),
    ("GET", "/api/v1/chats/{id}"),
    ("DELETE", "/api/v1/chats/{id}"),
    ("POST", "/api/v1/chats/{id}/archive"),
    ("POST", "/api/v1/chats/{id}/unarchive"),
    ("GET", "/api/v1/chats/{id}/messages"),
    ("POST", "/api/v1/chats/{id}/messages"),
    ("PUT", "/api/v1/chats/{id}/messages/{sub}"),
    ("POST", "/api/v1/chats/{id}/interrupt"),
    ("POST", "/api/v1/chats/{id}/compact"),
    ("POST", "/api/v1/chats/{id}/tool-results"),
    ("DELETE", "/api/v1/chats/{id}/queue/{sub}"),
    ("POST", "/api/v1/chats/{id}/queue/{sub}/promote"),
    ("GET", "/api/v1/chats/{id}/events"),
    ("GET", "/api/v1/models"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
];

/// Field names and values of the request bodies, so generated JSON reaches validation rather
/// than stopping at `deny_unknown_fields`.
const WORDS: &[&str] = &[
    "text",
    "parts",
    "model",
    "title",
    "system",
    "tools",
    "max_steps",
    "busy",
    "results",
    "type",
    "tool_call_id",
    "tool_name",
    "name",
    "description",
    "parameters",
    "media_type",
    "data",
    "url",
    "result",
    "is_error",
    "id",
    "args",
    "demo",
    "file",
    "tool_call",
    "tool_result",
    "reasoning",
    "queue",
    "interrupt",
    "reject",
    "image/png",
    "object",
    "provider_executed",
    "metadata",
    "signature",
    "",
];

#[derive(Debug, Arbitrary)]
pub enum Id {
    /// A chat an earlier input created.
    Known(u8),
    /// A well-formed id of nothing.
    Unknown(u128),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Word(u8),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(Key, Json)>),
}

#[derive(Debug, Arbitrary)]
pub enum Key {
    Word(u8),
    Str(String),
}

fn word(i: u8) -> String {
    WORDS[usize::from(i) % WORDS.len()].to_owned()
}

impl Json {
    fn value(&self) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => Value::from(*i),
            Json::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::Word(i) => Value::String(word(*i)),
            Json::Str(s) => Value::String(s.clone()),
            Json::Array(items) => Value::Array(items.iter().map(Json::value).collect()),
            Json::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let k = match k {
                            Key::Word(i) => word(*i),
                            Key::Str(s) => s.clone(),
                        };
                        (k, v.value())
                    })
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

#[derive(Debug, Arbitrary)]
pub enum BodyInput {
    None,
    Raw(Vec<u8>),
    Json(Json),
}

#[derive(Debug, Arbitrary)]
pub struct ApiInput {
    pub route: u8,
    pub id: Id,
    pub sub: String,
    pub query: Option<String>,
    /// 0: JSON, 1: none, 2: text/plain, else the raw header value.
    pub content_type: (u8, String),
    pub idempotency_key: Option<String>,
    pub last_event_id: Option<String>,
    pub body: BodyInput,
}

fn escape(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl ApiInput {
    /// The request, or `None` when the fuzzer produced something `http` cannot represent
    /// (a header value with a newline) and no client could have sent.
    pub fn request(&self, app: &App) -> Option<Request<Body>> {
        let (method, template) = ROUTES[usize::from(self.route) % ROUTES.len()];
        let id = match &self.id {
            Id::Known(i) => {
                let chats = app.chats.lock().ok()?;
                chats
                    .get(usize::from(*i) % chats.len().max(1))
                    .cloned()
                    .unwrap_or_default()
            }
            Id::Unknown(n) => format!("{:032x}", n),
            Id::Raw(raw) => escape(raw),
        };
        let mut uri = template
            .replace("{id}", &id)
            .replace("{sub}", &escape(&self.sub));
        if let Some(query) = &self.query {
            uri.push('?');
            uri.push_str(&escape(query).replace("%3D", "=").replace("%26", "&"));
        }
        let mut builder = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).ok()?)
            .uri(uri)
            // The daemon refuses a request whose Host it does not serve; the fuzzed requests
            // are meant to reach the handlers behind that check.
            .header("host", "127.0.0.1:8700");
        match self.content_type.0 % 4 {
            0 => builder = builder.header("content-type", "application/json"),
            1 => {}
            2 => builder = builder.header("content-type", "text/plain"),
            _ => builder = builder.header("content-type", self.content_type.1.as_str()),
        }
        if let Some(key) = &self.idempotency_key {
            builder = builder.header("idempotency-key", key.as_str());
        }
        if let Some(id) = &self.last_event_id {
            builder = builder.header("last-event-id", id.as_str());
        }
        let body = match &self.body {
            BodyInput::None => Body::empty(),
            BodyInput::Raw(bytes) => Body::from(bytes.clone()),
            BodyInput::Json(json) => Body::from(json.value().to_string()),
        };
        builder.body(body).ok()
    }
}

/// Sends `input` and checks the answer: never a server error, and every client error in the
/// contract's error shape.
pub fn exercise(input: &ApiInput) {
    let app = app();
    let Some(request) = input.request(app) else {
        return;
    };
    let route = format!("{} {}", request.method(), request.uri());
    app.runtime.block_on(async {
        let response = app
            .router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|e| match e {});
        let status = response.status();
        assert!(!status.is_server_error(), "{route} answered {status}");
        if status == StatusCode::CREATED || status.is_client_error() {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap_or_else(|e| panic!("{route}: reading the body: {e}"));
            let value: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("{route} answered {status} with non-JSON: {e}"));
            if status == StatusCode::CREATED {
                if let (Some(id), Ok(mut chats)) = (value["id"].as_str(), app.chats.lock()) {
                    if chats.len() < 256 {
                        chats.push(id.to_owned());
                    }
                }
            } else {
                assert!(
                    value["error"]["code"].is_string() && value["error"]["message"].is_string(),
                    "{route} answered {status} outside the error shape: {value}"
                );
            }
        }
    });
}
