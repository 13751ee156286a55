//! Transitions of periodic sweeps over many chats: stale leases, dead owners, overdue
//! client-side calls, and housekeeping purges.

use super::*;

pub(crate) async fn recover_stale(cx: &mut Ctx<'_>) -> Result<Vec<ChatId>> {
    let ids = cx.ops.stale_chats(ms(cx.now), SWEEP_LIMIT).await?;
    let now = cx.now;
    let mut done = Vec::new();
    for id in ids {
        let expired = |chat: &Chat| {
            chat.worker_id.is_some() && chat.lease_expires_at.is_some_and(|t| t < now)
        };
        done.extend(release(cx, &id, expired).await?);
    }
    Ok(done)
}

/// Takes the lease off the chat `id` when `held` (read under the row lock) says its holder is
/// gone: no owner, no lease, and the numbers it never flushed skipped. `None` when the chat is
/// gone, may not recover, or is held after all.
async fn release(
    cx: &mut Ctx<'_>,
    id: &str,
    held: impl Fn(&Chat) -> bool,
) -> Result<Option<ChatId>> {
    let Some(cols) = cx.ops.lock_chat(id).await? else {
        return Ok(None);
    };
    let mut chat = cols.into_chat()?;
    let Some(mv) = may(&chat, Transition::RecoverStale) else {
        return Ok(None);
    };
    if !held(&chat) {
        return Ok(None);
    }
    chat.worker_id = None;
    chat.lease_expires_at = None;
    skip_unflushed_numbers(&mut chat);
    cx.save(&mut chat, mv).await?;
    Ok(Some(chat.id))
}

/// The distinct owners of chats whose token starts with `prefix` (a write transaction: the
/// listing locks rows as the other sweeps do).
pub(crate) async fn chat_owners(cx: &mut Ctx<'_>, prefix: &str) -> Result<Vec<String>> {
    let owned = cx.ops.owned_with_prefix(prefix, SWEEP_LIMIT).await?;
    let mut owners: Vec<String> = owned.into_iter().map(|(_, owner)| owner).collect();
    owners.sort_unstable();
    owners.dedup();
    Ok(owners)
}

/// Releases the chats held by exactly these owner tokens (processes known to be gone),
/// without waiting for their leases to expire.
pub(crate) async fn release_owners(cx: &mut Ctx<'_>, owners: &[String]) -> Result<Vec<ChatId>> {
    let mut done = Vec::new();
    for owner in owners {
        for (id, held_by) in cx.ops.owned_with_prefix(owner, SWEEP_LIMIT).await? {
            if held_by != *owner {
                continue;
            }
            let by_owner = |chat: &Chat| chat.worker_id.as_deref() == Some(owner.as_str());
            done.extend(release(cx, &id, by_owner).await?);
        }
    }
    Ok(done)
}

pub(crate) async fn expire_pending_actions(cx: &mut Ctx<'_>) -> Result<Vec<ChatId>> {
    let ids = cx.ops.expired_actions(ms(cx.now), SWEEP_LIMIT).await?;
    let mut done = Vec::new();
    for id in ids {
        let Some(cols) = cx.ops.lock_chat(&id).await? else {
            continue;
        };
        let mut chat = cols.into_chat()?;
        let due = chat.pending_deadline.is_some_and(|t| t < cx.now);
        let Some(mv) = may(&chat, Transition::ExpirePendingAction) else {
            continue;
        };
        if !due {
            continue;
        }
        cx.answer_pending_with_errors(&mut chat, DEADLINE_PASSED)
            .await?;
        // A message queued behind the calls runs now; it must not be stranded.
        cx.next_or_idle(&mut chat).await?;
        cx.save(&mut chat, mv).await?;
        done.push(chat.id);
    }
    Ok(done)
}

pub(crate) async fn purge_idempotency_keys(cx: &mut Ctx<'_>) -> Result<u64> {
    let before = ms(cx.now - cx.opts.idempotency_ttl);
    cx.ops.idem_purge(before).await
}

pub(crate) async fn purge_tool_records(cx: &mut Ctx<'_>) -> Result<u64> {
    let before = ms(cx.now - cx.opts.idempotency_ttl);
    cx.ops.purge_tool_records(before).await
}

/// A lease period is ample for a follower woken by the commit to read what it missed.
pub(crate) async fn purge_settled_logs(cx: &mut Ctx<'_>) -> Result<u64> {
    let before = ms(cx.now - cx.opts.lease_ttl);
    cx.ops.purge_settled_logs(before).await
}
