//! How long a stream may take to start, and how long it may fall silent.
//!
//! Reasoning models think before their first event and between events, so both limits are
//! scaled for them: the start-up limit ×[`REASONING_STARTUP_FACTOR`] (unless the model sets
//! its own `startup_timeout_ms`), the idle limit ×2. Keep-alives (pings, in-progress events,
//! SSE comments) restart the idle limit but never the start-up one.

use std::time::Duration;

use keel_core::CallOptions;

/// Stream watchdog limits, from the `[runs]` configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamTimeouts {
    /// The first stream event must arrive within this.
    pub startup: Duration,
    /// A longer gap between events is a stall.
    pub idle: Duration,
    /// Scale `startup` for reasoning models; off when a model configures its own.
    pub scale_startup: bool,
}

/// How much longer a reasoning model may take to send its first event.
pub const REASONING_STARTUP_FACTOR: u32 = 5;

impl Default for StreamTimeouts {
    fn default() -> Self {
        Self {
            startup: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            scale_startup: true,
        }
    }
}

impl StreamTimeouts {
    /// The start-up limit for `model`: scaled for reasoning models, which may think for
    /// minutes before their first event, unless configured per model.
    pub fn startup_for(&self, model: &str, options: &CallOptions) -> Duration {
        if self.scale_startup && is_reasoning_model(model, options) {
            self.startup.saturating_mul(REASONING_STARTUP_FACTOR)
        } else {
            self.startup
        }
    }

    /// The idle limit for `model`: doubled for reasoning models, which think silently.
    pub fn idle_for(&self, model: &str, options: &CallOptions) -> Duration {
        if is_reasoning_model(model, options) {
            self.idle.saturating_mul(2)
        } else {
            self.idle
        }
    }
}

/// Reasoning models are recognised by name (`thinking`, `reasoning`, `reasoner`, the
/// o-series, `gpt-5` but its chat variants, DeepSeek R1, QwQ) or by a reasoning option on
/// the call.
pub fn is_reasoning_model(model: &str, options: &CallOptions) -> bool {
    let name = model.to_ascii_lowercase();
    let base = name.rsplit('/').next().unwrap_or(&name);
    name.contains("thinking")
        || name.contains("reasoning")
        || name.contains("reasoner")
        || name.contains("deepseek-r1")
        || base.starts_with("qwq")
        || (base.starts_with("gpt-5") && !base.contains("chat"))
        || ["o1", "o3", "o4"].iter().any(|p| base.starts_with(p))
        || options.reasoning_effort.is_some()
        || options.thinking_budget_tokens.is_some()
        || options.thinking.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_doubles_for_reasoning_models() {
        let t = StreamTimeouts {
            startup: Duration::from_secs(5),
            idle: Duration::from_secs(10),
            scale_startup: true,
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
            reasoning_effort: Some(keel_core::ReasoningEffort::High),
            ..CallOptions::default()
        };
        assert_eq!(t.idle_for("gpt-4.1", &effort), Duration::from_secs(20));
    }

    #[test]
    fn startup_scales_for_reasoning_models_unless_configured_per_model() {
        let t = StreamTimeouts {
            startup: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            scale_startup: true,
        };
        let plain = CallOptions::default();
        for name in [
            "gpt-5",
            "gpt-5-mini",
            "o3-pro",
            "deepseek-reasoner",
            "deepseek-ai/DeepSeek-R1",
        ] {
            assert_eq!(
                t.startup_for(name, &plain),
                Duration::from_secs(300),
                "{name}"
            );
        }
        for name in [
            "gpt-5-chat-latest",
            "gpt-4.1",
            "deepseek-chat",
            "claude-sonnet-4-5",
        ] {
            assert_eq!(
                t.startup_for(name, &plain),
                Duration::from_secs(60),
                "{name}"
            );
        }
        let fixed = StreamTimeouts {
            scale_startup: false,
            ..t
        };
        assert_eq!(fixed.startup_for("o3", &plain), Duration::from_secs(60));
    }
}
