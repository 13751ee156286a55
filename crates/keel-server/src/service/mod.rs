//! The operations on chats that the native API and both compatible protocols (AI SDK,
//! OpenAI Responses) share, typed and free of HTTP: a handler extracts its input, calls one
//! of these and maps the outcome to its answer.
//!
//! * [`chats`] — `owned_chat` (the caller's chat, or not found), `create_chat` (with
//!   history, idempotency key, model, step limit and tool checks), `create_aliased_chat`
//!   (under a client's own id), `idempotency_key`;
//! * `reads` — `list_chats`, `chat_usage`, `messages` (by page or branch), with the
//!   page's checks;
//! * [`settings`] — `update_chat` (title, model, system prompt), `set_archived`,
//!   `delete_chat`;
//! * [`turns`] — `send_message`, `edit_message`, `submit_tool_results`, `interrupt`,
//!   `switch_branch`, `regenerate`, `continue_reply`, `retry`, `compact`, the queue's;
//! * [`follow`] — `follow` (a chat's live events, for the event stream and both
//!   protocols), `stream_slot` (the caller's slot for one more open stream), `requested`;
//! * [`error`] — [`ServiceError`], whose kind (not found, invalid, conflict, too many, the
//!   store's own: budget exceeded, queue full …) becomes the API's error at the edge.

pub mod chats;
pub mod error;
pub mod follow;
pub(crate) mod reads;
pub mod settings;
pub mod turns;

pub use chats::{ChatSettings, NewChatInput, Owned, create_chat, owned_chat};
pub use error::ServiceError;
