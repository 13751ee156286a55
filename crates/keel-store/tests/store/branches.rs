//! Messages form a tree: edits and regenerates add branches, a switch changes which one is
//! current, and everything a run reads (listing, prompt, summary) follows the current
//! branch while the others stay intact, on both backends.

use crate::common::*;
use keel_core::{PartKind, Role, Usage};
use keel_store::{ChatStatus, MessageKind, NewSummary, StoreError, Transition};

both_backends!(
    regenerate_adds_a_sibling_reply,
    switching_brings_a_branch_back_numbered_anew,
    branch_moves_wait_for_an_idle_chat,
    foreign_and_unlisted_ids_are_not_found,
    a_summary_serves_only_the_branches_that_contain_it,
    branch_listing_pages_like_the_current_one,
    an_edit_answers_the_calls_left_waiting_on_the_branch_it_leaves,
    an_edit_answers_calls_a_superseded_run_committed_but_never_handed_over,
);

fn ids(messages: &[keel_store::StoredMessage]) -> Vec<i64> {
    messages.iter().map(|m| m.id).collect()
}

fn prompt_texts(messages: &[keel_core::Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match &p.kind {
            PartKind::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// 1 user "hi" ─ 2 reply "hello", waiting.
async fn answered(s: &std::sync::Arc<dyn keel_store::Store>) -> keel_store::Chat {
    idle(s, "hi").await
}

async fn reply(s: &std::sync::Arc<dyn keel_store::Store>, chat: keel_store::ChatId, text: &str) {
    let lease = claim(s, "w", chat).await;
    s.commit_step(&lease, vec![assistant(text)]).await.unwrap();
    s.finish_run(&lease).await.unwrap();
}

async fn regenerate_adds_a_sibling_reply(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    let regenerated = s.regenerate(chat.id, 2).await.unwrap();
    assert_eq!(regenerated.status, ChatStatus::Running);
    assert_eq!(regenerated.history_version, chat.history_version + 1);
    assert_eq!(regenerated.leaf_id, 1);
    // Until the new reply comes, the branch ends at the question.
    assert_eq!(ids(&s.list_messages(chat.id, None).await.unwrap()), vec![1]);
    reply(s, chat.id, "hello again").await;
    let listed = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&listed), vec![1, 3]);
    assert_eq!(listed[1].parent_id, Some(1));
    assert_eq!(listed[1].siblings, vec![2, 3]);
    assert_eq!(listed[0].siblings, vec![1]);
    // The prompt holds only the current branch.
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    assert_eq!(prompt_texts(&prompt), vec!["hi", "hello again"]);
    // Given the user message, a regenerate does the same.
    s.regenerate(chat.id, 1).await.unwrap();
    reply(s, chat.id, "third").await;
    let listed = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(listed[1].siblings, vec![2, 3, 4]);
    // A tool message is no reply.
    let tool = tool_turn(s, chat.id).await;
    let err = s.regenerate(chat.id, tool).await.unwrap_err();
    assert!(matches!(err, StoreError::InvalidInput(_)), "{err}");
}

/// Sends a message and commits a tool step for it, leaving the chat waiting; the tool
/// message's id.
async fn tool_turn(s: &std::sync::Arc<dyn keel_store::Store>, chat: keel_store::ChatId) -> i64 {
    send(s, chat, "again", keel_store::Busy::Queue).await;
    let lease = claim(s, "w", chat).await;
    let call = keel_core::Part::tool_call("c1", "t", "{}", false);
    let result = keel_core::Part::tool_result("c1", "t", serde_json::json!("ok"), false, false);
    s.commit_step(
        &lease,
        vec![
            keel_store::NewMessage::new(Role::Assistant, vec![call]),
            keel_store::NewMessage::new(Role::Tool, vec![result]),
        ],
    )
    .await
    .unwrap();
    s.finish_run(&lease).await.unwrap();
    let tool = s.recent_messages(chat, 1).await.unwrap();
    assert_eq!(tool[0].role, Role::Tool);
    tool[0].id
}

async fn switching_brings_a_branch_back_numbered_anew(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    // 1 ─ 2 ─ 3 "more" ─ 4 ; then 3 edited: 1 ─ 2 ─ 5 "more, edited" ─ 6
    send(s, chat.id, "more", keel_store::Busy::Queue).await;
    reply(s, chat.id, "four").await;
    s.edit_message(chat.id, 3, text("more, edited"))
        .await
        .unwrap();
    reply(s, chat.id, "six").await;
    let current = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&current), vec![1, 2, 5, 6]);
    assert_eq!(current[2].siblings, vec![3, 5]);
    let before = s.get_chat(chat.id).await.unwrap();

    let switched = s.switch_branch(chat.id, 3).await.unwrap();
    assert_eq!(switched.status, ChatStatus::Waiting);
    assert_eq!(switched.leaf_id, 4);
    assert_eq!(switched.history_version, before.history_version + 1);
    assert!(switched.version > before.version);
    // The change takes the next event number and the branch is numbered above it, in order.
    assert_eq!(switched.branch_seq, before.event_seq + 1);
    let listed = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&listed), vec![1, 2, 3, 4]);
    let seqs: Vec<i64> = listed.iter().map(|m| m.event_seq).collect();
    let first = switched.branch_seq + 1;
    assert_eq!(seqs, vec![first, first + 1, first + 2, first + 3]);
    let after_switch = s
        .messages_after_seq(chat.id, before.event_seq)
        .await
        .unwrap();
    assert_eq!(ids(&after_switch), vec![1, 2, 3, 4]);
    // The other branch is intact and still listed through its messages.
    let other = s.branch_messages(chat.id, 5, None, None).await.unwrap();
    assert_eq!(ids(&other), vec![1, 2, 5, 6]);
    assert_eq!(other[3].parts, text("six"));
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    assert_eq!(prompt_texts(&prompt), vec!["hi", "hello", "more", "four"]);
    // Switching to the branch that is current already changes nothing.
    let again = s.switch_branch(chat.id, 4).await.unwrap();
    assert_eq!(again.version, switched.version);
    // A message sent now continues the current branch.
    send(s, chat.id, "next", keel_store::Busy::Queue).await;
    let listed = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&listed), vec![1, 2, 3, 4, 7]);
    assert_eq!(listed[4].parent_id, Some(4));
}

