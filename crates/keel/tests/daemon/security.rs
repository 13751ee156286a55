//! Who can reach the daemon: `Host` and `Origin` checks, caps on live event streams and
//! requests, the header-read timeout, removing users, and nothing secret in answers or logs.
//!
//! Longer than most files: each defence is attacked over raw TCP or HTTP, in full.

use std::path::Path;

use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::*;

/// `keel users add NAME`; returns the token.
fn add_user(dir: &Path, database: &str, name: &str) -> String {
    let output = keel(dir, &["users", "add", name, "--database", database], &[]);
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Sends a request with extra headers; returns the status and the JSON body.
async fn request(
    method: Method,
    url: &str,
    headers: &[(&str, String)],
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http_client().request(method, url);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn assert_refused(answer: &(u16, Value), reason: &str, what: &str) {
    let (status, body) = answer;
    assert_eq!(*status, 403, "{what}: {body}");
    assert_eq!(body["error"]["code"], "forbidden", "{what}: {body}");
    assert_eq!(body["error"]["reason"], reason, "{what}: {body}");
    assert!(
        body["error"]["message"].as_str().unwrap().len() > 20,
        "{body}"
    );
}

async fn chat_count(daemon: &Daemon) -> usize {
    let (status, body) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(status, 200, "{body}");
    body["chats"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_foreign_host_is_refused_on_get_post_the_live_events_and_the_page() {
    let (_dir, daemon) = demo_daemon();
    let id = Client::new()
        .create_chat(&daemon, json!({"text": scripted("hi", 0.0)}))
        .await;
    let port = daemon.port();
    let rebound = [("host", format!("evil.example:{port}"))];
    let routes = [
        (Method::GET, daemon.api("/chats"), None),
        (
            Method::POST,
            daemon.api("/chats"),
            Some(json!({"text": "hi"})),
        ),
        (
            Method::GET,
            daemon.api(&format!("/chats/{id}/events")),
            None,
        ),
        (Method::GET, format!("{}/", daemon.url), None),
        (Method::GET, format!("{}/healthz", daemon.url), None),
    ];
    for (method, url, body) in routes {
        let answer = request(method.clone(), &url, &rebound, body).await;
        assert_refused(&answer, "foreign_host", &format!("{method} {url}"));
    }
    assert_eq!(
        chat_count(&daemon).await,
        1,
        "the refused POST created a chat"
    );

    // The daemon's own names work, whichever a browser used.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (status, body) =
            request(Method::GET, &daemon.api("/chats"), &[("host", host)], None).await;
        assert_eq!(status, 200, "{body}");
    }
}

#[tokio::test]
async fn a_request_with_two_host_headers_gets_400_even_when_one_is_the_daemons_own() {
    let (_dir, daemon) = demo_daemon();
    let port = daemon.port();
    // HTTP clients refuse to send two `Host` fields, so the request is written by hand.
    let raw = async |hosts: &[String], method: &str, body: &str| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let mut head = format!("{method} /api/v1/chats HTTP/1.1\r\n");
        for host in hosts {
            head.push_str(&format!("Host: {host}\r\n"));
        }
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ));
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut answer))
            .await
            .expect("the daemon never answered")
            .unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let own = format!("127.0.0.1:{port}");
    let foreign = format!("evil.example:{port}");
    for hosts in [
        [own.clone(), foreign.clone()],
        [foreign.clone(), own.clone()],
        [own.clone(), own.clone()],
    ] {
        for (method, body) in [("GET", ""), ("POST", r#"{"text":"hi"}"#)] {
            let answer = raw(&hosts, method, body).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{hosts:?}: {answer}");
            assert!(answer.contains("duplicate_host"), "{hosts:?}: {answer}");
        }
    }
    assert_eq!(
        chat_count(&daemon).await,
        0,
        "a refused POST created a chat"
    );
    // One `Host` of the daemon's own is served as ever.
    let answer = raw(&[own], "GET", "").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_foreign_origin_is_refused_on_get_post_and_the_live_events() {
    let (_dir, daemon) = demo_daemon();
    let id = Client::new()
        .create_chat(&daemon, json!({"text": scripted("hi", 0.0)}))
        .await;
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let from = [("origin", origin.to_owned())];
        let answer = request(Method::GET, &daemon.api("/chats"), &from, None).await;
        assert_refused(&answer, "foreign_origin", origin);
        let answer = request(
            Method::POST,
            &daemon.api("/chats"),
            &from,
            Some(json!({"text": "hi"})),
        )
        .await;
        assert_refused(&answer, "foreign_origin", origin);
        let answer = request(
            Method::POST,
            &daemon.api(&format!("/chats/{id}/messages")),
            &from,
            Some(json!({"text": "hi"})),
        )
        .await;
        assert_refused(&answer, "foreign_origin", origin);
        let answer = request(
            Method::GET,
            &daemon.api(&format!("/chats/{id}/events")),
            &from,
            None,
        )
        .await;
        assert_refused(&answer, "foreign_origin", origin);
        // A CORS preflight is refused too, so a browser never sends the request itself.
        let answer = request(Method::OPTIONS, &daemon.api("/chats"), &from, None).await;
        assert_refused(&answer, "foreign_origin", origin);
    }
    assert_eq!(
        chat_count(&daemon).await,
        1,
        "a refused POST created a chat"
    );
    let messages = Client::new().messages(&daemon, &id).await;
    assert!(messages.len() <= 2, "a refused POST added a message");

    // A page of the daemon's own origin (either loopback name) may call it.
    let port = daemon.port();
    for origin in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let (status, body) = request(
            Method::POST,
            &daemon.api("/chats"),
            &[("origin", origin)],
            Some(json!({"text": scripted("hi", 0.0)})),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains("keel_http_refused_total{reason=\"foreign_origin\"} 15"),
        "{metrics}"
    );
}

