//! How long a stream may take to start, and how long it may fall silent.

use std::time::Duration;

use keel_core::CallOptions;

/// Stream watchdog limits, from the `[runs]` configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamTimeouts {
    /// The first stream event must arrive within this.
    pub startup: Duration,
    /// A longer gap between events is a stall.
    pub idle: Duration,
}

impl Default for StreamTimeouts {
    fn default() -> Self {
        Self {
            startup: Duration::from_secs(60),
            idle: Duration::from_secs(60),
        }
    }
}

impl StreamTimeouts {
    /// The idle limit for `model`: doubled for reasoning models, which think silently.
    pub fn idle_for(&self, model: &str, options: &CallOptions) -> Duration {
        if is_reasoning_model(model, options) {
            self.idle.saturating_mul(2)
        } else {
            self.idle
        }
    }
}

/// Reasoning models are recognised by name (`thinking`, `reasoning`, `o1`/`o3`/`o4`
/// prefixes) or by a reasoning option on the call.
pub fn is_reasoning_model(model: &str, options: &CallOptions) -> bool {
    let name = model.to_ascii_lowercase();
    let base = name.rsplit('/').next().unwrap_or(&name);
    name.contains("thinking")
        || name.contains("reasoning")
        || ["o1", "o3", "o4"].iter().any(|p| base.starts_with(p))
        || options.reasoning_effort.is_some()
        || options.thinking_budget_tokens.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_doubles_for_reasoning_models() {
        let t = StreamTimeouts {
            startup: Duration::from_secs(5),
            idle: Duration::from_secs(10),
        };
        let plain = CallOptions::default();
        for name in [
            "claude-thinking",
            "deep-reasoning-v2",
            "o1-mini",
            "o3",
            "openai/o4-mini",
        ] {
            assert_eq!(t.idle_for(name, &plain), Duration::from_secs(20), "{name}");
        }
        for name in ["gpt-4.1", "claude-sonnet", "llama-3-70b"] {
            assert_eq!(t.idle_for(name, &plain), Duration::from_secs(10), "{name}");
        }
        let effort = CallOptions {
            reasoning_effort: Some("high".into()),
            ..CallOptions::default()
        };
        assert_eq!(t.idle_for("gpt-5", &effort), Duration::from_secs(20));
    }
}
