//! `keel chat` against a `keel serve` child process with the demo model: streaming in a
//! pseudo-terminal, Ctrl-C interrupting a reply, and `--once` with piped standard input.
//!
//! Longer than most files: each test drives `keel chat` in a pseudo-terminal, keystroke by
//! keystroke.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use expectrl::{ControlCode, Eof, Session};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A daemon on a free loopback port, stopped on drop.
struct Daemon {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
    _one_at_a_time: Option<std::sync::MutexGuard<'static, ()>>,
}

/// The terminal sessions run one at a time: eleven daemons and clients at once on a small
/// machine slow every client's redraws, and each test's waits for its output with them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Daemon {
    fn start() -> Self {
        let turn = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Self::start_in(tempfile::tempdir().unwrap(), "127.0.0.1:0", Some(turn))
    }

    /// Stops the daemon with SIGTERM (it releases running chats) and starts it again on the
    /// same address and database.
    fn restart(mut self) -> Self {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap();
        let address = self.url.trim_start_matches("http://").to_owned();
        let dir = tempfile::tempdir().unwrap();
        let dir = std::mem::replace(&mut self._dir, dir);
        let turn = self._one_at_a_time.take();
        Self::start_in(dir, &address, turn)
    }

    fn start_in(
        dir: tempfile::TempDir,
        address: &str,
        turn: Option<std::sync::MutexGuard<'static, ()>>,
    ) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
            .args(["serve", "--listen", address])
            .current_dir(dir.path())
            .env_remove("KEEL_CONFIG")
            .env_remove("KEEL_LISTEN")
            .env_remove("KEEL_DATABASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let url = loop {
            let line = rx.recv_timeout(TIMEOUT).expect("keel serve did not start");
            if let Some(rest) = line.split("keel listening on ").nth(1) {
                break rest
                    .split(|c: char| c.is_whitespace() || c == ';')
                    .next()
                    .unwrap()
                    .to_owned();
            }
        };
        Self {
            child,
            url,
            _dir: dir,
            _one_at_a_time: turn,
        }
    }

    fn get(&self, path: &str) -> Value {
        let url = format!("{}/api/v1{path}", self.url);
        // reqwest needs the process's rustls crypto provider, which `keel` installs in `main`.
        let _ = rustls::crypto::ring::default_provider().install_default();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move { reqwest::get(url).await.unwrap().json().await.unwrap() })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The text without ANSI escape sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `keel chat ARGS` in a pseudo-terminal, with no token from the environment and its input
/// history under the test's own scratch directory unless `env` names one.
fn spawn_chat(args: &[&str], env: &[(&str, &str)]) -> Session {
    // Each session keeps its input history apart, so that parallel tests never share a file;
    // a test that needs it across runs passes its own `XDG_STATE_HOME`.
    let state = tempfile::tempdir().unwrap().keep();
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel"));
    command
        .args(args)
        .env_remove("KEEL_TOKEN")
        .env("XDG_STATE_HOME", &state);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut chat = Session::spawn(command).unwrap();
    chat.set_expect_timeout(Some(TIMEOUT));
    chat
}

