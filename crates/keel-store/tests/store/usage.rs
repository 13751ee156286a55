//! Usage records and budgets, on both backends: a committed step is recorded once with its
//! charge, sums group and range as asked, and a used-up budget refuses a new run.

use std::sync::Arc;

use crate::common::*;
use chrono::Duration;
use keel_core::{Clock as _, Usage};
use keel_store::{
    Budget, Busy, Charge, NewMessage, Period, Store, StoreError, UsageKey, UsageQuery,
};

both_backends!(
    a_committed_step_is_recorded_once_with_its_charge,
    usage_groups_by_chat_model_and_day_within_a_range,
    a_used_up_budget_refuses_a_new_run_and_writes_nothing,
);

const STEP: Usage = Usage {
    input_tokens: 100,
    output_tokens: 40,
    cache_read_tokens: 30,
    cache_write_tokens: 5,
    reasoning_tokens: 10,
};

/// A reply reporting [`STEP`], charged to `model` at `cost_nanos`.
fn charged(model: &str, cost_nanos: Option<i64>) -> NewMessage {
    NewMessage {
        usage: Some(STEP),
        charge: Some(Charge {
            model: model.into(),
            cost_nanos,
        }),
        ..assistant("reply")
    }
}

/// Runs one step of a new chat of alice's, charged as given, and ends the run.
async fn spend(s: &Arc<dyn Store>, model: &str, cost: Option<i64>) -> keel_store::Chat {
    let chat = create(s, "hi").await;
    let lease = claim(s, "w", chat.id).await;
    s.commit_step(&lease, vec![charged(model, cost)])
        .await
        .unwrap();
    s.finish_run(&lease).await.unwrap();
    chat
}

fn query(group_by: &[UsageKey]) -> UsageQuery {
    UsageQuery {
        user: "alice".into(),
        group_by: group_by.to_vec(),
        from: None,
        to: None,
    }
}

async fn a_committed_step_is_recorded_once_with_its_charge(db: TestDb) {
    let s = &db.store;
    let chat = spend(s, "m1", Some(1_500)).await;
    let totals = s.chat_usage(chat.id).await.unwrap();
    // Cache writes count as input; reads as cached input.
    assert_eq!(
        (
            totals.input_tokens,
            totals.cached_input_tokens,
            totals.output_tokens
        ),
        (105, 30, 40)
    );
    assert_eq!(
        (totals.reasoning_tokens, totals.cost_nanos),
        (10, Some(1_500))
    );
    // A tool message or a step without usage adds nothing.
    let lease = {
        s.send_message(chat.id, None, text("again"), Busy::Queue, None)
            .await
            .unwrap();
        claim(s, "w", chat.id).await
    };
    s.commit_step(&lease, vec![assistant("no usage reported")])
        .await
        .unwrap();
    assert_eq!(s.chat_usage(chat.id).await.unwrap(), totals);
    // The record outlives its chat; another user sees none of it.
    s.delete_chat(chat.id).await.unwrap();
    let all = s.usage(&query(&[])).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].totals, totals);
    let bob = UsageQuery {
        user: "bob".into(),
        ..query(&[])
    };
    assert!(s.usage(&bob).await.unwrap().is_empty());
}

async fn usage_groups_by_chat_model_and_day_within_a_range(db: TestDb) {
    let s = &db.store;
    let first = spend(s, "m1", Some(1_000)).await;
    spend(s, "m2", None).await;
    db.clock.advance(Duration::days(1));
    spend(s, "m1", Some(3_000)).await;

    let by_model = s.usage(&query(&[UsageKey::Model])).await.unwrap();
    let models: Vec<_> = by_model
        .iter()
        .map(|g| {
            (
                g.model.clone().unwrap(),
                g.totals.output_tokens,
                g.totals.cost_nanos,
            )
        })
        .collect();
    assert_eq!(
        models,
        [("m1".into(), 80, Some(4_000)), ("m2".to_owned(), 40, None)]
    );
    assert!(by_model.iter().all(|g| g.chat.is_none() && g.day.is_none()));

    let by_day = s
        .usage(&query(&[UsageKey::Day, UsageKey::User]))
        .await
        .unwrap();
    let days: Vec<_> = by_day
        .iter()
        .map(|g| {
            (
                g.day.clone().unwrap(),
                g.user.clone().unwrap(),
                g.totals.input_tokens,
            )
        })
        .collect();
    assert_eq!(
        days,
        [
            ("2026-01-02".into(), "alice".into(), 210),
            ("2026-01-03".to_owned(), "alice".to_owned(), 105)
        ]
    );

    let day_two = db.clock.now() - Duration::hours(1);
    let later = UsageQuery {
        from: Some(day_two),
        ..query(&[UsageKey::Chat])
    };
    let groups = s.usage(&later).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_ne!(groups[0].chat, Some(first.id));
    let earlier = UsageQuery {
        to: Some(day_two),
        ..query(&[UsageKey::Chat])
    };
    assert_eq!(s.usage(&earlier).await.unwrap().len(), 2);
}

async fn a_used_up_budget_refuses_a_new_run_and_writes_nothing(db: TestDb) {
    let s = &db.store;
    s.upsert_user("alice", "token-a").await.unwrap();
    let budget = Budget {
        tokens: Some(300),
        cost: None,
        per: Period::Day,
    };
    assert!(s.set_budget("alice", Some(budget)).await.unwrap());
    assert!(!s.set_budget("nobody", Some(budget)).await.unwrap());
    assert_eq!(s.user_budget("alice").await.unwrap(), Some(budget));
    let empty = Budget {
        tokens: None,
        ..budget
    };
    assert!(matches!(
        s.set_budget("alice", Some(empty)).await,
        Err(StoreError::InvalidInput(_))
    ));

    // 175 tokens: below the limit, a run may start; 350: none may.
    let chat = spend(s, "m", None).await;
    assert!(s.budget_refusal("alice").await.unwrap().is_none());
    spend(s, "m", None).await;
    assert!(s.budget_refusal("alice").await.unwrap().is_some());
    let before = s.get_chat(chat.id).await.unwrap();
    let refused = s
        .send_message(chat.id, None, text("more"), Busy::Queue, None)
        .await;
    assert!(
        matches!(refused, Err(StoreError::BudgetExceeded(_))),
        "{refused:?}"
    );
    assert!(matches!(
        s.create_chat(keel_store::NewChat {
            owner: "alice".into(),
            model: "m".into(),
            parts: text("new"),
            ..keel_store::NewChat::default()
        })
        .await,
        Err(StoreError::BudgetExceeded(_))
    ));
    assert_eq!(s.get_chat(chat.id).await.unwrap(), before);
    assert_eq!(
        s.list_chats(Some("alice"), None, 10).await.unwrap().len(),
        2
    );

    // The next day is a new period.
    db.clock.advance(Duration::days(1));
    assert!(s.budget_refusal("alice").await.unwrap().is_none());
    s.send_message(chat.id, None, text("more"), Busy::Queue, None)
        .await
        .unwrap();
}
