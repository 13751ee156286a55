//! Chat statuses, the transitions between them and the one table of allowed moves.
//!
//! [`target`] answers, for every transition and status, whether the transition may start
//! there and where it may end; what each transition then writes lives in
//! [`crate::transitions`], which checks both ends. `None` as the source status
//! means "no chat yet", from which only [`Transition::CreateChat`] and
//! [`Transition::ImportChat`] may start.

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
        keel_core::names::serde_name(&self)
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
    PutCheckpoint,
    SetRetryState,
    RecordRunTrace,
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
    UpdateChat,
    NameChat,
    ContinueReply,
    RetryRun,
    SwitchBranch,
    Regenerate,
    ImportChat,
}

impl Transition {
    pub const ALL: [Transition; 34] = [
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
        Transition::PutCheckpoint,
        Transition::SetRetryState,
        Transition::RecordRunTrace,
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
        Transition::UpdateChat,
        Transition::NameChat,
        Transition::ContinueReply,
        Transition::RetryRun,
        Transition::SwitchBranch,
        Transition::Regenerate,
        Transition::ImportChat,
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
            Transition::PutCheckpoint => "save checkpoint",
            Transition::SetRetryState => "set retry state",
            Transition::RecordRunTrace => "record run trace",
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
            Transition::UpdateChat => "update chat",
            Transition::NameChat => "name chat",
            Transition::ContinueReply => "continue reply",
            Transition::RetryRun => "retry run",
            Transition::SwitchBranch => "switch branch",
            Transition::Regenerate => "regenerate",
            Transition::ImportChat => "import chat",
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a transition takes a chat that is in one status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The status stays what it was.
    Stays,
    /// One of these statuses; which one, the transition decides from the chat's state (a
    /// queue head, a busy mode).
    Becomes(&'static [ChatStatus]),
    /// The chat is gone.
    Gone,
}

const RUNNING: Target = Target::Becomes(&[ChatStatus::Running]);
const INTERRUPTING: Target = Target::Becomes(&[ChatStatus::Interrupting]);
/// The queue head starts (`running`), or nothing is left to do (`waiting`).
const NEXT_OR_IDLE: Target = Target::Becomes(&[ChatStatus::Running, ChatStatus::Waiting]);

/// The state machine: for every transition and every status, whether the transition may
/// start there and which statuses it may end in. An exhaustive `match` with no catch-all,
/// so a new status or transition does not compile until every pair is decided.
pub fn target(transition: Transition, from: ChatStatus) -> Option<Target> {
    use ChatStatus::{Error, Interrupting, RequiresAction, Running, Waiting};
    use Transition::*;
    match (transition, from) {
        (CreateChat | ImportChat, Waiting | Running | Interrupting | RequiresAction | Error) => {
            None
        }

        // Idle: the message starts a run; behind a queue left by a failed run it queues at
        // the tail and the head starts, so nothing jumps ahead.
        (SendMessage, Waiting | Error) => Some(RUNNING),
        // busy = queue keeps the status; busy = interrupt stops the run.
        (SendMessage, Running) => Some(Target::Becomes(&[Running, Interrupting])),
        (SendMessage, Interrupting) => Some(Target::Stays),
        // busy = queue keeps waiting for the calls; busy = interrupt answers them and runs.
        (SendMessage, RequiresAction) => Some(Target::Becomes(&[RequiresAction, Running])),

        (EditMessage, Waiting | Running | Interrupting | RequiresAction | Error) => Some(RUNNING),

        (Interrupt, Running) => Some(INTERRUPTING),
        // The pending calls get error results; a queued message runs next.
        (Interrupt, RequiresAction) => Some(NEXT_OR_IDLE),
        (Interrupt, Waiting | Interrupting | Error) => Some(Target::Stays),

        (SubmitToolResults, RequiresAction) => Some(RUNNING),
        (SubmitToolResults, Waiting | Running | Interrupting | Error) => None,

        (DeleteQueued, Waiting | Running | Interrupting | RequiresAction | Error) => {
            Some(Target::Stays)
        }
        (PromoteQueued, Running | Interrupting) => Some(INTERRUPTING),
        (PromoteQueued, Waiting | RequiresAction | Error) => Some(RUNNING),

        (Archive | Unarchive, Waiting | Running | Interrupting | RequiresAction | Error) => {
            Some(Target::Stays)
        }
        (Delete, Waiting | Running | Interrupting | RequiresAction | Error) => Some(Target::Gone),

        (
            Acquire | RenewLease | AppendLiveParts | RecordTool | PutCheckpoint | SetRetryState
            | RecordRunTrace | CommitStep | ReleaseOnShutdown | RecoverStale,
            Running | Interrupting,
        ) => Some(Target::Stays),
        (
            Acquire | RenewLease | AppendLiveParts | RecordTool | PutCheckpoint | SetRetryState
            | RecordRunTrace | CommitStep | ReleaseOnShutdown | RecoverStale,
            Waiting | RequiresAction | Error,
        ) => None,

        (CommitSummary, Running) => Some(Target::Stays),
        (CommitSummary, Waiting | Interrupting | RequiresAction | Error) => None,

        (FinishInterruption, Interrupting) => Some(NEXT_OR_IDLE),
        (FinishInterruption, Waiting | Running | RequiresAction | Error) => None,
        (FinishRun, Running | Interrupting) => Some(NEXT_OR_IDLE),
        (FinishRun, Waiting | RequiresAction | Error) => None,
        (FailRun, Running | Interrupting) => Some(Target::Becomes(&[Error])),
        (FailRun, Waiting | RequiresAction | Error) => None,

        (EnterRequiresAction, Running) => Some(Target::Becomes(&[RequiresAction])),
        // Interrupted meanwhile: the calls are answered as interrupted and the run ends.
        (EnterRequiresAction, Interrupting) => Some(NEXT_OR_IDLE),
        (EnterRequiresAction, Waiting | RequiresAction | Error) => None,

        // The calls get error results; a queued message runs next.
        (ExpirePendingAction, RequiresAction) => Some(NEXT_OR_IDLE),
        (ExpirePendingAction, Waiting | Running | Interrupting | Error) => None,

        // A title or model changes nothing a run depends on; a new model applies from the
        // next call, the generated title only while the chat has none.
        (UpdateChat | NameChat, Waiting | Running | Interrupting | RequiresAction | Error) => {
            Some(Target::Stays)
        }

        (RequestCompaction, Waiting | Error) => Some(RUNNING),
        (RequestCompaction, Running | Interrupting | RequiresAction) => None,

        // An idle chat whose last message is a reply the user stopped: the model carries on.
        (ContinueReply, Waiting | Error) => Some(RUNNING),
        (ContinueReply, Running | Interrupting | RequiresAction) => None,
        // The failed turn runs again, with nothing added to the history.
        (RetryRun, Error) => Some(RUNNING),
        (RetryRun, Waiting | Running | Interrupting | RequiresAction) => None,
        // Only while nothing is in progress: a run (or calls waiting for their results)
        // belongs to the branch it started on.
        (SwitchBranch, Waiting | Error) => Some(Target::Stays),
        (SwitchBranch, Running | Interrupting | RequiresAction) => None,
        (Regenerate, Waiting | Error) => Some(RUNNING),
        (Regenerate, Running | Interrupting | RequiresAction) => None,
    }
}

/// Whether `transition` may start from `from` (`None`: the chat does not exist yet).
pub fn allowed(from: Option<ChatStatus>, transition: Transition) -> bool {
    match from {
        None => transition.creates(),
        Some(status) => target(transition, status).is_some(),
    }
}

/// Whether `transition` may take a chat from `from` to `to`.
pub fn permits(transition: Transition, from: ChatStatus, to: ChatStatus) -> bool {
    match target(transition, from) {
        Some(Target::Stays) => to == from,
        Some(Target::Becomes(targets)) => targets.contains(&to),
        Some(Target::Gone) | None => false,
    }
}

/// Who starts a transition: it decides which module of [`crate::transitions`] writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A client, through the HTTP API.
    Api,
    /// The worker that holds the chat's lease.
    Worker,
    /// A periodic sweep over many chats.
    Sweep,
}

impl Transition {
    /// Whether the transition makes a chat that did not exist: the only ones that start
    /// from no status.
    pub fn creates(self) -> bool {
        matches!(self, Transition::CreateChat | Transition::ImportChat)
    }