fn words(n: usize) -> String {
    (1..=n)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn ctrl_c_interrupts_a_streaming_reply_and_exits() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[]);
    chat.expect("> ").unwrap();

    let reply = words(40);
    chat.send_line(format!(r##"#mock {{"text": "{reply}", "rate": 5}}"##))
        .unwrap();
    // Past the echo of the typed line (which holds the words too), a few words have
    // streamed: the reply is visibly in progress.
    chat.expect(r#""rate": 5}"#).unwrap();
    chat.expect("word1 word2 word3").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect("[interrupted]").unwrap();
    chat.expect("> ").unwrap();

    let chats = daemon.get("/chats");
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let messages = daemon.get(&format!("/chats/{id}/messages"));
    let last = messages["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["interrupted"], true, "{last}");
    let text = last["parts"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("word1 word2 word3"), "{text}");
    assert!(text.len() < reply.len(), "the reply was not cut: {text}");

    // At an idle prompt Ctrl-C exits.
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
    let status = chat.get_process().wait().unwrap();
    assert!(format!("{status:?}").ends_with(", 0)"), "{status:?}");
}

#[test]
fn once_prints_the_final_reply_of_a_piped_question() {
    let daemon = Daemon::start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["chat", "--once", "--url", &daemon.url])
        .env_remove("KEEL_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"What is six times seven?\n#mock {\"text\": \"The answer is 42.\", \"rate\": 0}\n",
        )
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "The answer is 42.\n"
    );
}

#[test]
fn once_fails_clearly_without_a_daemon() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["chat", "--once", "--url", "http://127.0.0.1:9"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot reach keel"), "{stderr}");
}

#[test]
fn once_reports_a_failed_run() {
    let daemon = Daemon::start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel"))
        .args(["chat", "--once", "--url", &daemon.url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"x\n#mock {\"error\": {\"status\": 401}}\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the run failed: auth"), "{stderr}");
}

#[test]
fn a_daemon_restart_mid_reply_prints_every_word_once() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[]);
    chat.expect("> ").unwrap();

    let reply = words(30);
    chat.send_line(format!(r##"#mock {{"text": "{reply}", "rate": 5}}"##))
        .unwrap();
    // The typed line holds the words too: the reply is what follows its end.
    let typed = "\"rate\": 5}";
    chat.expect(typed).unwrap();
    let mut seen = typed.to_owned();
    let start = chat.expect("word1 word2 word3").unwrap();
    seen.push_str(&String::from_utf8_lossy(start.as_bytes()));
    let daemon = daemon.restart();
    let rest = chat.expect("word30").unwrap();
    seen.push_str(&String::from_utf8_lossy(rest.as_bytes()));
    let rest = chat.expect("> ").unwrap();
    seen.push_str(&String::from_utf8_lossy(rest.as_bytes()));

    // What follows the typed line (which the terminal may echo) holds the reply: its words
    // in order, each exactly once, around the reconnection notices.
    let output = strip_ansi(seen.rsplit("\"rate\": 5}").next().unwrap());
    let printed: Vec<&str> = output
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|token| token.starts_with("word"))
        .collect();
    let expected: Vec<&str> = reply.split(' ').collect();
    assert_eq!(printed, expected, "{seen:?}");
    assert!(seen.contains("reconnected"), "{seen:?}");
    let chats = daemon.get("/chats");
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let messages = daemon.get(&format!("/chats/{id}/messages"));
    let last = messages["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["parts"][0]["text"], reply.as_str(), "{last}");
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

/// The texts of the chat's user messages, as the daemon stored them.
fn user_texts(daemon: &Daemon) -> Vec<String> {
    let chats = daemon.get("/chats");
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let messages = daemon.get(&format!("/chats/{id}/messages"));
    messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["parts"][0]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_pasted_block_of_five_lines_is_sent_as_one_message() {
    let daemon = Daemon::start();
    // A bare host:port is taken as plain HTTP.
    let bare = daemon.url.trim_start_matches("http://");
    let mut chat = spawn_chat(&["chat", "--url", bare], &[]);
    chat.expect("> ").unwrap();

    let lines = [
        "first line",
        "second line",
        "third line",
        "fourth line",
        "fifth line",
    ];
    // What a terminal sends for a paste when bracketed paste is on, then Enter.
    chat.send(format!("\x1b[200~{}\x1b[201~", lines.join("\n")))
        .unwrap();
    chat.send("\r").unwrap();
    chat.expect("fifth line").unwrap();
    // Under the finished reply: what the chat has used so far (the demo model has no price).
    let usage = chat.expect("> ").unwrap();
    let usage = strip_ansi(&String::from_utf8_lossy(usage.as_bytes()));
    assert!(usage.contains("chat so far: "), "{usage:?}");
    assert!(
        usage.contains(" tokens (") && !usage.contains('$'),
        "{usage:?}"
    );

    assert_eq!(user_texts(&daemon), [lines.join("\n")]);
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn the_readme_demo_command_asks_the_demo_model_for_the_tool() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("> ").unwrap();

    chat.send_line(r#"/list_dir {"path":"."}"#).unwrap();
    let shown = chat.expect("Tool list_dir returned").unwrap();
    let shown = String::from_utf8_lossy(shown.as_bytes()).into_owned();
    assert!(!shown.contains("unknown command"), "{shown}");
    assert!(shown.contains("list_dir"), "{shown}");
    chat.expect("> ").unwrap();
    assert_eq!(user_texts(&daemon), [r#"/list_dir {"path":"."}"#]);

    // NO_COLOR: the reply and the lines around it carry no styles.
    chat.send_line("**plain** words").unwrap();
    let shown = chat.expect("> ").unwrap();
    let shown = String::from_utf8_lossy(shown.as_bytes()).into_owned();
    assert!(shown.contains("**plain** words"), "{shown:?}");
    assert!(!shown.contains("\x1b[1m"), "{shown:?}");
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn the_prompt_says_clearly_when_the_daemon_is_down() {
    let mut chat = spawn_chat(&["chat", "--url", "127.0.0.1:9"], &[]);
    let shown = chat.expect(Eof).unwrap();
    let shown = String::from_utf8_lossy(shown.as_bytes()).into_owned();
    assert!(
        shown.contains("cannot reach keel at http://127.0.0.1:9") && shown.contains("keel serve"),
        "{shown}"
    );
    assert!(!shown.contains("builder error"), "{shown}");
}

#[test]
fn the_input_history_is_kept_across_runs() {
    let daemon = Daemon::start();
    let state = tempfile::tempdir().unwrap();
    let env = [("XDG_STATE_HOME", state.path().to_str().unwrap())];
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &env);
    chat.expect("> ").unwrap();
    chat.send_line("remember this line").unwrap();
    chat.expect("remember this line").unwrap();
    chat.expect("> ").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
    let file = state.path().join("keel/history");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "remember this line\n"
    );

    // A new run: Up brings the line back, Enter sends it.
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &env);
    chat.expect("> ").unwrap();
    chat.send("\x1b[A").unwrap();
    chat.send("\r").unwrap();
    chat.expect("remember this line").unwrap();
    chat.expect("> ").unwrap();
    assert_eq!(
        user_texts(&daemon),
        ["remember this line"],
        "the newest chat"
    );
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn slash_continue_carries_on_a_stopped_reply() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[]);
    chat.expect("> ").unwrap();
    let reply = words(40);
    chat.send_line(format!(r##"#mock {{"text": "{reply}", "rate": 10}}"##))
        .unwrap();
    chat.expect(r#""rate": 10}"#).unwrap();
    chat.expect("word1 word2 word3").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect("[interrupted]").unwrap();
    chat.expect("> ").unwrap();
    chat.send_line("/continue").unwrap();
    chat.expect("word40").unwrap();
    chat.expect("> ").unwrap();

    let chats = daemon.get("/chats");
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    let messages = daemon.get(&format!("/chats/{id}/messages"));
    let texts: Vec<String> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["parts"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts.concat(), reply, "nothing said twice");

    // Nothing is stopped now: /continue says so, and so does /retry of a chat that did
    // not fail.
    chat.send_line("/continue").unwrap();
    chat.expect("not a stopped reply").unwrap();
    chat.send_line("/retry").unwrap();
    chat.expect("cannot retry run").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

/// The current branch's messages through the API.
fn branch(daemon: &Daemon) -> Vec<Value> {
    let chats = daemon.get("/chats");
    let id = chats["chats"][0]["id"].as_str().unwrap().to_owned();
    daemon.get(&format!("/chats/{id}/messages"))["messages"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn branches_are_listed_switched_and_regenerated_from_the_prompt() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("> ").unwrap();
    chat.send_line(r#"#mock {"text": "alpha reply"}"#).unwrap();
    chat.expect(r#""alpha reply"}"#).unwrap();
    chat.expect("alpha reply").unwrap();
    chat.expect("> ").unwrap();

    // An edit makes a second version of the user message, answered anew.
    chat.send_line(r#"/edit #mock {"text": "beta reply"}"#)
        .unwrap();
    chat.expect(r#""beta reply"}"#).unwrap();
    chat.expect(r#""beta reply"}  < 2/2 >"#).unwrap();
    chat.expect("beta reply").unwrap();
    chat.expect("> ").unwrap();

    chat.send_line("/history").unwrap();
    chat.expect("the current branch:").unwrap();
    chat.expect(r#"#3 you: #mock {"text": "beta reply"}  < 2/2 >"#)
        .unwrap();
    chat.expect("#4 reply: beta reply").unwrap();

    chat.send_line("/branches").unwrap();
    chat.expect("versions of #3 (/branch N switches):").unwrap();
    chat.expect(r#"  1. #1 #mock {"text": "alpha reply"}"#)
        .unwrap();
    chat.expect(r#"* 2. #3 #mock {"text": "beta reply"}"#)
        .unwrap();

    // The first version comes back, with the reply that followed it.
    chat.send_line("/branch 1").unwrap();
    chat.expect("switched to version 1 (#1)").unwrap();
    chat.expect(r#""alpha reply"}  < 1/2 >"#).unwrap();
    chat.expect("alpha reply").unwrap();
    chat.expect("> ").unwrap();
    let messages = branch(&daemon);
    let ids: Vec<i64> = messages.iter().map(|m| m["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [1, 2], "{messages:?}");

    // A new version of the reply, beside the old one.
    chat.send_line("/regenerate").unwrap();
    chat.expect("writing another version of the reply").unwrap();
    chat.expect("< 2/2 >").unwrap();
    chat.expect("> ").unwrap();
    let messages = branch(&daemon);
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[0]["id"], 1);
    assert_eq!(messages[1]["siblings"].as_array().unwrap().len(), 2);
    assert_eq!(messages[1]["parts"][0]["text"], "alpha reply");
    assert_ne!(messages[1]["id"], 2, "the new version is current");

    chat.send_line("/branch 5").unwrap();
    chat.expect("there are 2 versions here").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

impl Daemon {
    fn post(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/api/v1{path}", self.url);
        let _ = rustls::crypto::ring::default_provider().install_default();
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(async move {
                let response = reqwest::Client::new()
                    .post(url)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert!(response.status().is_success(), "{response:?}");
                response.json().await.unwrap_or(Value::Null)
            })
    }

    /// A chat made through the API with `text` as its first message and `title`, once its
    /// first reply is in.
    fn chat_with(&self, text: &str, title: &str) -> String {
        let chat = self.post(
            "/chats",
            serde_json::json!({ "text": text, "title": title }),
        );
        let id = chat["id"].as_str().unwrap().to_owned();
        self.settle(&id);
        id
    }

    /// Waits until the chat's run is over (bounded: the demo model answers at once).
    fn settle(&self, id: &str) {
        for _ in 0..600 {
            let chat = self.get(&format!("/chats/{id}"));
            if chat["status"] != "running" && chat["status"] != "interrupting" {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("chat {id} never settled");
    }
}

/// What the terminal shows of `bytes`: escapes removed, and of each line what is left after
/// its last carriage return (a spinner drawn and erased on it).
fn screen_lines(bytes: &[u8]) -> Vec<String> {
    strip_ansi(&String::from_utf8_lossy(bytes))
        .split('\n')
        .map(|line| {
            let line = line.trim_end_matches('\r');
            line.rsplit('\r').next().unwrap_or(line).to_owned()
        })
        .collect()
}

#[test]
fn slash_switch_takes_a_list_number_or_the_start_of_an_id() {
    let daemon = Daemon::start();
    let first = daemon.chat_with(r#"#mock {"text": "first reply"}"#, "First chat");
    let second = daemon.chat_with(r#"#mock {"text": "second reply"}"#, "Second chat");
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("> ").unwrap();

    chat.send_line("/chats").unwrap();
    chat.expect("  1. Second chat  (").unwrap();
    chat.expect(&second[..8]).unwrap();
    chat.expect("  2. First chat  (").unwrap();
    chat.expect("> ").unwrap();

    chat.send_line("/switch 2").unwrap();
    chat.expect(format!("chat {first}")).unwrap();
    chat.expect("first reply").unwrap();
    chat.expect("> ").unwrap();

    // The first characters of an id, as `/chats` shows them.
    chat.send_line(format!("/switch {}", &second[..8])).unwrap();
    chat.expect(format!("chat {second}")).unwrap();
    chat.expect("second reply").unwrap();
    chat.expect("> ").unwrap();

    chat.send_line("/switch 7").unwrap();
    chat.expect("/switch takes 1 to 2").unwrap();
    chat.send_line("/switch zz").unwrap();
    chat.expect("no chat's id starts with zz").unwrap();
    // The whole id works too.
    chat.send_line(format!("/switch {first}")).unwrap();
    chat.expect(format!("chat {first}")).unwrap();
    chat.expect("> ").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn slash_chats_marks_archived_chats_and_shows_local_times() {
    let daemon = Daemon::start();
    let id = daemon.chat_with("plans", "Old plans");
    daemon.post(&format!("/chats/{id}/archive"), serde_json::json!({}));
    let updated = daemon.get(&format!("/chats/{id}"))["updated_at"]
        .as_str()
        .unwrap()
        .to_owned();
    // India is UTC+05:30 all year: the time shown is the stored one moved by that much.
    let india = chrono::FixedOffset::east_opt(5 * 3600 + 1800).unwrap();
    let local = chrono::DateTime::parse_from_rfc3339(&updated)
        .unwrap()
        .with_timezone(&india)
        .format("%H:%M")
        .to_string();
    let mut chat = spawn_chat(
        &["chat", "--url", &daemon.url],
        &[("NO_COLOR", "1"), ("TZ", "Asia/Kolkata")],
    );
    chat.expect("> ").unwrap();
    chat.send_line("/chats").unwrap();
    chat.expect("1. Old plans").unwrap();
    let rest = chat.expect("> ").unwrap();
    let line = screen_lines(rest.before())[0].clone();
    assert!(line.contains("archived"), "{line:?}");
    assert!(
        line.contains(&local),
        "not {local} (UTC {updated}): {line:?}"
    );
    assert!(line.contains(&id[..8]), "{line:?}");
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn ctrl_c_at_the_prompt_clears_a_half_typed_line_and_exits_on_an_empty_one() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("> ").unwrap();
    chat.send("half typed").unwrap();
    chat.expect("half typed").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    // Still at the prompt, the line gone: what is typed next is the whole message.
    chat.send_line("the whole line").unwrap();
    chat.expect("the whole line").unwrap();
    chat.expect("chat so far").unwrap();
    chat.expect("> ").unwrap();
    assert_eq!(user_texts(&daemon), ["the whole line"]);
    // On an empty line Ctrl-C exits.
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
    let status = chat.get_process().wait().unwrap();
    assert!(format!("{status:?}").ends_with(", 0)"), "{status:?}");
}

#[test]
fn edit_regenerate_and_branch_print_only_what_changed() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("> ").unwrap();
    for answer in ["first answer", "second answer"] {
        chat.send_line(format!(r#"#mock {{"text": "{answer}"}}"#))
            .unwrap();
        chat.expect(format!(r#""{answer}"}}"#)).unwrap();
        chat.expect("chat so far").unwrap();
        chat.expect("> ").unwrap();
    }

    // What each command prints up to the prompt: the new version, never the first turn.
    chat.send_line(r#"/edit #mock {"text": "third answer"}"#)
        .unwrap();
    let edited = chat.expect("chat so far").unwrap();
    let edited = strip_ansi(&String::from_utf8_lossy(edited.before()));
    chat.expect("> ").unwrap();
    assert!(
        edited.contains("another version from here on:"),
        "{edited:?}"
    );
    assert!(
        edited.contains(r#"you: #mock {"text": "third answer"}  < 2/2 >"#),
        "{edited:?}"
    );
    assert!(
        !edited.contains("first answer"),
        "the first turn was printed again: {edited:?}"
    );
    assert!(
        !edited.contains("second answer"),
        "the old version was printed again: {edited:?}"
    );

    chat.send_line("/regenerate").unwrap();
    let regenerated = chat.expect("chat so far").unwrap();
    let regenerated = strip_ansi(&String::from_utf8_lossy(regenerated.before()));
    chat.expect("> ").unwrap();
    assert!(
        regenerated.contains("another version from here on:"),
        "{regenerated:?}"
    );
    assert!(regenerated.contains("< 2/2 >"), "{regenerated:?}");
    assert!(!regenerated.contains("first answer"), "{regenerated:?}");
    assert!(
        !regenerated.contains("you: "),
        "a message was printed again: {regenerated:?}"
    );

    chat.send_line("/branch 1").unwrap();
    chat.expect("switched to version 1").unwrap();
    let switched = chat.expect("> ").unwrap();
    let switched = strip_ansi(&String::from_utf8_lossy(switched.before()));
    assert!(
        switched.contains("another version from here on:"),
        "{switched:?}"
    );
    assert!(
        switched.contains("third answer") && switched.contains("< 1/2 >"),
        "{switched:?}"
    );
    assert!(!switched.contains("first answer"), "{switched:?}");
    assert!(!switched.contains("you: "), "{switched:?}");
    assert!(
        !switched
            .lines()
            .any(|l| l.starts_with("chat ") && !l.starts_with("chat so far")),
        "the chat was followed anew: {switched:?}"
    );
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn replies_wrap_between_words_at_the_terminal_width() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.get_process_mut().set_window_size(40, 30).unwrap();
    chat.expect("> ").unwrap();
    let words = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike \
                 november oscar papa quebec romeo sierra tango uniform victor whiskey xray \
                 yankee zulu extraordinarily-long-hyphenated-word-here done.";
    chat.send_line(format!(r#"#mock {{"text": "{words}"}}"#))
        .unwrap();
    chat.expect(r#"done."}"#).unwrap();
    let shown = chat.expect("chat so far").unwrap();
    let lines = screen_lines(shown.before());
    for line in &lines {
        assert!(line.chars().count() <= 40, "a line past the edge: {line:?}");
    }
    let printed: Vec<&str> = lines.iter().flat_map(|l| l.split_whitespace()).collect();
    let expected: Vec<&str> = words.split_whitespace().collect();
    // Every word whole (the one longer than a line aside, broken at the edge).
    let long = "extraordinarily-long-hyphenated-word-here";
    let at = printed.iter().position(|w| *w == "alpha").unwrap();
    let reply: Vec<&str> = printed[at..].to_vec();
    assert_eq!(reply[..26], expected[..26], "{lines:?}");
    assert_eq!(reply[26..].concat(), format!("{long}done."), "{lines:?}");
    chat.expect("> ").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn italics_and_tables_are_rendered() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[]);
    chat.expect("> ").unwrap();
    let reply = r"Some *soft* words.\n\n| name | size |\n| --- | ---: |\n| keel | 42 |\n\nEND";
    chat.send_line(format!(r#"#mock {{"text": "{reply}"}}"#))
        .unwrap();
    chat.expect(r#"END"}"#).unwrap();
    let shown = chat.expect("chat so far").unwrap();
    let raw = String::from_utf8_lossy(shown.before()).into_owned();
    assert!(raw.contains("\x1b[3msoft"), "no italics: {raw:?}");
    let lines = screen_lines(shown.before());
    for row in [
        "┌──────┬──────┐",
        "│ name │ size │",
        "├──────┼──────┤",
        "│ keel │   42 │",
        "└──────┴──────┘",
    ] {
        assert!(lines.iter().any(|l| l == row), "no {row:?} in {lines:?}");
    }
    assert!(!raw.contains("| --- |"), "{raw:?}");
    chat.expect("> ").unwrap();
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}

#[test]
fn slash_help_describes_the_commands_and_slash_clear_sends_nothing() {
    let daemon = Daemon::start();
    let mut chat = spawn_chat(&["chat", "--url", &daemon.url], &[("NO_COLOR", "1")]);
    chat.expect("/help lists the commands").unwrap();
    chat.expect("> ").unwrap();
    chat.send_line("/help").unwrap();
    chat.expect("commands:").unwrap();
    let help = chat.expect("> ").unwrap();
    let help = strip_ansi(&String::from_utf8_lossy(help.before()));
    for (command, what) in [
        ("/switch N|ID", "continue chat number N of /chats"),
        ("/chats", "list your recent chats"),
        ("/clear", "clear the screen (nothing is sent)"),
        (
            "/branch N",
            "make version N of what /branches listed current",
        ),
        ("/regenerate", "another version of the last reply"),
    ] {
        let line = help.lines().find(|l| l.trim_start().starts_with(command));
        assert!(line.is_some_and(|l| l.contains(what)), "{command}: {help}");
    }

    chat.send_line("a first message").unwrap();
    chat.expect("chat so far").unwrap();
    chat.expect("> ").unwrap();
    chat.send_line("/clear").unwrap();
    chat.expect("\x1b[2J").unwrap();
    chat.expect("> ").unwrap();
    chat.send_line("after the clear").unwrap();
    chat.expect("chat so far").unwrap();
    chat.expect("> ").unwrap();
    assert_eq!(user_texts(&daemon), ["a first message", "after the clear"]);
    chat.send(ControlCode::EndOfText).unwrap();
    chat.expect(Eof).unwrap();
}
