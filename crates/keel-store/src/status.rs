//! Chat statuses, the transitions between them and the one table of allowed moves.
//!
//! The table answers only "may this transition start from this status"; what each
//! transition then writes lives in [`crate::transitions`]. `None` as the source status
//! means "no chat yet", from which only [`Transition::CreateChat`] may start.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A chat's lifecycle status, as the public contract names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatStatus {
    Waiting,
    Running,
    Interrupting,
    RequiresAction,
    Error,
}

impl ChatStatus {
    pub const ALL: [ChatStatus; 5] = [
        ChatStatus::Waiting,
        ChatStatus::Running,
        ChatStatus::Interrupting,
        ChatStatus::RequiresAction,
        ChatStatus::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChatStatus::Waiting => "waiting",
            ChatStatus::Running => "running",
            ChatStatus::Interrupting => "interrupting",
            ChatStatus::RequiresAction => "requires_action",
            ChatStatus::Error => "error",
        }
    }

    /// Whether a worker should be generating for the chat.
    pub fn is_runnable(self) -> bool {
        matches!(self, ChatStatus::Running | ChatStatus::Interrupting)
    }

    /// Whether nothing is in progress: a new message starts a run right away.
    pub fn is_idle(self) -> bool {
        matches!(self, ChatStatus::Waiting | ChatStatus::Error)
    }
}

impl fmt::Display for ChatStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored status string that is not one of [`ChatStatus`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown chat status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for ChatStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChatStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// Everything that changes a chat, from the API and from workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transition {
    CreateChat,
    SendMessage,
    EditMessage,
    Interrupt,
    SubmitToolResults,
    DeleteQueued,
    PromoteQueued,
    Archive,
    Unarchive,
    Delete,
    Acquire,
    RenewLease,
    AppendLiveParts,
    RecordTool,
    SetRetryState,
    CommitStep,
    FinishInterruption,
    FinishRun,
    FailRun,
    EnterRequiresAction,
    ReleaseOnShutdown,
    RecoverStale,
    ExpirePendingAction,
    RequestCompaction,
    CommitSummary,
}