async fn branch_moves_wait_for_an_idle_chat(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    send(s, chat.id, "more", keel_store::Busy::Queue).await;
    let running = s.get_chat(chat.id).await.unwrap();
    for err in [
        s.switch_branch(chat.id, 2).await.unwrap_err(),
        s.regenerate(chat.id, 2).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                err,
                StoreError::Conflict {
                    status: ChatStatus::Running,
                    transition: Transition::SwitchBranch | Transition::Regenerate
                }
            ),
            "{err}"
        );
    }
    assert_eq!(s.get_chat(chat.id).await.unwrap(), running);
}

async fn foreign_and_unlisted_ids_are_not_found(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    for err in [
        s.switch_branch(chat.id, 99).await.unwrap_err(),
        s.regenerate(chat.id, 99).await.unwrap_err(),
        s.branch_messages(chat.id, 99, None, None)
            .await
            .unwrap_err(),
        s.switch_branch(uuid::Uuid::new_v4(), 1).await.unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    }
    assert_eq!(s.get_chat(chat.id).await.unwrap(), chat);
}

fn summary(text: &str) -> NewSummary {
    NewSummary {
        text: text.to_owned(),
        usage: Usage::default(),
        context_limit: None,
        charge: None,
    }
}

async fn a_summary_serves_only_the_branches_that_contain_it(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    // 1 hi ─ 2 hello ─ 3 summary ─ 4 notice ─ 5 "later" ─ 6 reply
    s.request_compaction(chat.id).await.unwrap();
    let lease = claim(s, "w", chat.id).await;
    assert_eq!(
        s.commit_summary(&lease, summary("they greeted"))
            .await
            .unwrap(),
        vec![3, 4]
    );
    s.finish_run(&lease).await.unwrap();
    send(s, chat.id, "later", keel_store::Busy::Queue).await;
    reply(s, chat.id, "six").await;
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    assert!(prompt_texts(&prompt)[0].contains("they greeted"));
    // A branch that diverges after the summary keeps it.
    s.edit_message(chat.id, 5, text("later, edited"))
        .await
        .unwrap();
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    let texts = prompt_texts(&prompt);
    assert!(texts[0].contains("they greeted"), "{texts:?}");
    assert_eq!(texts.last().unwrap(), "later, edited");
    reply(s, chat.id, "eight").await;
    // One that diverges before it does not: its prompt is its own history.
    s.regenerate(chat.id, 2).await.unwrap();
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    assert_eq!(prompt_texts(&prompt), vec!["hi"]);
    let listed = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&listed), vec![1]);
    // The summary is never a sibling, nor a branch a client may name.
    let first = s.branch_messages(chat.id, 2, None, None).await.unwrap();
    assert_eq!(first[1].siblings, vec![2]);
    assert_eq!(first[2].kind, MessageKind::CompactionNotice);
    reply(s, chat.id, "ten").await;
    assert!(matches!(
        s.switch_branch(chat.id, 3).await.unwrap_err(),
        StoreError::NotFound { .. }
    ));
}

