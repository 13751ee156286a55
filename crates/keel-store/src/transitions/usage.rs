//! What transitions record of usage and check of budgets.

use super::*;
use crate::ops::UsageCols;
use crate::usage::{Budget, Exceeded, Spent, counted, decide};

/// Numbers a step's messages like [`Ctx::number_messages`], with the usage record of each
/// message that reports usage, charged to `chat`'s owner.
pub(crate) fn number_charged(
    cx: &Ctx<'_>,
    chat: &mut Chat,
    messages: Vec<NewMessage>,
) -> Result<(Vec<MessageId>, Vec<MessageCols>, Vec<UsageCols>)> {
    let charged: Vec<_> = messages
        .iter()
        .map(|m| {
            let usage = m.usage.filter(|u| !u.is_zero())?;
            let charge = m.charge.clone();
            Some((usage, charge))
        })
        .collect();
    let (ids, rows) = cx.number_messages(chat, messages)?;
    let records = ids
        .iter()
        .zip(charged)
        .filter_map(|(id, charged)| {
            let (usage, charge) = charged?;
            Some(UsageCols {
                chat_id: chat.id.to_string(),
                message_id: *id,
                user_name: chat.owner.clone(),
                model: charge
                    .as_ref()
                    .map_or_else(|| chat.model.clone(), |c| c.model.clone()),
                recorded_at: ms(cx.now),
                counts: counted(&usage),
                cost_nanos: charge.and_then(|c| c.cost_nanos),
            })
        })
        .collect();
    Ok((ids, rows, records))
}

/// Why `owner` may not start a run now, if their budget says so.
pub(crate) async fn budget_refusal(
    ops: &mut dyn TxOps,
    owner: &str,
    now: DateTime<Utc>,
) -> Result<Option<Exceeded>> {
    let Some(Some(text)) = ops.user_budget(owner).await? else {
        return Ok(None);
    };
    let budget: Budget = from_json("users.budget", &text)?;
    let (start, resets) = budget.per.bounds(now);
    let (tokens, cost) = ops.usage_spent(owner, ms(start)).await?;
    let spent = Spent {
        tokens: u64::try_from(tokens).unwrap_or(0),
        cost_nanos: cost.unwrap_or(0),
    };
    Ok(decide(&budget, spent, resets).err())
}

/// Refuses a transition that would start a run for an owner whose budget is used up,
/// before it writes anything.
pub(crate) async fn check_budget(cx: &mut Ctx<'_>, owner: &str) -> Result<()> {
    match budget_refusal(&mut *cx.ops, owner, cx.now).await? {
        Some(refused) => Err(StoreError::BudgetExceeded(refused.message)),
        None => Ok(()),
    }
}

/// Sets or clears a user's budget; `false` when there is no such user.
pub(crate) async fn set_budget(
    cx: &mut Ctx<'_>,
    name: &str,
    budget: Option<&Budget>,
) -> Result<bool> {
    if let Some(why) = budget.and_then(Budget::invalid) {
        return Err(StoreError::invalid(why));
    }
    let text = budget.map(|b| to_json("users.budget", b)).transpose()?;
    cx.ops.set_user_budget(name, text.as_deref()).await
}
