//! Transitions a client starts through the HTTP API.

use super::*;

pub(crate) async fn create_chat(cx: &mut Ctx<'_>, req: NewChat) -> Result<Chat> {
    check_history(cx.opts, &req.history, &req.parts)?;
    check_size(cx.opts, &req.tools)?;
    if let Some(key) = &req.idempotency_key
        && let Some(first) = cx.idem_lookup::<Chat>(&req.owner, &create_key(key)).await?
    {
        return Ok(first);
    }
    check_budget(cx, &req.owner).await?;
    let mut chat = Chat {
        id: Uuid::new_v4(),
        owner: req.owner,
        title: req.title,
        model: req.model,
        status: ChatStatus::Running,
        archived: false,
        max_steps: req.max_steps,
        system: req.system,
        tools: req.tools,
        worker_id: None,
        lease_expires_at: None,
        version: 1,
        history_version: 1,
        event_seq: 0,
        last_message_id: 0,
        last_error: None,
        retry_state: None,
        pending_tool_calls: Vec::new(),
        pending_deadline: None,
        created_at: cx.now,
        updated_at: cx.now,
        compact_requested: false,
        leaf_id: 0,
        branch_seq: 0,
        queued: Vec::new(),
    };
    cx.ops.insert_chat(&ChatCols::from_chat(&chat)?).await?;
    for message in req.history {
        cx.insert_message(&mut chat, message).await?;
    }
    if !req.parts.is_empty() {
        cx.insert_user(&mut chat, req.parts).await?;
    }
    cx.ops.update_chat(&ChatCols::from_chat(&chat)?).await?;
    if let Some(parent) = cx.trace.clone() {
        cx.ops
            .put_trace_parent(&chat.id.to_string(), Some(&parent))
            .await?;
    }
    cx.notice_with(
        &chat,
        Noticed {
            listing: true,
            ..Noticed::default()
        },
    );
    if let Some(key) = &req.idempotency_key {
        let owner = chat.owner.clone();
        cx.idem_remember(&owner, &create_key(key), &chat).await?;
    }
    Ok(chat)
}

pub(crate) async fn send_message(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    owner: Option<&str>,
    parts: Vec<Part>,
    busy: Busy,
    idempotency_key: Option<&str>,
) -> Result<SendOutcome> {
    check_content(cx.opts, &parts)?;
    // With its queue: a message to an idle chat starts now unless others wait before it.
    let mut chat = cx.load_with_queue(chat_id).await?;
    if owner.is_some_and(|owner| owner != chat.owner) {
        // Before anything else, idempotency keys included: another's chat is not there.
        return Err(StoreError::not_found("chat"));
    }
    let mv = check(&chat, Transition::SendMessage)?;
    let owner = chat.owner.clone();
    if let Some(key) = idempotency_key
        && let Some(first) = cx.idem_lookup(&owner, &send_key(chat_id, key)).await?
    {
        return Ok(first);
    }
    check_budget(cx, &owner).await?;
    let outcome = match (chat.status, busy) {
        (ChatStatus::Waiting | ChatStatus::Error, _) => {
            chat.last_error = None;
            chat.retry_state = None;
            chat.status = ChatStatus::Running;
            if chat.queued.is_empty() {
                SendOutcome::Started {
                    message_id: cx.insert_user(&mut chat, parts).await?,
                }
            } else {
                // Messages queued before (left by a failed run) go first: this one queues
                // behind them and the head starts now.
                let queue_id = cx.enqueue(&mut chat, parts, false).await?;
                cx.start_queue_head(&mut chat).await?;
                SendOutcome::Queued { queue_id }
            }
        }
        (ChatStatus::RequiresAction, Busy::Interrupt) => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            chat.status = ChatStatus::Running;
            SendOutcome::Started {
                message_id: cx.insert_user(&mut chat, parts).await?,
            }
        }
        (ChatStatus::Running | ChatStatus::Interrupting, Busy::Interrupt) => {
            let queue_id = cx.enqueue(&mut chat, parts, true).await?;
            chat.status = ChatStatus::Interrupting;
            SendOutcome::Queued { queue_id }
        }
        (
            ChatStatus::Running | ChatStatus::Interrupting | ChatStatus::RequiresAction,
            Busy::Queue,
        ) => SendOutcome::Queued {
            queue_id: cx.enqueue(&mut chat, parts, false).await?,
        },
    };
    cx.save(&mut chat, mv).await?;
    if let Some(key) = idempotency_key {
        cx.idem_remember(&owner, &send_key(chat_id, key), &outcome)
            .await?;
    }
    Ok(outcome)
}

