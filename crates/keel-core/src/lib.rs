//! Keel's domain model, shared by every other crate.
//!
//! This crate owns the vocabulary of an agent conversation and nothing else: it performs no
//! I/O. It defines
//!
//! * [`message`]: roles, messages and the parts they are made of, serialised exactly as the
//!   public HTTP contract shows them;
//! * [`usage`]: token usage and finish reasons; [`price`]: what a step's tokens cost;
//! * [`stream`]: the provider-neutral [`StreamEvent`] every model adapter produces;
//! * [`model`]: the [`LanguageModel`] trait a provider implements and the [`ModelCall`] it
//!   receives;
//! * [`clock`]: where time comes from, so tests can move it by hand;
//! * [`cancel`]: cancellation that carries a *cause*, so a user interrupt can be told apart
//!   from a server shutdown, and [`on_wake`], the wait for it that a busy loop polls for
//!   free;
//! * [`error`] and [`classify`]: provider failures and the one function that sorts them into
//!   kinds with a retryable flag;
//! * [`claude`]: what a Claude model's name says of its generation (which refuse prefill);
//! * [`names`]: an enum's names taken from its serde attributes, so each is spelled once.

#![warn(unreachable_pub)]

pub mod cancel;
pub mod classify;
pub mod claude;
pub mod clock;
pub mod error;
pub mod message;
pub mod model;
pub mod names;
pub mod on_wake;
pub mod price;
pub mod stream;
pub mod usage;

pub use cancel::{Cancel, CancelCause};
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ErrorKind, ProviderError, public_url};
pub use message::{
    INTERRUPTED_RESULT, Message, Part, PartKind, PendingToolCall, Role, SUMMARY_PREFIX,
};
pub use model::{
    CallOptions, Effort, EventStream, LanguageModel, ModelCall, ReasoningEffort, Thinking,
    ToolChoice, ToolDefinition,
};
pub use price::Price;
pub use stream::StreamEvent;
pub use usage::{FinishReason, Usage};