async fn branch_listing_pages_like_the_current_one(db: TestDb) {
    let s = &db.store;
    let chat = answered(s).await;
    send(s, chat.id, "more", keel_store::Busy::Queue).await;
    reply(s, chat.id, "four").await;
    s.regenerate(chat.id, 2).await.unwrap();
    reply(s, chat.id, "five").await;
    let page = s
        .branch_messages(chat.id, 2, Some(1), Some(2))
        .await
        .unwrap();
    assert_eq!(ids(&page), vec![2, 3]);
    let rest = s
        .branch_messages(chat.id, 2, Some(3), Some(2))
        .await
        .unwrap();
    assert_eq!(ids(&rest), vec![4]);
    // Through the first message: the newest branch below it, the current one here.
    let newest = s.branch_messages(chat.id, 1, None, None).await.unwrap();
    assert_eq!(ids(&newest), vec![1, 5]);
}

/// Every tool call of `messages` has exactly one result.
fn calls_pair_up(messages: &[keel_store::StoredMessage]) -> bool {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for part in messages.iter().flat_map(|m| m.parts.iter()) {
        match &part.kind {
            PartKind::ToolCall { tool_call_id, .. } => calls.push(tool_call_id.clone()),
            PartKind::ToolResult { tool_call_id, .. } => results.push(tool_call_id.clone()),
            _ => {}
        }
    }
    calls.sort();
    results.sort();
    calls == results
}

/// The ids and error flags of the results of the last message.
fn closed(messages: &[keel_store::StoredMessage]) -> Vec<(String, bool)> {
    let last = messages.last().unwrap();
    assert_eq!(last.role, Role::Tool, "{last:?}");
    last.parts
        .iter()
        .filter_map(|p| match &p.kind {
            PartKind::ToolResult {
                tool_call_id,
                is_error,
                result,
                ..
            } => {
                assert_eq!(
                    result,
                    &serde_json::json!(keel_store::transitions::INTERRUPTED_BY_USER)
                );
                Some((tool_call_id.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

async fn an_edit_answers_the_calls_left_waiting_on_the_branch_it_leaves(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "pick two").await;
    let lease = claim(s, "w", chat.id).await;
    // 1 "pick two" ─ 2 calls c1, c2 (requires_action)
    enter_ra(s, &lease).await;
    assert_eq!(
        s.get_chat(chat.id).await.unwrap().status,
        ChatStatus::RequiresAction
    );
    let edited = s.edit_message(chat.id, 1, text("pick one")).await.unwrap();
    assert!(edited.pending_tool_calls.is_empty());
    // The branch left ends with the calls answered as interrupted by the user.
    let left = s.branch_messages(chat.id, 2, None, None).await.unwrap();
    assert_eq!(ids(&left), vec![1, 2, 3]);
    assert_eq!(
        closed(&left),
        vec![("c1".to_owned(), true), ("c2".to_owned(), true)]
    );
    reply(s, chat.id, "one").await;
    // Brought back, it pairs every call with one result.
    s.switch_branch(chat.id, 2).await.unwrap();
    let back = s.list_messages(chat.id, None).await.unwrap();
    assert_eq!(ids(&back), vec![1, 2, 3]);
    assert!(calls_pair_up(&back), "{back:?}");
    let prompt = s.load_prompt_history(chat.id).await.unwrap();
    assert_eq!(prompt.len(), 3, "{prompt:?}");
}

async fn an_edit_answers_calls_a_superseded_run_committed_but_never_handed_over(db: TestDb) {
    let s = &db.store;
    let chat = create(s, "pick").await;
    let lease = claim(s, "w", chat.id).await;
    // The run committed a step with a client-side call beside a local one, and the edit
    // lands before it enters requires_action.
    s.commit_step(
        &lease,
        vec![
            keel_store::NewMessage::new(
                Role::Assistant,
                vec![
                    keel_core::Part::tool_call("local", "read", "{}", false),
                    keel_core::Part::tool_call("client", "pick", "{}", false),
                ],
            ),
            keel_store::NewMessage::new(
                Role::Tool,
                vec![keel_core::Part::tool_result(
                    "local",
                    "read",
                    serde_json::json!("ok"),
                    false,
                    false,
                )],
            ),
        ],
    )
    .await
    .unwrap();
    s.edit_message(chat.id, 1, text("pick again"))
        .await
        .unwrap();
    let left = s.branch_messages(chat.id, 2, None, None).await.unwrap();
    assert_eq!(ids(&left), vec![1, 2, 3, 4]);
    assert_eq!(closed(&left), vec![("client".to_owned(), true)]);
    assert!(calls_pair_up(&left), "{left:?}");
    // The superseded run's hand-over is fenced.
    let late = s
        .enter_requires_action(
            &lease,
            vec![keel_core::PendingToolCall {
                tool_call_id: "client".into(),
                tool_name: "pick".into(),
                args: "{}".into(),
            }],
            None,
        )
        .await;
    assert!(late.is_err(), "{late:?}");
}
