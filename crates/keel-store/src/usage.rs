//! Usage records, their sums, and the budget decision.
//!
//! Every committed step that reported usage is one record: its tokens and its cost at the
//! price in force when it was committed. A step is committed once, so its tokens are
//! counted once however many attempts (retries, recoveries, a resume by another process)
//! it took; an attempt that was cut before the provider reported usage adds nothing.
//!
//! A budget limits what a user's records add up to within the current period (a UTC day
//! or calendar month):
//!
//! | spent so far | a request that starts a run | a run after a committed step |
//! | --- | --- | --- |
//! | below every limit | allowed | goes on |
//! | at or above a limit | `BudgetExceeded` (HTTP 429) | stops, `last_error` `budget_exceeded` |

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use keel_core::Usage;
use keel_core::price::usd;
use serde::{Deserialize, Serialize};

use crate::ops::UsageRow;
use crate::types::ChatId;

/// How long a budget's period lasts; periods start at midnight UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    /// The start of the period `now` is in, and the start of the next one.
    pub fn bounds(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let day = now.date_naive();
        match self {
            Period::Day => {
                let start = Utc.from_utc_datetime(&day.and_time(chrono::NaiveTime::MIN));
                (start, start + Duration::days(1))
            }
            Period::Month => {
                let first = |y: i32, m: u32| {
                    chrono::NaiveDate::from_ymd_opt(y, m, 1)
                        .map(|d| Utc.from_utc_datetime(&d.and_time(chrono::NaiveTime::MIN)))
                };
                let (y, m) = (day.year(), day.month());
                let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                // Day 1 of a month that `now` is in always exists.
                let start = first(y, m).unwrap_or(now);
                (start, first(next.0, next.1).unwrap_or(now))
            }
        }
    }
}

/// A user's spending limit: tokens, dollars, or both, per period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Input (cached or not) plus output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// US dollars, at the prices of the models used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    pub per: Period,
}

impl Budget {
    /// Why this budget cannot be stored, if it cannot.
    pub fn invalid(&self) -> Option<&'static str> {
        if self.tokens.is_none() && self.cost.is_none() {
            return Some("a budget needs `tokens`, `cost` or both");
        }
        if self.cost.is_some_and(|c| !c.is_finite() || c < 0.0) {
            return Some("a budget's `cost` must be a non-negative number of dollars");
        }
        None
    }
}

/// What a user spent within a period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub tokens: u64,
    pub cost_nanos: i64,
}

/// A budget's refusal, with what the client is told.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeded {
    pub message: String,
}

/// Whether a user who spent `spent` this period may start (or go on with) a run.
pub fn decide(budget: &Budget, spent: Spent, resets_at: DateTime<Utc>) -> Result<(), Exceeded> {
    let per = match budget.per {
        Period::Day => "day",
        Period::Month => "month",
    };
    let resets = resets_at.format("%Y-%m-%dT%H:%M:%SZ");
    if let Some(limit) = budget.tokens
        && spent.tokens >= limit
    {
        return Err(Exceeded {
            message: format!(
                "the token budget of {limit} per {per} is used up ({} tokens); it resets at \
                 {resets}",
                spent.tokens
            ),
        });
    }
    if let Some(limit) = budget.cost
        && usd(spent.cost_nanos) >= limit
    {
        return Err(Exceeded {
            message: format!(
                "the budget of ${limit} per {per} is used up (${:.6}); it resets at {resets}",
                usd(spent.cost_nanos)
            ),
        });
    }
    Ok(())
}

/// One step's counts as the usage API shows them: cache writes are input tokens and cache
/// reads are the cached input.
pub fn counted(usage: &Usage) -> [i64; 4] {
    let c = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    [
        c(usage.input_tokens.saturating_add(usage.cache_write_tokens)),
        c(usage.cache_read_tokens),
        c(usage.output_tokens),
        c(usage.reasoning_tokens),
    ]
}

/// What usage is grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageKey {
    User,
    Chat,
    Model,
    /// The UTC day a step was committed.
    Day,
}

/// A question to the usage records of one user.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageQuery {
    pub user: String,
    pub group_by: Vec<UsageKey>,
    /// Records committed at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Records committed before this time.
    pub to: Option<DateTime<Utc>>,
}

/// Summed counts of a set of records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub input_tokens: i64,
    pub cached_input_tokens: i64,
    pub output_tokens: i64,
    pub reasoning_tokens: i64,
    /// `None` when no record of the set had a price.
    pub cost_nanos: Option<i64>,
}

/// One group of a [`UsageQuery`]: the values of its keys (those not grouped by are `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct UsageGroup {
    pub user: Option<String>,
    pub chat: Option<ChatId>,
    pub model: Option<String>,
    /// The day as `YYYY-MM-DD` (UTC).
    pub day: Option<String>,
    pub totals: UsageTotals,
}