#[tokio::test]
async fn cross_site_browser_requests_without_an_origin_are_refused_but_links_work() {
    let (_dir, daemon) = demo_daemon();
    // What an <img> or <script> tag on another site sends: no Origin, but fetch metadata.
    let tag = [
        ("sec-fetch-site", "cross-site".to_owned()),
        ("sec-fetch-mode", "no-cors".to_owned()),
    ];
    let answer = request(Method::GET, &daemon.api("/chats"), &tag, None).await;
    assert_refused(&answer, "cross_site", "a script tag");
    // Following a link from another site to the page is a navigation: allowed.
    let link = [
        ("sec-fetch-site", "cross-site".to_owned()),
        ("sec-fetch-mode", "navigate".to_owned()),
    ];
    let (status, _) = request(Method::GET, &format!("{}/", daemon.url), &link, None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_reverse_proxy_name_is_allowed_once_configured() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "[server]\nallowed_hosts = [\"keel.example.com\"]\n",
    );
    let proxied = [
        ("host", "keel.example.com".to_owned()),
        ("origin", "https://keel.example.com".to_owned()),
    ];
    let (status, body) = request(
        Method::POST,
        &daemon.api("/chats"),
        &proxied,
        Some(json!({"text": scripted("hi", 0.0)})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let answer = request(
        Method::GET,
        &daemon.api("/chats"),
        &[("host", "other.example.com".to_owned())],
        None,
    )
    .await;
    assert_refused(&answer, "foreign_host", "an unlisted name");
}

/// Opens a live event stream and returns the response (still streaming) or the refusal.
async fn open_events(
    http: &reqwest::Client,
    daemon: &Daemon,
    token: &str,
    id: &str,
) -> reqwest::Response {
    http.get(daemon.api(&format!("/chats/{id}/events")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn ten_thousand_live_event_streams_beyond_the_caps_get_429_and_the_daemon_stays_responsive() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let alice = add_user(dir.path(), &database, "alice");
    let bob = add_user(dir.path(), &database, "bob");
    let daemon = Daemon::start(
        dir.path(),
        &database,
        "[server]\nsse_max_per_user = 2\nsse_max_total = 3\n",
    );
    let alice_client = Client::with_token(&alice);
    let chat = alice_client
        .create_chat(&daemon, json!({"text": scripted("first", 0.0)}))
        .await;
    alice_client.wait_status(&daemon, &chat, "waiting").await;
    let bob_chat = Client::with_token(&bob)
        .create_chat(&daemon, json!({"text": scripted("bob's", 0.0)}))
        .await;

    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(alice_client.events(&daemon, &chat, None).await);
    }

    // 10,000 more attempts by alice, 64 at a time: every one is refused at once.
    let http = http_client();
    let started = Instant::now();
    let statuses: Vec<(u16, Value)> = futures::stream::iter(0..10_000)
        .map(|_| {
            let http = http.clone();
            let url = daemon.api(&format!("/chats/{chat}/events"));
            let alice = alice.clone();
            async move {
                let response = http.get(url).bearer_auth(alice).send().await.unwrap();
                let status = response.status().as_u16();
                (
                    status,
                    response.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let flood = started.elapsed();
    eprintln!("10,000 refused live event stream attempts took {flood:?}");
    for (status, body) in &statuses {
        assert_eq!(*status, 429, "{body}");
        assert_eq!(body["error"]["code"], "too_many_requests");
        assert_eq!(body["error"]["reason"], "sse_user_cap");
    }

    // The daemon still answers at once, and the held streams still carry the chat.
    let probe = Instant::now();
    let (status, _) = Client::new().get(&format!("{}/healthz", daemon.url)).await;
    assert_eq!(status, 200);
    eprintln!(
        "/healthz right after the flood answered in {:?}",
        probe.elapsed()
    );
    let (status, body) = alice_client
        .post(
            &daemon.api(&format!("/chats/{chat}/messages")),
            json!({"text": scripted("still here", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // (The run may be over before the stream looks, so wait for the reply, not a status.)
    loop {
        let event = held[0].next().await.expect("the held stream ended");
        if event.event == "message"
            && event.data["role"] == "assistant"
            && text_of(&event.data) == "still here"
        {
            break;
        }
    }

    // The total cap: bob gets the third stream, not a fourth.
    let third = open_events(&http, &daemon, &bob, &bob_chat).await;
    assert_eq!(third.status().as_u16(), 200);
    let fourth = open_events(&http, &daemon, &bob, &bob_chat).await;
    assert_eq!(fourth.status().as_u16(), 429);
    let body: Value = fourth.json().await.unwrap();
    assert_eq!(body["error"]["reason"], "sse_total_cap");

    // A stream that ends gives its slot back.
    drop(held.pop());
    wait_until("the closed stream's slot never came back", async || {
        let again = open_events(&http, &daemon, &bob, &bob_chat).await;
        again.status().as_u16() == 200
    })
    .await;
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains("keel_http_refused_total{reason=\"sse_user_cap\"} 10000"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_sends_its_headers_or_body_too_slowly_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "[server]\nheader_read_timeout_ms = 300\n",
    );
    let mut slow = TcpStream::connect(("127.0.0.1", daemon.port()))
        .await
        .unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // The rest of the headers never comes; the daemon closes the connection.
    let mut buffer = Vec::new();
    let read = tokio::time::timeout(WAIT, slow.read_to_end(&mut buffer)).await;
    assert!(read.is_ok(), "the connection was never closed");
    assert!(started.elapsed() >= Duration::from_millis(250));
    let (status, _) = Client::new().get(&format!("{}/healthz", daemon.url)).await;
    assert_eq!(status, 200);

    // A body that stalls as long is given up on too: the request ends with a 400.
    let mut stalled = TcpStream::connect(("127.0.0.1", daemon.port()))
        .await
        .unwrap();
    let head = format!(
        "POST /api/v1/chats HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"text\":",
        daemon.port()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, stalled.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the stalled body was waited for without end");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(chat_count(&daemon).await, 0);

    // A body trickled in, each byte well within the timeout, is given up on as a whole.
    let mut trickled = TcpStream::connect(("127.0.0.1", daemon.port()))
        .await
        .unwrap();
    trickled.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = trickled.split();
    let trickle = async {
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let mut answer = Vec::new();
    let read = tokio::time::timeout(WAIT, async {
        tokio::select! {
            read = reader.read_to_end(&mut answer) => read,
            () = trickle => Ok(0),
        }
    })
    .await;
    assert!(read.is_ok(), "the trickled body was waited for without end");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(chat_count(&daemon).await, 0);
}

#[tokio::test]
async fn requests_beyond_the_in_flight_limit_get_503_until_one_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(
        dir.path(),
        &sqlite(dir.path()),
        "[server]\nmax_requests_in_flight = 2\n",
    );
    // Two requests whose bodies arrive slowly stay in flight while their handlers wait.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(("127.0.0.1", daemon.port()))
            .await
            .unwrap();
        let head = format!(
            "POST /api/v1/chats HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"text\":",
            daemon.port()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        slow.push(stream);
    }
    let healthz = format!("{}/healthz", daemon.url);
    let refused = eventually(async || match Client::new().get(&healthz).await {
        (503, body) => Ok(body),
        _ => Err("the limit never applied".to_owned()),
    })
    .await;
    assert_eq!(refused["error"]["code"], "unavailable");
    assert_eq!(refused["error"]["reason"], "overloaded");
    drop(slow);
    wait_until("the slots never came back", async || {
        Client::new().get(&healthz).await.0 == 200
    })
    .await;
}

#[tokio::test]
async fn a_removed_users_token_stops_working_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let alice = add_user(dir.path(), &database, "alice");
    let bob = add_user(dir.path(), &database, "bob");
    let daemon = Daemon::start(dir.path(), &database, "");
    let (alice, bob) = (Client::with_token(&alice), Client::with_token(&bob));
    assert_eq!(alice.get(&daemon.api("/chats")).await.0, 200);

    let listed = keel(dir.path(), &["users", "list", "--database", &database], &[]);
    assert!(listed.status.success(), "{listed:?}");
    let names: Vec<String> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["alice", "bob"]);

    let removed = keel(
        dir.path(),
        &["users", "remove", "alice", "--database", &database],
        &[],
    );
    assert!(removed.status.success(), "{removed:?}");
    let (status, body) = alice.get(&daemon.api("/chats")).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(bob.get(&daemon.api("/chats")).await.0, 200);

    let listed = keel(dir.path(), &["users", "list", "--database", &database], &[]);
    assert!(
        String::from_utf8(listed.stdout)
            .unwrap()
            .starts_with("bob\t")
    );
    let again = keel(
        dir.path(),
        &["users", "remove", "alice", "--database", &database],
        &[],
    );
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("no user `alice`"));
}

#[tokio::test]
async fn adding_an_existing_user_is_refused_unless_the_token_is_rotated() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let first = add_user(dir.path(), &database, "alice");
    let daemon = Daemon::start(dir.path(), &database, "");

    let again = keel(
        dir.path(),
        &["users", "add", "alice", "--database", &database],
        &[],
    );
    assert!(!again.status.success(), "{again:?}");
    assert!(again.stdout.is_empty(), "no token is printed: {again:?}");
    assert!(String::from_utf8_lossy(&again.stderr).contains("already a user `alice`"));
    let (status, body) = Client::with_token(&first).get(&daemon.api("/chats")).await;
    assert_eq!(status, 200, "the first token still works: {body}");

    let rotated = keel(
        dir.path(),
        &["users", "add", "alice", "--rotate", "--database", &database],
        &[],
    );
    assert!(rotated.status.success(), "{rotated:?}");
    let second = String::from_utf8(rotated.stdout).unwrap().trim().to_owned();
    assert_ne!(second, first);
    assert_eq!(
        Client::with_token(&first)
            .get(&daemon.api("/chats"))
            .await
            .0,
        401
    );
    assert_eq!(
        Client::with_token(&second)
            .get(&daemon.api("/chats"))
            .await
            .0,
        200
    );
}

/// A TCP forwarder to PostgreSQL that can be cut: while down it accepts connections and
/// closes them at once, and it drops the ones it was carrying.
struct CuttableProxy {
    port: u16,
    up: tokio::sync::watch::Sender<bool>,
}

impl CuttableProxy {
    async fn start(target: (String, u16)) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (up, watch) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                if !*watch.borrow() {
                    continue;
                }
                let target = target.clone();
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = watch.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Self { port, up }
    }

    fn cut(&self) {
        self.up.send_replace(false);
    }
}

// The proxy runs on the test's runtime while the harness blocks waiting for the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_failures_show_a_request_id_never_the_error_or_the_password() {
    let Ok(base) = std::env::var("KEEL_TEST_DATABASE_URL") else {
        eprintln!("KEEL_TEST_DATABASE_URL is not set: skipping the database failure test");
        return;
    };
    // `postgres://user@host:port/db`: reach the same server through the proxy, with a
    // password the server does not check (trust) but the daemon must never show.
    let rest = base.split_once("://").unwrap().1;
    let (user, rest) = rest.split_once('@').unwrap();
    let (authority, db) = rest.split_once('/').unwrap();
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "5432"));
    let proxy = CuttableProxy::start((host.to_owned(), port.parse().unwrap())).await;
    let secret = "hunter2-never-shown";
    let user = user.split(':').next().unwrap();
    let database = format!("postgres://{user}:{secret}@127.0.0.1:{}/{db}", proxy.port);
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), &database, "");
    assert_eq!(Client::new().get(&daemon.api("/chats")).await.0, 200);

    proxy.cut();
    let ready = reqwest::get(format!("{}/readyz", daemon.url))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 503);
    let header_id = ready.headers()["x-request-id"].to_str().unwrap().to_owned();
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["error"]["kind"], "database_unavailable", "{ready}");
    assert_eq!(ready["error"]["request_id"], header_id.as_str());

    let (status, failed) = Client::new().get(&daemon.api("/chats")).await;
    assert_eq!(status, 500, "{failed}");
    assert_eq!(failed["error"]["code"], "internal");
    let request_id = failed["error"]["request_id"].as_str().unwrap().to_owned();
    for answer in [&ready, &failed] {
        let text = answer.to_string().to_lowercase();
        for internal in [secret, "connection", "database error", "pool", "io error"] {
            assert!(!text.contains(internal), "{internal:?} shown in {answer}");
        }
    }
    // The log has the details under the ids, and never the password.
    wait_until("the failures were not logged with their ids", async || {
        daemon.logged().contains(&request_id) && daemon.logged().contains(&header_id)
    })
    .await;
    assert!(!daemon.logged().contains(secret));

    // Nor does a daemon that cannot start show it.
    let refused = keel(
        dir.path(),
        &["serve", "--listen", "127.0.0.1:0", "--database", &database],
        &[],
    );
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains(&format!("{user}:***@127.0.0.1")), "{said}");
    assert!(!said.contains(secret), "{said}");
    let listed = keel(dir.path(), &["users", "list", "--database", &database], &[]);
    assert!(!listed.status.success());
    assert!(!String::from_utf8_lossy(&listed.stderr).contains(secret));
}

