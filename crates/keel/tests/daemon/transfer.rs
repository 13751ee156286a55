//! Moving chats and databases: a chat exported with every branch imports as an equal chat
//! (the same export but for its id) on SQLite and PostgreSQL, bad exports are refused with
//! nothing stored, and `keel backup` of a daemon under load restores every message committed
//! before it began; `keel restore` refuses a database in use and a file that is not Keel's.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::harness::*;

fn anthropic_config(mock: &keel_mock::MockServer) -> String {
    format!(
        "[[providers]]\nname = \"claude\"\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
         [[models]]\nid = \"thinker\"\nprovider = \"claude\"\nmodel = \"mock\"\n\
         thinking_budget_tokens = 1024\ndefault = true\n",
        mock.base_url()
    )
}

/// The export of a chat as the daemon sent it: its text, unparsed.
async fn export_text(daemon: &Daemon, id: &str, query: &str) -> (u16, String, String) {
    let response = http_client()
        .get(daemon.api(&format!("/chats/{id}/export{query}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, response.text().await.unwrap())
}

async fn import(daemon: &Daemon, body: String) -> (u16, Value) {
    let response = http_client()
        .post(daemon.api("/chats/import"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A chat with signed thinking, a tool call and its result, then an edit of its first
/// message (a second branch), switched back to the first: the current branch is not the
/// newest. Returns its id.
async fn branched_chat(client: &Client, daemon: &Daemon) -> String {
    let script = json!({"steps": [
        {"reasoning": "I should read a.txt", "tool_calls": [
            {"name": "read_file", "args": {"path": "a.txt"}, "id": "toolu_1"}]},
        {"text": "The file says alpha."}
    ]});
    let id = client
        .create_chat(
            daemon,
            json!({"text": format!("read it\n#mock {script}"), "title": "Moved",
                   "system": "Answer briefly."}),
        )
        .await;
    client.settle(daemon, &id).await;
    let (status, body) = client
        .edit(
            daemon,
            &id,
            1,
            json!({"text": scripted("edited branch", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    client
        .wait_messages(daemon, &id, |m| {
            m.last().is_some_and(|m| text_of(m) == "edited branch")
        })
        .await;
    client.settle(daemon, &id).await;
    let (status, body) = client
        .post(
            &daemon.api(&format!("/chats/{id}/branch")),
            json!({"message_id": 4}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    id
}

/// Exports a branched chat, imports it and exports the import: the same document but for
/// the chat's id. The imported chat is the caller's, waits, and carries on (its signed
/// thinking goes back to the provider, whose rules the mock enforces).
async fn export_import_round_trip(database: &str) {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    std::fs::write(dir.path().join("workspace/a.txt"), "alpha").unwrap();
    let daemon = Daemon::start(dir.path(), database, &anthropic_config(&mock));
    let client = Client::new();
    let id = branched_chat(&client, &daemon).await;

    let (status, kind, exported) = export_text(&daemon, &id, "").await;
    assert_eq!(status, 200, "{exported}");
    assert!(kind.starts_with("application/json"), "{kind}");
    let file: Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(file["format"], 1);
    assert_eq!(file["current_leaf"], 4);
    assert_eq!(file["system"], "Answer briefly.");
    let messages = file["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 6, "both branches: {file}");
    let reasoning = &messages[1]["parts"][0];
    assert_eq!(reasoning["type"], "reasoning", "{file}");
    assert!(
        reasoning["provider_metadata"]
            .to_string()
            .contains("signature"),
        "the thinking block's signature is kept: {reasoning}"
    );
    assert_eq!(messages[1]["parts"][1]["tool_call_id"], "toolu_1");
    assert_eq!(messages[2]["parts"][0]["type"], "tool_result");
    assert_eq!(
        messages[4]["parent_id"],
        Value::Null,
        "the edit is a second root"
    );

    let (status, imported) = import(&daemon, exported.clone()).await;
    assert_eq!(status, 201, "{imported}");
    let new_id = imported["id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, id);
    assert_eq!(imported["status"], "waiting");
    assert_eq!(imported["title"], "Moved");
    let (_, _, again) = export_text(&daemon, &new_id, "").await;
    assert_eq!(
        again.replace(&new_id, &id),
        exported,
        "byte for byte but the id"
    );
    assert_eq!(
        client.messages(&daemon, &new_id).await,
        client.messages(&daemon, &id).await,
        "the current branch lists as it did"
    );

    // The imported chat is a chat like any other: it answers on its current branch.
    let (status, sent) = client
        .send_message(
            &daemon,
            &new_id,
            json!({"text": scripted("carried on", 0.0)}),
        )
        .await;
    assert_eq!(status, 202, "{sent}");
    let after = client.settle(&daemon, &new_id).await;
    assert_eq!(text_of(after.last().unwrap()), "carried on");
    assert_eq!(after[0]["id"], 1, "{after:?}");
    let (_, listed) = client.get(&daemon.api("/chats")).await;
    assert_eq!(listed["chats"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn an_exported_chat_imports_as_the_same_chat_on_sqlite() {
    let (_dir, database) = scratch();
    export_import_round_trip(&database).await;
}

#[tokio::test]
async fn an_exported_chat_imports_as_the_same_chat_on_postgres() {
    let Some(database) = crate::postgres::fresh_database() else {
        return;
    };
    export_import_round_trip(&database.url).await;
}

#[tokio::test]
async fn markdown_shows_the_current_branch_for_people() {
    let mock = keel_mock::spawn(keel_mock::MockConfig::fast())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
    std::fs::write(dir.path().join("workspace/a.txt"), "alpha").unwrap();
    let database = sqlite(dir.path());
    let daemon = Daemon::start(dir.path(), &database, &anthropic_config(&mock));
    let id = branched_chat(&Client::new(), &daemon).await;
    let (status, kind, markdown) = export_text(&daemon, &id, "?format=markdown").await;
    assert_eq!(status, 200, "{markdown}");
    assert_eq!(kind, "text/markdown; charset=utf-8");
    assert!(markdown.starts_with("# Moved\n"), "{markdown}");
    for shown in [
        "> Answer briefly.",
        "## User\n\nread it",
        "<details><summary>Reasoning</summary>\n\nI should read a.txt",
        "Tool call `read_file`:\n\n```json\n{\"path\":\"a.txt\"}\n```",
        "Result of `read_file`:",
        "alpha",
        "## Assistant\n\nThe file says alpha.",
    ] {
        assert!(markdown.contains(shown), "{shown:?} missing:\n{markdown}");
    }
    assert!(
        !markdown.contains("edited branch"),
        "another branch:\n{markdown}"
    );
    let (status, _, body) = export_text(&daemon, &id, "?format=pdf").await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn a_bad_import_is_refused_by_name_and_stores_nothing() {
    let (_dir, daemon) = demo_daemon_with("max_body_bytes = 1024\nimport_max_body_bytes = 4096\n");
    let client = Client::new();
    let id = client.replied_chat(&daemon, "hello there").await;
    let (_, _, exported) = export_text(&daemon, &id, "").await;
    let good: Value = serde_json::from_str(&exported).unwrap();
    let with = |change: &dyn Fn(&mut Value)| {
        let mut file = good.clone();
        change(&mut file);
        file.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        ("{not json".into(), "malformed JSON"),
        (
            with(&|f| f["format"] = json!(2)),
            "unsupported export format 2",
        ),
        (
            with(&|f| f["messages"][1]["parent_id"] = json!(9)),
            "messages[1]: parent_id 9",
        ),
        (
            with(&|f| f["current_leaf"] = json!(7)),
            "current_leaf 7 names no listed message",
        ),
        (
            with(&|f| f["messages"][1]["id"] = json!(1)),
            "messages[1]: id 1",
        ),
        (with(&|f| f["messages"] = json!([])), "at least one message"),
        (
            with(&|f| f["messages"][0]["role"] = json!("narrator")),
            "messages[0]: role",
        ),
        (
            with(&|f| f["messages"][0]["parts"] = json!([])),
            "messages[0]: a message needs",
        ),
        (
            with(&|f| f["model"] = json!("no-such-model")),
            "unknown model `no-such-model`",
        ),
        (with(&|f| f["title"] = json!("two\nlines")), "title:"),
        (with(&|f| f["surprise"] = json!(1)), "surprise"),
    ];
    for (body, says) in cases {
        let (status, answer) = import(&daemon, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{says:?} not in {message:?}");
    }
    // Above `runs.import_max_body_bytes` (and that limit, not `max_body_bytes`, applies).
    let long = with(&|f| f["messages"][0]["parts"][0]["text"] = json!("x".repeat(5000)));
    assert_eq!(import(&daemon, long).await.0, 413);
    let (_, listed) = client.get(&daemon.api("/chats")).await;
    assert_eq!(
        listed["chats"].as_array().unwrap().len(),
        1,
        "nothing was stored"
    );
    let bigger = with(&|f| f["messages"][0]["parts"][0]["text"] = json!("y".repeat(2000)));
    assert_eq!(import(&daemon, bigger).await.0, 201);
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn a_backup_under_load_restores_every_message_committed_before_it() {
    const CHATS: usize = 200;
    let (dir, database) = scratch();
    let mut daemon = Daemon::start(dir.path(), &database, "workers = 256\n");
    let client = Client::new();
    // Half the chats reply at once; the others stream for ten seconds, through the backup.
    let slow = json!({"text": words(30), "rate": 3.0});
    let chats: Vec<String> = futures::future::join_all((0..CHATS).map(|i| {
        let (client, daemon) = (&client, &daemon);
        let text = if i % 2 == 0 {
            scripted(&format!("reply {i}"), 0.0)
        } else {
            format!("chat {i}\n#mock {slow}")
        };
        async move { client.create_chat(daemon, json!({ "text": text })).await }
    }))
    .await;
    for id in chats.iter().step_by(2) {
        client.settle(&daemon, id).await;
    }
    // What is committed now is what the backup must hold; replies go on committing.
    let before: Vec<Vec<Value>> =
        futures::future::join_all(chats.iter().map(|id| client.messages(&daemon, id))).await;
    let backup = dir.path().join("backup.db");
    let file = backup.to_str().unwrap();
    let taken = keel(
        dir.path(),
        &["backup", file],
        &[("KEEL_DATABASE_URL", &database)],
    );
    assert!(taken.status.success(), "{}", stderr(&taken));
    let running = futures::future::join_all(chats.iter().map(|id| client.chat(&daemon, id))).await;
    assert!(
        running
            .iter()
            .skip(1)
            .step_by(2)
            .all(|chat| chat["status"] == "running"),
        "the slow replies were over before the backup ended"
    );
    let again = keel(
        dir.path(),
        &["backup", file],
        &[("KEEL_DATABASE_URL", &database)],
    );
    assert!(
        !again.status.success(),
        "an existing file is never overwritten"
    );
    assert!(stderr(&again).contains("exists"), "{}", stderr(&again));

    // The daemon has its database open: a restore onto it is refused and changes nothing.
    let refused = keel(dir.path(), &["restore", file, "--database", &database], &[]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("in use"), "{}", stderr(&refused));
    daemon.terminate();
    let restored = keel(dir.path(), &["restore", file, "--database", &database], &[]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    let daemon = Daemon::start(dir.path(), &database, "workers = 256\n");
    for (id, committed) in chats.iter().zip(&before) {
        let (status, chat) = client.get(&daemon.api(&format!("/chats/{id}"))).await;
        assert_eq!(status, 200, "{chat}");
        let (_, listed) = client
            .get(&daemon.api(&format!("/chats/{id}/messages?branch=1")))
            .await;
        let listed = listed["messages"].as_array().unwrap();
        for message in committed {
            assert!(
                listed
                    .iter()
                    .any(|m| m["id"] == message["id"] && m["parts"] == message["parts"]),
                "{message} of {id} is missing after the restore: {listed:?}"
            );
        }
    }
}

#[tokio::test]
async fn restore_refuses_a_file_that_is_not_a_keel_database() {
    let (dir, database) = scratch();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database").unwrap();
    let refused = keel(
        dir.path(),
        &["restore", text.to_str().unwrap(), "--database", &database],
        &[],
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("not a Keel database"),
        "{}",
        stderr(&refused)
    );
    let other = dir.path().join("other.db");
    let made = Command::new("sqlite3")
        .arg(&other)
        .arg("CREATE TABLE t (x);")
        .status();
    if made.is_ok_and(|s| s.success()) {
        let refused = keel(
            dir.path(),
            &["restore", other.to_str().unwrap(), "--database", &database],
            &[],
        );
        assert!(
            stderr(&refused).contains("no migrations table"),
            "{}",
            stderr(&refused)
        );
    }
    assert!(
        !dir.path().join("keel.db").exists(),
        "nothing was put in place"
    );
    let postgres = keel(
        dir.path(),
        &["backup", "x.db", "--database", "postgres://u@h/db"],
        &[],
    );
    assert!(!postgres.status.success());
    assert!(
        stderr(&postgres).contains("pg_dump"),
        "{}",
        stderr(&postgres)
    );
}