/// The SQL of the user, chat, model and day columns of a grouped read: the column when
/// grouped by, else a typed `NULL`.
pub(crate) fn key_sql(group_by: &[UsageKey]) -> [&'static str; 4] {
    let pick = |key, column, null| {
        if group_by.contains(&key) {
            column
        } else {
            null
        }
    };
    [
        pick(UsageKey::User, "user_name", "CAST(NULL AS TEXT)"),
        pick(UsageKey::Chat, "chat_id", "CAST(NULL AS TEXT)"),
        pick(UsageKey::Model, "model", "CAST(NULL AS TEXT)"),
        pick(
            UsageKey::Day,
            "(recorded_at / 86400000)",
            "CAST(NULL AS BIGINT)",
        ),
    ]
}

/// A grouped row as a group.
pub(crate) fn group_of(row: UsageRow) -> crate::error::Result<UsageGroup> {
    let (user, chat, model, day, input, cached, output, reasoning, cost) = row;
    let chat = chat
        .map(|c| crate::rows::uuid("usage_records.chat_id", &c))
        .transpose()?;
    let day = day
        .and_then(|d| DateTime::<Utc>::from_timestamp_millis(d.saturating_mul(86_400_000)))
        .map(|d| d.format("%Y-%m-%d").to_string());
    Ok(UsageGroup {
        user,
        chat,
        model,
        day,
        totals: totals_of((input, cached, output, reasoning, cost)),
    })
}

/// Summed columns as totals.
pub(crate) fn totals_of(
    (input, cached, output, reasoning, cost): (i64, i64, i64, i64, Option<i64>),
) -> UsageTotals {
    UsageTotals {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        reasoning_tokens: reasoning,
        cost_nanos: cost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn periods_start_at_midnight_utc() {
        let (start, end) = Period::Day.bounds(at("2026-03-31T17:45:00Z"));
        assert_eq!(
            (start, end),
            (at("2026-03-31T00:00:00Z"), at("2026-04-01T00:00:00Z"))
        );
        let (start, end) = Period::Month.bounds(at("2026-12-31T23:59:59Z"));
        assert_eq!(
            (start, end),
            (at("2026-12-01T00:00:00Z"), at("2027-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_run_may_start_below_the_limit_and_not_at_it() {
        let budget = Budget {
            tokens: Some(100),
            cost: None,
            per: Period::Day,
        };
        let reset = at("2026-01-02T00:00:00Z");
        let spent = |tokens| Spent {
            tokens,
            cost_nanos: 0,
        };
        assert!(decide(&budget, spent(99), reset).is_ok());
        let refused = decide(&budget, spent(100), reset).unwrap_err();
        assert!(
            refused.message.contains("100 per day"),
            "{}",
            refused.message
        );
        assert!(refused.message.contains("2026-01-02T00:00:00Z"));
    }

    #[test]
    fn either_limit_refuses() {
        let budget = Budget {
            tokens: Some(1_000),
            cost: Some(0.5),
            per: Period::Month,
        };
        let reset = at("2026-02-01T00:00:00Z");
        let spent = |tokens, cost_nanos| Spent { tokens, cost_nanos };
        assert!(decide(&budget, spent(10, 499_999_999), reset).is_ok());
        assert!(decide(&budget, spent(10, 500_000_000), reset).is_err());
        assert!(decide(&budget, spent(1_000, 0), reset).is_err());
    }

    #[test]
    fn a_budget_without_a_limit_is_invalid() {
        let empty = Budget {
            tokens: None,
            cost: None,
            per: Period::Day,
        };
        assert!(empty.invalid().is_some());
        let negative = Budget {
            cost: Some(-1.0),
            ..empty
        };
        assert!(negative.invalid().is_some());
    }

    #[test]
    fn only_the_keys_grouped_by_are_columns() {
        let keys = key_sql(&[UsageKey::Day, UsageKey::Model]);
        assert_eq!(keys[0], "CAST(NULL AS TEXT)");
        assert_eq!(keys[2], "model");
        assert!(keys[3].contains("recorded_at"));
        let group = group_of((None, None, None, Some(20_454), 1, 2, 3, 4, None)).unwrap();
        assert_eq!(group.day.as_deref(), Some("2026-01-01"));
    }

    #[test]
    fn cache_writes_count_as_input() {
        let usage = Usage {
            input_tokens: 10,
            cache_write_tokens: 5,
            cache_read_tokens: 7,
            output_tokens: 3,
            reasoning_tokens: 1,
        };
        assert_eq!(counted(&usage), [15, 7, 3, 1]);
    }
}