#[tokio::test]
async fn adding_the_first_user_to_a_running_daemon_requires_tokens_and_removing_it_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let daemon = Daemon::start(dir.path(), &database, "");
    let anonymous = Client::new();
    assert_eq!(anonymous.get(&daemon.api("/chats")).await.0, 200);

    let token = add_user(dir.path(), &database, "alice");
    wait_until("the daemon never noticed the new user", async || {
        let (status, body) = anonymous.get(&daemon.api("/chats")).await;
        assert!(status == 200 || status == 401, "{status}: {body}");
        status == 401
    })
    .await;
    let alice = Client::with_token(&token);
    assert_eq!(alice.get(&daemon.api("/chats")).await.0, 200);

    let removed = keel(
        dir.path(),
        &["users", "remove", "alice", "--database", &database],
        &[],
    );
    assert!(removed.status.success(), "{removed:?}");
    assert_eq!(alice.get(&daemon.api("/chats")).await.0, 401);
    assert_eq!(
        anonymous.get(&daemon.api("/chats")).await.0,
        401,
        "removing the last user must not open the API again"
    );
}

/// A container listens on every address: with no user the daemon refuses, naming the way
/// out, and that way — `keel users add` in the same environment — works. The users the
/// daemon counts are the database's, not only the configuration file's.
#[test]
fn a_public_address_waits_for_a_user_added_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let database = sqlite(dir.path());
    let public = [("KEEL_LISTEN", "0.0.0.0:0")];
    let refused = keel(dir.path(), &["serve", "--database", &database], &public);
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("keel users add"), "{stderr}");
    let added = keel(
        dir.path(),
        &["users", "add", "alice", "--database", &database],
        &public,
    );
    assert!(added.status.success(), "{added:?}");
    assert!(!String::from_utf8_lossy(&added.stdout).trim().is_empty());
}
