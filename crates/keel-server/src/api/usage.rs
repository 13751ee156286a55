//! `GET /api/v1/usage`: the caller's tokens and cost, grouped, within a time range.

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use keel_store::{UsageGroup, UsageKey, UsageQuery, UsageTotals};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::error::ApiError;
use crate::api::extract::Caller;
use crate::api::state::AppState;

/// The query of `GET /usage`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(
    dead_code,
    reason = "describes the query; the handler reads the pairs to allow repeated keys"
)]
pub(super) struct UsageParams {
    /// `user`, `chat`, `model` or `day` (UTC); repeat it to group by several keys. Absent:
    /// one group of everything.
    #[param(inline)]
    group_by: Option<Vec<UsageKeyName>>,
    /// RFC 3339: steps committed at or after this time.
    from: Option<String>,
    /// RFC 3339: steps committed before this time.
    to: Option<String>,
}

/// A key usage is grouped by.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code, reason = "describes the values `group_by` takes")]
pub(super) enum UsageKeyName {
    User,
    Chat,
    Model,
    Day,
}

/// Token counts and cost of a set of model steps.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[schema(as = Usage)]
pub(crate) struct UsageView {
    /// Prompt tokens not read from a cache (cache writes included).
    pub input_tokens: i64,
    /// Prompt tokens read from the provider's cache.
    pub cached_input_tokens: i64,
    /// Output tokens, reasoning included.
    pub output_tokens: i64,
    /// The part of `output_tokens` spent on reasoning.
    pub reasoning_tokens: i64,
    /// US dollars at the prices in force when each step was committed; `null` when no
    /// step had a priced model.
    pub cost: Option<f64>,
}

impl From<&UsageTotals> for UsageView {
    fn from(t: &UsageTotals) -> Self {
        Self {
            input_tokens: t.input_tokens,
            cached_input_tokens: t.cached_input_tokens,
            output_tokens: t.output_tokens,
            reasoning_tokens: t.reasoning_tokens,
            cost: t.cost_nanos.map(keel_core::price::usd),
        }
    }
}

/// The values of a group's keys; only the keys grouped by are present.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = UsageGroupKey)]
pub(super) struct KeyView {
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// `YYYY-MM-DD`, UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    day: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = UsageGroup)]
pub(super) struct GroupView {
    key: KeyView,
    #[serde(flatten)]
    usage: UsageView,
}

impl From<UsageGroup> for GroupView {
    fn from(g: UsageGroup) -> Self {
        Self {
            key: KeyView {
                user: g.user,
                chat: g.chat.map(|c| c.to_string()),
                model: g.model,
                day: g.day,
            },
            usage: UsageView::from(&g.totals),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = UsageReport, example = json!({"groups": [{"key": {"model": "gpt-4.1"},
    "input_tokens": 1200, "cached_input_tokens": 800, "output_tokens": 300,
    "reasoning_tokens": 0, "cost": 0.0064}], "group_by": ["model"], "from": null, "to": null}))]
pub(super) struct UsageReport {
    groups: Vec<GroupView>,
    #[schema(value_type = Vec<String>)]
    group_by: Vec<UsageKey>,
    from: Option<String>,
    to: Option<String>,
}

/// A usage question as asked, before it names its user.
#[derive(Debug, PartialEq)]
pub(super) struct Asked {
    pub group_by: Vec<UsageKey>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// Reads the query's pairs; other parameters are ignored. The error says what is wrong.
pub(super) fn parse(pairs: &[(String, String)]) -> Result<Asked, String> {
    let mut asked = Asked {
        group_by: Vec::new(),
        from: None,
        to: None,
    };
    let time = |name: &str, value: &str| {
        DateTime::parse_from_rfc3339(value)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| format!("`{name}` must be an RFC 3339 time, e.g. 2026-01-31T00:00:00Z"))
    };
    for (name, value) in pairs {
        match name.as_str() {
            "group_by" => {
                let key = match value.as_str() {
                    "user" => UsageKey::User,
                    "chat" => UsageKey::Chat,
                    "model" => UsageKey::Model,
                    "day" => UsageKey::Day,
                    other => {
                        return Err(format!(
                            "`group_by` is `user`, `chat`, `model` or `day`, not `{other}`"
                        ));
                    }
                };
                if !asked.group_by.contains(&key) {
                    asked.group_by.push(key);
                }
            }
            "from" => asked.from = Some(time("from", value)?),
            "to" => asked.to = Some(time("to", value)?),
            _ => {}
        }
    }
    if let (Some(from), Some(to)) = (asked.from, asked.to)
        && from > to
    {
        return Err("`from` must not be after `to`".into());
    }
    Ok(asked)
}

#[utoipa::path(get, path = "/usage", tag = "usage", summary = "The caller's usage and cost",
    description = "Tokens and cost of the caller's committed model steps, summed per group. \
                   A caller sees only their own usage.",
    params(UsageParams),
    responses((status = 200, description = "Usage per group", body = UsageReport)))]
pub(super) async fn usage(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<UsageReport>, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::invalid(e.body_text()))?;
    let asked = parse(&pairs).map_err(ApiError::invalid)?;
    let groups = state
        .store
        .usage(&UsageQuery {
            user: caller.0,
            group_by: asked.group_by.clone(),
            from: asked.from,
            to: asked.to,
        })
        .await?;
    let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Ok(Json(UsageReport {
        groups: groups.into_iter().map(GroupView::from).collect(),
        group_by: asked.group_by,
        from: asked.from.map(stamp),
        to: asked.to.map(stamp),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn keys_repeat_and_times_are_rfc3339() {
        let asked = parse(&pairs(&[
            ("group_by", "model"),
            ("group_by", "day"),
            ("group_by", "model"),
            ("from", "2026-01-01T00:00:00+02:00"),
        ]))
        .unwrap();
        assert_eq!(asked.group_by, [UsageKey::Model, UsageKey::Day]);
        assert_eq!(
            asked.from.unwrap().to_rfc3339(),
            "2025-12-31T22:00:00+00:00"
        );
    }

    #[test]
    fn a_bad_key_time_or_range_is_refused() {
        assert!(parse(&pairs(&[("group_by", "week")])).is_err());
        assert!(parse(&pairs(&[("from", "yesterday")])).is_err());
        let reversed = pairs(&[
            ("from", "2026-02-01T00:00:00Z"),
            ("to", "2026-01-01T00:00:00Z"),
        ]);
        assert!(parse(&reversed).is_err());
    }
}
