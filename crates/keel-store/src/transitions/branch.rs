//! Transitions a client starts through the HTTP API that change a chat's current branch:
//! an edit (a sibling of a user message), a regenerate (a sibling of a reply) and a switch
//! to another branch. None of them removes a message; the tree's shape is decided by the
//! pure functions of [`crate::tree`].
//!
//! A change of the current branch takes the next event number (`branch_seq`) and numbers
//! the messages of the new branch above it, in order: a client that follows the chat's
//! events drops what it shows at the `branch` event and gets the whole branch after it,
//! and a client that resumes from an older position gets the same. The history version
//! grows, which fences any run that still works on the old branch.

use super::*;
use crate::tree::{Node, Tree};

impl Ctx<'_> {
    /// The chat's message tree.
    async fn load_tree(&mut self, chat: &Chat) -> Result<Tree> {
        let rows = self.ops.tree(&chat.id.to_string()).await?;
        let nodes = rows
            .into_iter()
            .map(crate::rows::tree_node)
            .collect::<Result<Vec<Node>>>()?;
        Ok(Tree::new(nodes))
    }

    /// Makes `path` (from a first message on) the current branch, ending at its last
    /// message. An empty path leaves no message on it: the next one starts a new first
    /// message (an edit of the chat's first message).
    async fn make_current(&mut self, chat: &mut Chat, path: &[MessageId]) -> Result<()> {
        chat.event_seq += 1;
        chat.branch_seq = chat.event_seq;
        let numbered: Vec<(MessageId, i64)> = path
            .iter()
            .map(|id| {
                chat.event_seq += 1;
                (*id, chat.event_seq)
            })
            .collect();
        self.ops.set_branch(&chat.id.to_string(), &numbered).await?;
        chat.leaf_id = path.last().copied().unwrap_or(0);
        chat.history_version += 1;
        Ok(())
    }

    /// Answers, as interrupted by the user, the tool calls at the end of the current
    /// branch that have no result: a branch is never left (by an edit) or made current (by
    /// a switch) with calls nobody will answer. The client-side calls of a chat waiting
    /// for results are such calls, and so are those of a step committed by a run the edit
    /// supersedes before it handed them over.
    pub(super) async fn close_open_calls(&mut self, chat: &mut Chat) -> Result<()> {
        let recent = self
            .ops
            .recent_messages(&chat.id.to_string(), 2)
            .await?
            .into_iter()
            .map(MessageCols::into_message)
            .collect::<Result<Vec<StoredMessage>>>()?;
        let tail: Vec<(Role, &[Part])> = recent
            .iter()
            .map(|m| (m.role, m.parts.as_slice()))
            .collect();
        let open = crate::orphans::open_calls_at_end(&tail);
        chat.pending_tool_calls.clear();
        chat.pending_deadline = None;
        if open.is_empty() {
            return Ok(());
        }
        let now = self.now;
        let results = open
            .iter()
            .map(|(id, name)| {
                Part::tool_result(
                    id,
                    name,
                    Value::String(INTERRUPTED_BY_USER.to_owned()),
                    true,
                    false,
                )
                .at(now)
            })
            .collect();
        self.insert_message(chat, NewMessage::new(Role::Tool, results))
            .await?;
        Ok(())
    }
}

/// A message of the chat that clients see (summaries are not among them), or not found.
fn listed(tree: &Tree, id: MessageId) -> Result<&Node> {
    tree.get(id)
        .filter(|node| node.kind != MessageKind::Summary)
        .ok_or(StoreError::not_found("message"))
}

/// Edits a user message: the new content becomes a sibling of it, the current branch runs
/// through the new message, and a run starts on it. The edited message and everything
/// after it stay stored on their own branch. A run in progress is superseded; the queue,
/// live log, checkpoint and tool records of the old branch are cleared.
pub(crate) async fn edit_message(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    message_id: MessageId,
    parts: Vec<Part>,
) -> Result<Chat> {
    check_content(cx.opts, &parts)?;
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::EditMessage)?;
    check_budget(cx, &chat.owner).await?;
    let tree = cx.load_tree(&chat).await?;
    let edited = listed(&tree, message_id)?;
    if edited.role != Role::User {
        return Err(StoreError::invalid("only user messages can be edited"));
    }
    let prefix = edited.parent.map(|p| tree.path_to(p)).unwrap_or_default();
    let id = chat.id.to_string();
    cx.ops.clear_queue(&id).await?;
    cx.ops.clear_live(&id).await?;
    cx.ops.delete_checkpoint(&id).await?;
    cx.ops.clear_tool_records(&id).await?;
    if chat.worker_id.is_some() {
        // The superseded owner may have sent clients numbered parts its log never got:
        // the new branch and its reply are numbered above all of them.
        skip_unflushed_numbers(&mut chat);
    }
    cx.close_open_calls(&mut chat).await?;
    cx.make_current(&mut chat, &prefix).await?;
    cx.insert_user(&mut chat, parts).await?;
    // Released, so that any worker claims the chat afresh on the new branch.
    chat.status = ChatStatus::Running;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.pending_tool_calls.clear();
    chat.pending_deadline = None;
    chat.last_error = None;
    chat.retry_state = None;
    chat.compact_requested = false;
    chat.queued.clear();
    cx.save(&mut chat, mv).await?;
    Ok(chat)
}

/// Regenerates a reply (given as the reply or as the user message before it): the branch
/// ends at that user message again and a run writes a new reply beside the old one.
pub(crate) async fn regenerate(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    message_id: MessageId,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::Regenerate)?;
    check_budget(cx, &chat.owner).await?;
    let tree = cx.load_tree(&chat).await?;
    let node = listed(&tree, message_id)?;
    if !matches!(node.role, Role::User | Role::Assistant) {
        return Err(StoreError::invalid(
            "only a reply or the user message before it can be regenerated",
        ));
    }
    let from = tree
        .regenerate_from(message_id)
        .ok_or_else(|| StoreError::invalid("no user message precedes this reply"))?;
    let path = tree.path_to(from);
    cx.make_current(&mut chat, &path).await?;
    chat.status = ChatStatus::Running;
    chat.worker_id = None;
    chat.lease_expires_at = None;
    chat.last_error = None;
    chat.retry_state = None;
    cx.save(&mut chat, mv).await?;
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}

/// Makes the branch through a message (to its newest leaf) the current one. Nothing
/// changes when it already is.
pub(crate) async fn switch_branch(
    cx: &mut Ctx<'_>,
    chat_id: ChatId,
    message_id: MessageId,
) -> Result<Chat> {
    let mut chat = cx.load(chat_id).await?;
    let mv = check(&chat, Transition::SwitchBranch)?;
    let tree = cx.load_tree(&chat).await?;
    listed(&tree, message_id)?;
    let path = tree.branch_through(message_id);
    if path.last() != Some(&chat.leaf_id) {
        cx.make_current(&mut chat, &path).await?;
        // A branch left with calls open before edits closed them comes back closed.
        cx.close_open_calls(&mut chat).await?;
        cx.save(&mut chat, mv).await?;
    }
    cx.load_queue(&mut chat).await?;
    Ok(chat)
}
