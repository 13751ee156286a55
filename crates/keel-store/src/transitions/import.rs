//! Importing a chat: a whole message tree from an export, written in one transaction as a
//! new chat that waits for its owner's next message (`import chat`).
//!
//! The tree keeps the ids, links and timestamps it was exported with, so an export of the
//! imported chat equals the export it came from but for the chat's id. What an export does
//! not carry starts afresh: the event sequence (every message numbered in id order), the
//! history version, no queue, no run state. Nothing is written unless every check passes.

use super::*;
use crate::tree::check_links;

pub(crate) async fn import_chat(cx: &mut Ctx<'_>, req: ImportChat) -> Result<Chat> {
    check_imported(cx.opts, &req)?;
    let created = Transition::ImportChat.created_status();
    let status = created.ok_or_else(|| StoreError::invalid("import creates no chat"))?;
    let mut chat = Chat {
        id: Uuid::new_v4(),
        owner: req.owner,
        title: req.title,
        model: req.model,
        status,
        archived: req.archived,
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
        created_at: req.created_at,
        updated_at: cx.now,
        compact_requested: false,
        leaf_id: req.leaf_id,
        branch_seq: 0,
        queued: Vec::new(),
    };
    cx.ops.insert_chat(&ChatCols::from_chat(&chat)?).await?;
    let mut rows = Vec::with_capacity(req.messages.len());
    let mut numbered = std::collections::HashMap::new();
    for message in req.messages {
        chat.event_seq += 1;
        chat.last_message_id = message.id;
        numbered.insert(message.id, (message.parent_id, chat.event_seq));
        rows.push(MessageCols::from_message(&StoredMessage {
            chat_id: chat.id,
            content_version: 1,
            event_seq: chat.event_seq,
            siblings: Vec::new(),
            ..message
        })?);
    }
    cx.ops.insert_messages(&rows).await?;
    // Ids grow along every path (checked), so the walk from the leaf ends and the branch's
    // messages keep their numbers in order.
    let mut path = Vec::new();
    let mut at = Some(chat.leaf_id);
    while let Some(id) = at {
        let Some((parent, seq)) = numbered.get(&id) else {
            break;
        };
        path.push((id, *seq));
        at = *parent;
    }
    path.reverse();
    cx.ops.set_branch(&chat.id.to_string(), &path).await?;
    // A chat exported while it waited for tool results (or mid-run) ends in calls no run of
    // this chat will answer: they are answered as interrupted, as an edit would.
    cx.close_open_calls(&mut chat).await?;
    cx.ops.update_chat(&ChatCols::from_chat(&chat)?).await?;
    cx.notice_with(
        &chat,
        Noticed {
            listing: true,
            ..Noticed::default()
        },
    );
    Ok(chat)
}

/// Refuses a chat Keel would not have written: a broken tree, a message whose role does
/// not fit its kind, an empty message, oversize tool definitions.
fn check_imported(opts: &StoreOptions, req: &ImportChat) -> Result<()> {
    let links: Vec<(MessageId, Option<MessageId>)> =
        req.messages.iter().map(|m| (m.id, m.parent_id)).collect();
    check_links(&links, req.leaf_id).map_err(StoreError::invalid)?;
    check_size(opts, &req.tools)?;
    for (i, message) in req.messages.iter().enumerate() {
        let fits = match message.kind {
            MessageKind::Normal => {
                matches!(message.role, Role::User | Role::Assistant | Role::Tool)
            }
            MessageKind::Summary => message.role == Role::Assistant,
            MessageKind::CompactionNotice => message.role == Role::System,
        };
        if !fits {
            return Err(StoreError::invalid(format!(
                "messages[{i}]: a {} message cannot be of role {}",
                message.kind.as_str(),
                message.role.as_str()
            )));
        }
        // No limit per message: a reply the model wrote may be longer than what a client
        // may send, and the request's body limit bounds the whole chat.
        if message.parts.is_empty() {
            return Err(StoreError::invalid(format!(
                "messages[{i}]: a message needs at least one part"
            )));
        }
    }
    Ok(())
}
