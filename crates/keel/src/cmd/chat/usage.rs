//! A chat's tokens and cost, as one line under a finished reply.

use keel_client::ChatUsage;

/// `1,250 tokens (1,000 in, 200 cached, 50 out) · $0.0034`; `None` before any usage.
pub(super) fn line(usage: &ChatUsage) -> Option<String> {
    let total = usage.input_tokens + usage.cached_input_tokens + usage.output_tokens;
    if total == 0 {
        return None;
    }
    let cost = usage
        .cost
        .map(|c| format!(" · ${c:.4}"))
        .unwrap_or_default();
    Some(format!(
        "chat so far: {} tokens ({} in, {} cached, {} out){cost}",
        grouped(total),
        grouped(usage.input_tokens),
        grouped(usage.cached_input_tokens),
        grouped(usage.output_tokens),
    ))
}

/// A count with thousands separated by commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_cost_fit_one_line() {
        let usage = ChatUsage {
            input_tokens: 1_000,
            cached_input_tokens: 200,
            output_tokens: 1_234_567,
            reasoning_tokens: 0,
            cost: Some(0.003_35),
        };
        assert_eq!(
            line(&usage).unwrap(),
            "chat so far: 1,235,767 tokens (1,000 in, 200 cached, 1,234,567 out) · $0.0034"
        );
        let unpriced = ChatUsage {
            cost: None,
            ..usage
        };
        assert!(!line(&unpriced).unwrap().contains('$'));
        assert_eq!(line(&ChatUsage::default()), None);
    }
}