pub(crate) async fn interrupt(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::Interrupt)?;
    match chat.status {
        ChatStatus::Running => {
            chat.status = ChatStatus::Interrupting;
            cx.save(&mut chat, mv).await?;
        }
        ChatStatus::RequiresAction => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            // A message queued behind the calls runs now; it must not be stranded.
            cx.next_or_idle(&mut chat).await?;
            cx.save(&mut chat, mv).await?;
        }
        // Idle or already stopping: nothing changes, so the call is idempotent.
        ChatStatus::Waiting | ChatStatus::Error | ChatStatus::Interrupting => {}
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

pub(crate) async fn submit_tool_results(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    results: Vec<ToolResultInput>,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::SubmitToolResults)?;
    check_budget(cx, &chat.owner).await?;
    check_size(cx.opts, &results)?;
    let pending: HashSet<&str> = chat
        .pending_tool_calls
        .iter()
        .map(|c| c.tool_call_id.as_str())
        .collect();
    let given: HashSet<&str> = results.iter().map(|r| r.tool_call_id.as_str()).collect();
    if given.len() != results.len() || given != pending {
        let mut want: Vec<&str> = pending.into_iter().collect();
        want.sort_unstable();
        return Err(StoreError::invalid(format!(
            "tool results must answer exactly the pending calls: {}",
            want.join(", ")
        )));
    }
    let now = cx.now;
    // Results in the order the model made the calls.
    let parts = chat
        .pending_tool_calls
        .iter()
        .filter_map(|call| {
            results
                .iter()
                .find(|r| r.tool_call_id == call.tool_call_id)
                .map(|r| {
                    Part::tool_result(
                        &call.tool_call_id,
                        &call.tool_name,
                        r.result.clone(),
                        r.is_error,
                        false,
                    )
                    .at(now)
                })
        })
        .collect();
    cx.insert_message(&mut chat, NewMessage::new(Role::Tool, parts))
        .await?;
    chat.pending_tool_calls.clear();
    chat.pending_deadline = None;
    chat.status = ChatStatus::Running;
    cx.save(&mut chat, mv).await?;
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Loads a chat with its queue for a queue transition, and finds the queued message.
async fn load_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
    transition: Transition,
) -> Result<(Chat, Move, usize)> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, transition)?;
    cx.load_queue(&mut chat).await?;
    let index = chat
        .queued
        .iter()
        .position(|q| q.id == queue_id)
        .ok_or(StoreError::not_found("queued message"))?;
    Ok((chat, mv, index))
}

pub(crate) async fn delete_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
) -> Result<Chat> {
    let (mut chat, mv, index) =
        load_queued(cx, chat_id, queue_id, Transition::DeleteQueued).await?;
    cx.ops.delete_queued(&queue_id.to_string()).await?;
    cx.forget_traces(&[queue_id.to_string()]).await?;
    chat.queued.remove(index);
    cx.save(&mut chat, mv).await?;
    Ok(chat)
}

pub(crate) async fn promote_queued(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    queue_id: QueueId,
) -> Result<Chat> {
    let (mut chat, mv, index) =
        load_queued(cx, chat_id, queue_id, Transition::PromoteQueued).await?;
    check_budget(cx, &chat.owner).await?;
    let mut item = chat.queued.remove(index);
    item.position = chat
        .queued
        .first()
        .map_or(item.position, |q| q.position.min(item.position) - 1);
    cx.ops
        .set_queued_position(&queue_id.to_string(), item.position)
        .await?;
    chat.queued.insert(0, item);
    match chat.status {
        ChatStatus::Running => chat.status = ChatStatus::Interrupting,
        ChatStatus::Interrupting => {}
        // Nothing is running: the promoted message starts now.
        ChatStatus::Waiting | ChatStatus::Error | ChatStatus::RequiresAction => {
            cx.answer_pending_with_errors(&mut chat, INTERRUPTED_BY_USER)
                .await?;
            cx.start_queue_head(&mut chat).await?;
            chat.last_error = None;
            chat.status = ChatStatus::Running;
        }
    }
    cx.save(&mut chat, mv).await?;
    Ok(chat)
}

