//! Prompt cache breakpoints for Anthropic.
//!
//! Anthropic caches the prompt prefix up to each `cache_control` marker, at most four per
//! request. Marking the end of the leading system block keeps the stable instructions
//! cached across conversations; marking the last two messages lets the next turn read
//! everything before its new input from the cache.

use keel_core::{Message, Role};

/// Sets `cache_breakpoint` on the last leading system message and on the final two
/// messages, clearing every other mark: at most three breakpoints.
pub fn mark_cache_breakpoints(messages: &mut [Message]) {
    for message in messages.iter_mut() {
        message.cache_breakpoint = false;
    }
    let leading_system = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    if leading_system > 0 {
        messages[leading_system - 1].cache_breakpoint = true;
    }
    let len = messages.len();
    for message in &mut messages[len.saturating_sub(2)..] {
        message.cache_breakpoint = true;
    }
}