impl Transition {
    pub const ALL: [Transition; 25] = [
        Transition::CreateChat,
        Transition::SendMessage,
        Transition::EditMessage,
        Transition::Interrupt,
        Transition::SubmitToolResults,
        Transition::DeleteQueued,
        Transition::PromoteQueued,
        Transition::Archive,
        Transition::Unarchive,
        Transition::Delete,
        Transition::Acquire,
        Transition::RenewLease,
        Transition::AppendLiveParts,
        Transition::RecordTool,
        Transition::SetRetryState,
        Transition::CommitStep,
        Transition::FinishInterruption,
        Transition::FinishRun,
        Transition::FailRun,
        Transition::EnterRequiresAction,
        Transition::ReleaseOnShutdown,
        Transition::RecoverStale,
        Transition::ExpirePendingAction,
        Transition::RequestCompaction,
        Transition::CommitSummary,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Transition::CreateChat => "create chat",
            Transition::SendMessage => "send message",
            Transition::EditMessage => "edit message",
            Transition::Interrupt => "interrupt",
            Transition::SubmitToolResults => "submit tool results",
            Transition::DeleteQueued => "delete queued message",
            Transition::PromoteQueued => "promote queued message",
            Transition::Archive => "archive",
            Transition::Unarchive => "unarchive",
            Transition::Delete => "delete",
            Transition::Acquire => "acquire",
            Transition::RenewLease => "renew lease",
            Transition::AppendLiveParts => "append live parts",
            Transition::RecordTool => "record tool call",
            Transition::SetRetryState => "set retry state",
            Transition::CommitStep => "commit step",
            Transition::FinishInterruption => "finish interruption",
            Transition::FinishRun => "finish run",
            Transition::FailRun => "fail run",
            Transition::EnterRequiresAction => "enter requires_action",
            Transition::ReleaseOnShutdown => "release on shutdown",
            Transition::RecoverStale => "recover stale lease",
            Transition::ExpirePendingAction => "expire pending action",
            Transition::RequestCompaction => "request compaction",
            Transition::CommitSummary => "commit summary",
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which source statuses a transition may start from. One row per transition; the
/// columns are `waiting`, `running`, `interrupting`, `requires_action`, `error`.
const W: bool = true;
const X: bool = false;
#[rustfmt::skip]
const TABLE: [(Transition, [bool; 5]); 24] = [
    //                                   wait run  intr  req  err
    (Transition::SendMessage,           [W,   W,   W,    W,   W]),
    (Transition::EditMessage,           [W,   W,   W,    W,   W]),
    (Transition::Interrupt,             [W,   W,   W,    W,   W]),
    (Transition::SubmitToolResults,     [X,   X,   X,    W,   X]),
    (Transition::DeleteQueued,          [W,   W,   W,    W,   W]),
    (Transition::PromoteQueued,         [W,   W,   W,    W,   W]),
    (Transition::Archive,               [W,   W,   W,    W,   W]),
    (Transition::Unarchive,             [W,   W,   W,    W,   W]),
    (Transition::Delete,                [W,   W,   W,    W,   W]),
    (Transition::Acquire,               [X,   W,   W,    X,   X]),
    (Transition::RenewLease,            [X,   W,   W,    X,   X]),
    (Transition::AppendLiveParts,       [X,   W,   W,    X,   X]),
    (Transition::RecordTool,            [X,   W,   W,    X,   X]),
    (Transition::SetRetryState,         [X,   W,   W,    X,   X]),
    (Transition::CommitStep,            [X,   W,   W,    X,   X]),
    (Transition::FinishInterruption,    [X,   X,   W,    X,   X]),
    (Transition::FinishRun,             [X,   W,   W,    X,   X]),
    (Transition::FailRun,               [X,   W,   W,    X,   X]),
    (Transition::EnterRequiresAction,   [X,   W,   W,    X,   X]),
    (Transition::ReleaseOnShutdown,     [X,   W,   W,    X,   X]),
    (Transition::RecoverStale,          [X,   W,   W,    X,   X]),
    (Transition::ExpirePendingAction,   [X,   X,   X,    W,   X]),
    (Transition::RequestCompaction,     [W,   X,   X,    X,   W]),
    (Transition::CommitSummary,         [X,   W,   X,    X,   X]),
];

fn column(status: ChatStatus) -> usize {
    match status {
        ChatStatus::Waiting => 0,
        ChatStatus::Running => 1,
        ChatStatus::Interrupting => 2,
        ChatStatus::RequiresAction => 3,
        ChatStatus::Error => 4,
    }
}

/// Whether `transition` may start from `from` (`None`: the chat does not exist yet).
pub fn allowed(from: Option<ChatStatus>, transition: Transition) -> bool {
    match from {
        None => transition == Transition::CreateChat,
        Some(status) => TABLE
            .iter()
            .find(|(t, _)| *t == transition)
            .is_some_and(|(_, row)| row[column(status)]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_names() {
        for st in ChatStatus::ALL {
            assert_eq!(st.as_str().parse::<ChatStatus>().unwrap(), st);
            assert_eq!(
                serde_json::to_value(st).unwrap(),
                serde_json::json!(st.as_str())
            );
        }
        assert!("archived".parse::<ChatStatus>().is_err());
    }

    #[test]
    fn every_transition_except_create_has_a_row() {
        for t in Transition::ALL {
            let has_row = TABLE.iter().any(|(r, _)| *r == t);
            assert_eq!(has_row, t != Transition::CreateChat, "{t}");
        }
    }

    #[test]
    fn only_create_starts_from_nothing() {
        for t in Transition::ALL {
            assert_eq!(allowed(None, t), t == Transition::CreateChat, "{t}");
        }
        for st in ChatStatus::ALL {
            assert!(!allowed(Some(st), Transition::CreateChat));
        }
    }

    #[test]
    fn worker_moves_need_a_runnable_chat() {
        use Transition::*;
        for t in [
            Acquire,
            RenewLease,
            AppendLiveParts,
            CommitStep,
            FinishRun,
            FailRun,
            ReleaseOnShutdown,
            RecoverStale,
        ] {
            for st in ChatStatus::ALL {
                assert_eq!(allowed(Some(st), t), st.is_runnable(), "{t} from {st}");
            }
        }
    }

    #[test]
    fn narrow_moves() {
        use ChatStatus::*;
        let only = |t: Transition, ok: &[ChatStatus]| {
            for st in ChatStatus::ALL {
                assert_eq!(allowed(Some(st), t), ok.contains(&st), "{t} from {st}");
            }
        };
        only(Transition::SubmitToolResults, &[RequiresAction]);
        only(Transition::ExpirePendingAction, &[RequiresAction]);
        only(Transition::FinishInterruption, &[Interrupting]);
        only(Transition::EnterRequiresAction, &[Running, Interrupting]);
        only(Transition::RequestCompaction, &[Waiting, Error]);
        only(Transition::CommitSummary, &[Running]);
        only(Transition::SendMessage, &ChatStatus::ALL);
        only(Transition::EditMessage, &ChatStatus::ALL);
        only(Transition::Interrupt, &ChatStatus::ALL);
        only(Transition::Delete, &ChatStatus::ALL);
    }
}