pub(crate) async fn set_archived(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    archived: bool,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let t = if archived {
        Transition::Archive
    } else {
        Transition::Unarchive
    };
    let mv = check(&chat, t)?;
    if chat.archived != archived {
        chat.archived = archived;
        cx.save(&mut chat, mv).await?;
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Renames a chat or switches its model. The caller has checked the values; a new model
/// applies from the run's next model call.
pub(crate) async fn update_chat(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    update: ChatUpdate,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::UpdateChat)?;
    let title = update.title.filter(|t| chat.title.as_ref() != Some(t));
    let model = update.model.filter(|m| *m != chat.model);
    let system = update.system.filter(|s| chat.system.as_ref() != Some(s));
    if title.is_some() || model.is_some() || system.is_some() {
        if let Some(title) = title {
            chat.title = Some(title);
        }
        if let Some(model) = model {
            chat.model = model;
        }
        if let Some(system) = system {
            chat.system = Some(system);
        }
        cx.save(&mut chat, mv).await?;
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

pub(crate) async fn delete_chat(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<()> {
    let mut chat = cx.load(chat_id).await?;
    check(&chat, Transition::Delete)?;
    if cx.opts.trace_runs {
        cx.load_queue(&mut chat).await?;
        let mut ids: Vec<String> = chat.queued.iter().map(|q| q.id.to_string()).collect();
        ids.push(chat.id.to_string());
        cx.forget_traces(&ids).await?;
    }
    cx.ops.delete_chat(&chat.id.to_string()).await?;
    chat.version += 1;
    cx.notice(&chat, true);
    Ok(())
}

/// Asks for a compaction of an idle chat: it becomes runnable with the request flag set,
/// and the worker that claims it only summarises the history.
pub(crate) async fn request_compaction(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::RequestCompaction)?;
    check_budget(cx, &chat.owner).await?;
    chat.status = ChatStatus::Running;
    chat.compact_requested = true;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    cx.save(&mut chat, mv).await?;
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Continues the reply the user stopped: an idle chat whose last message is such a reply
/// ([`crate::stopped_reply`]) becomes runnable with nothing added, and the worker that claims
/// it finds the stopped reply at the end of the history and has the model carry it on.
pub(crate) async fn continue_reply(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::ContinueReply)?;
    check_budget(cx, &chat.owner).await?;
    let last = cx
        .ops
        .recent_messages(&chat.id.to_string(), 1)
        .await?
        .pop()
        .map(MessageCols::into_message)
        .transpose()?;
    let continuable =
        last.is_some_and(|m| crate::stopped_reply(m.role, m.interrupted, &m.parts).is_some());
    if !continuable {
        return Err(StoreError::NothingToContinue);
    }
    start_again(cx, &mut chat, mv).await?;
    Ok(chat)
}

/// Runs the failed turn of a chat in `error` again, with nothing added to the history.
pub(crate) async fn retry_run(cx: &mut Ctx<'_>, chat_id: ChatId) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::RetryRun)?;
    check_budget(cx, &chat.owner).await?;
    start_again(cx, &mut chat, mv).await?;
    Ok(chat)
}

/// Makes an idle chat runnable as it stands (unowned, the last error cleared).
async fn start_again(cx: &mut Ctx<'_>, chat: &mut Chat, mv: Move) -> Result<()> {
    chat.status = ChatStatus::Running;
    chat.last_error = None;
    chat.retry_state = None;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    cx.save(chat, mv).await?;
    cx.load_queue(chat).await
}
