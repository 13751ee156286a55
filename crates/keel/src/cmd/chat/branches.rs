//! Versions of messages in the terminal: the "< 2/3 >" marker, which message `/branches`
//! and `/branch N` act on, which one `/regenerate` writes again, and the lines `/history`
//! and `/branches` print. Pure functions over the messages of a branch.

use keel_client::Message;

/// How much of a message's text one line shows.
const PREVIEW: usize = 80;

/// "< 2/3 >" for a message with other versions; `None` for a message with one.
pub fn marker(message: &Message) -> Option<String> {
    if message.siblings.len() < 2 {
        return None;
    }
    let position = message.siblings.iter().position(|&id| id == message.id)? + 1;
    Some(format!("< {position}/{} >", message.siblings.len()))
}

/// The message `/branches` lists the versions of when none is named: the last one of the
/// current branch that has other versions (the latest fork is the one a user just made).
pub fn fork(branch: &[Message]) -> Option<&Message> {
    branch.iter().rev().find(|m| m.siblings.len() > 1)
}

/// The message `/branch N` switches to: the N-th (from 1) version in `siblings`.
pub fn pick(siblings: &[i64], n: usize) -> Result<i64, String> {
    match n.checked_sub(1).and_then(|i| siblings.get(i)) {
        Some(&id) => Ok(id),
        None => Err(format!(
            "there are {} versions here: /branch takes 1 to {}",
            siblings.len(),
            siblings.len()
        )),
    }
}

/// The message `/regenerate` asks a new version of: the last reply of the branch, else its
/// last user message (a turn that failed before any reply).
pub fn regenerate_target(branch: &[Message]) -> Option<i64> {
    branch
        .iter()
        .rev()
        .find(|m| m.role == "assistant")
        .or_else(|| branch.iter().rev().find(|m| m.role == "user"))
        .map(|m| m.id)
}

/// The first line of a message's text, shortened; tool calls and results by name.
fn preview(message: &Message) -> String {
    let text = message.text();
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut shown: String = line.chars().take(PREVIEW).collect();
    if line.chars().count() > PREVIEW || text.lines().filter(|l| !l.trim().is_empty()).count() > 1 {
        shown.push('…');
    }
    if shown.is_empty() {
        let names: Vec<&str> = message
            .parts
            .iter()
            .filter_map(|p| p["tool_name"].as_str())
            .collect();
        if !names.is_empty() {
            return format!("[{}]", names.join(", "));
        }
    }
    shown
}

fn speaker(role: &str) -> &str {
    match role {
        "user" => "you",
        "assistant" => "reply",
        other => other,
    }
}

/// One line of `/history`: the id (what `/branches ID` takes), who spoke, the start of the
/// text and the version marker.
pub fn history_line(message: &Message) -> String {
    let mut line = format!(
        "#{} {}: {}",
        message.id,
        speaker(&message.role),
        preview(message)
    );
    if let Some(marker) = marker(message) {
        line.push_str("  ");
        line.push_str(&marker);
    }
    line
}

/// One line of `/branches`: the version's number for `/branch N`, `*` on the current one.
pub fn version_line(n: usize, version: &Message, current: bool) -> String {
    format!(
        "{} {n}. #{} {}",
        if current { "*" } else { " " },
        version.id,
        preview(version)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(id: i64, role: &str, text: &str, siblings: &[i64]) -> Message {
        serde_json::from_value(json!({
            "id": id, "role": role, "parts": [{"type": "text", "text": text}],
            "siblings": siblings,
        }))
        .unwrap()
    }

    #[test]
    fn the_marker_shows_the_position_among_the_versions() {
        assert_eq!(
            marker(&message(9, "user", "b", &[2, 9, 12])).as_deref(),
            Some("< 2/3 >")
        );
        assert_eq!(marker(&message(2, "user", "a", &[2])), None);
        assert_eq!(marker(&message(2, "user", "a", &[])), None);
    }

    #[test]
    fn branches_act_on_the_last_fork_and_regenerate_on_the_last_reply() {
        let branch = [
            message(1, "user", "q", &[1, 5]),
            message(2, "assistant", "a", &[2]),
            message(3, "user", "q2", &[3]),
            message(4, "assistant", "a2", &[4, 7]),
            message(8, "user", "q3", &[8]),
        ];
        assert_eq!(fork(&branch).map(|m| m.id), Some(4));
        assert_eq!(fork(&branch[..3]).map(|m| m.id), Some(1));
        assert_eq!(fork(&branch[1..3]).map(|m| m.id), None);
        assert_eq!(regenerate_target(&branch), Some(4));
        assert_eq!(regenerate_target(&branch[..1]), Some(1));
        assert_eq!(regenerate_target(&[]), None);
    }

    #[test]
    fn branch_n_counts_from_one() {
        assert_eq!(pick(&[4, 7], 1), Ok(4));
        assert_eq!(pick(&[4, 7], 2), Ok(7));
        assert!(pick(&[4, 7], 0).unwrap_err().contains("1 to 2"));
        assert!(pick(&[4, 7], 3).is_err());
    }

    #[test]
    fn lines_show_the_id_the_speaker_the_text_and_the_marker() {
        assert_eq!(
            history_line(&message(9, "user", "second try\nmore", &[2, 9])),
            "#9 you: second try…  < 2/2 >"
        );
        assert_eq!(
            history_line(&message(3, "assistant", "hello", &[3])),
            "#3 reply: hello"
        );
        assert_eq!(
            version_line(2, &message(9, "user", "second try", &[2, 9]), true),
            "* 2. #9 second try"
        );
        let call: Message = serde_json::from_value(json!({"id": 4, "role": "assistant",
            "parts": [{"type": "tool_call", "tool_name": "read_file", "args": "{}"}]}))
        .unwrap();
        assert_eq!(history_line(&call), "#4 reply: [read_file]");
    }
}