    /// Where a transition that [`Self::creates`] a chat leaves it: a new chat's first message
    /// starts a run; an imported chat waits for its owner's next message.
    pub fn created_status(self) -> Option<ChatStatus> {
        match self {
            Transition::CreateChat => Some(ChatStatus::Running),
            Transition::ImportChat => Some(ChatStatus::Waiting),
            _ => None,
        }
    }

    /// Who starts this transition.
    pub fn trigger(self) -> Trigger {
        use Transition::*;
        match self {
            CreateChat | SendMessage | EditMessage | Interrupt | SubmitToolResults
            | DeleteQueued | PromoteQueued | Archive | Unarchive | Delete | RequestCompaction
            | UpdateChat | ContinueReply | RetryRun | SwitchBranch | Regenerate | ImportChat => {
                Trigger::Api
            }
            Acquire | RenewLease | AppendLiveParts | RecordTool | PutCheckpoint | SetRetryState
            | RecordRunTrace | CommitStep | CommitSummary | FinishInterruption | FinishRun
            | FailRun | EnterRequiresAction | ReleaseOnShutdown | NameChat => Trigger::Worker,
            RecoverStale | ExpirePendingAction => Trigger::Sweep,
        }
    }
}

fn status_list(statuses: &[ChatStatus]) -> String {
    statuses
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The state machine as a Markdown table (transition, trigger, from, to), one row per
/// transition and distinct target, generated from [`target`]. ARCHITECTURE.md carries it;
/// a test keeps the two equal.
pub fn markdown_table() -> String {
    let mut out = String::from("| transition | by | from | to |\n| --- | --- | --- | --- |\n");
    for t in Transition::ALL {
        let by = match t.trigger() {
            Trigger::Api => "API",
            Trigger::Worker => "worker",
            Trigger::Sweep => "sweep",
        };
        if let Some(created) = t.created_status() {
            out.push_str(&format!("| {t} | {by} | (none) | `{created}` |\n"));
            continue;
        }
        let mut rows: Vec<(Target, Vec<ChatStatus>)> = Vec::new();
        for st in ChatStatus::ALL {
            let Some(to) = target(t, st) else { continue };
            match rows.iter_mut().find(|(t, _)| *t == to) {
                Some((_, from)) => from.push(st),
                None => rows.push((to, vec![st])),
            }
        }
        for (to, from) in rows {
            let to = match to {
                Target::Stays => "unchanged".to_owned(),
                Target::Becomes(targets) => status_list(targets).replace(", ", " or "),
                Target::Gone => "(deleted)".to_owned(),
            };
            out.push_str(&format!("| {t} | {by} | {} | {to} |\n", status_list(&from)));
        }
    }
    out
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
    fn every_transition_except_the_creating_ones_starts_somewhere() {
        for t in Transition::ALL {
            let starts = ChatStatus::ALL.iter().any(|st| target(t, *st).is_some());
            assert_eq!(starts, !t.creates(), "{t}");
        }
    }

    #[test]
    fn targets_are_checked_against_the_source() {
        use ChatStatus::*;
        assert!(permits(Transition::Interrupt, RequiresAction, Running));
        assert!(permits(Transition::Interrupt, RequiresAction, Waiting));
        assert!(!permits(Transition::Interrupt, RequiresAction, Error));
        assert!(permits(Transition::Interrupt, Waiting, Waiting));
        assert!(!permits(Transition::Interrupt, Waiting, Running));
        assert!(permits(
            Transition::ExpirePendingAction,
            RequiresAction,
            Running
        ));
        assert!(!permits(Transition::RenewLease, Running, Interrupting));
        assert!(!permits(Transition::Delete, Running, Running));
        assert!(!permits(Transition::FinishRun, Waiting, Waiting));
    }

    #[test]
    fn the_generated_table_has_a_row_for_every_transition() {
        let table = markdown_table();
        for t in Transition::ALL {
            assert!(table.contains(&format!("| {t} |")), "{t}");
        }
    }

    #[test]
    fn only_create_and_import_start_from_nothing() {
        for t in Transition::ALL {
            let creates = matches!(t, Transition::CreateChat | Transition::ImportChat);
            assert_eq!(allowed(None, t), creates, "{t}");
            assert_eq!(t.created_status().is_some(), creates, "{t}");
        }
        for st in ChatStatus::ALL {
            assert!(!allowed(Some(st), Transition::CreateChat));
            assert!(!allowed(Some(st), Transition::ImportChat));
        }
    }

    #[test]
    fn worker_moves_need_a_runnable_chat() {
        use Transition::*;
        for t in [
            Acquire,
            RenewLease,
            AppendLiveParts,
            PutCheckpoint,
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
        only(Transition::PutCheckpoint, &[Running, Interrupting]);
        only(Transition::RequestCompaction, &[Waiting, Error]);
        only(Transition::CommitSummary, &[Running]);
        only(Transition::ContinueReply, &[Waiting, Error]);
        only(Transition::RetryRun, &[Error]);
        only(Transition::SendMessage, &ChatStatus::ALL);
        only(Transition::EditMessage, &ChatStatus::ALL);
        only(Transition::Interrupt, &ChatStatus::ALL);
        only(Transition::Delete, &ChatStatus::ALL);
    }
}
