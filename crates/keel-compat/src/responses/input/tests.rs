use super::*;
use serde_json::json;

fn roles(c: &Conversation) -> Vec<Role> {
    c.turns.iter().map(|t| t.role).collect()
}

#[test]
fn a_string_is_one_user_message() {
    let c = parse(&json!("hi")).unwrap();
    assert_eq!(c.turns[0].parts, vec![Part::text("hi")]);
    assert_eq!(roles(&c), [Role::User]);
}

#[test]
fn a_whole_conversation_becomes_its_turns() {
    let mut c = parse(&json!([
            {"role": "developer", "content": "be brief"},
            {"role": "system", "content": [{"type": "input_text", "text": "and kind"}]},
            {"role": "user", "content": "first question"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "first answer"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "look"},
                                         {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thinking"}], "encrypted_content": "xyz"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{\"q\":1}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
            {"role": "user", "content": "second question"}
        ]))
        .unwrap();
    assert_eq!(c.system, ["be brief", "and kind"]);
    assert_eq!(
        roles(&c),
        [
            Role::User,
            Role::Assistant,
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(c.turns[0].parts, vec![Part::text("first question")]);
    assert_eq!(c.turns[1].parts, vec![Part::text("first answer")]);
    assert!(matches!(&c.turns[2].parts[1].kind,
            PartKind::File { media_type, data: Some(d), url: None } if media_type == "image/png" && d == "AAAA"));
    assert_eq!(
        c.turns[3].parts,
        vec![
            Part::reasoning("thinking", None),
            Part::tool_call("c1", "lookup", "{\"q\":1}", false)
        ]
    );
    assert_eq!(c.turns[3].first, 5);
    assert_eq!(c.turns[5].parts, vec![Part::refusal("no")]);
    pair_calls(&mut c).unwrap();
    assert_eq!(
        c.turns[4].parts,
        vec![Part::tool_result("c1", "lookup", json!("42"), false, false)]
    );
}

#[test]
fn a_conversation_may_end_with_function_outputs() {
    let mut c = parse(&json!([
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "a", "name": "w", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "w", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "b", "output": [{"type": "input_text", "text": "rain"}]},
            {"type": "function_call_output", "call_id": "a", "output": "sun"}
        ]))
        .unwrap();
    pair_calls(&mut c).unwrap();
    assert_eq!(roles(&c), [Role::User, Role::Assistant, Role::Tool]);
    assert_eq!(c.turns[2].parts.len(), 2);
}

#[test]
fn calls_of_keels_own_tools_come_back_with_their_results() {
    let mut c = parse(&json!([
            {"role": "user", "content": "what is here?"},
            {"type": "mcp_call", "id": "t1", "server_label": "keel", "name": "list_dir",
             "arguments": "{}", "output": "a.txt", "error": null, "status": "completed"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a.txt"}]},
            {"role": "user", "content": "thanks"}
        ]))
        .unwrap();
    pair_calls(&mut c).unwrap();
    assert_eq!(
        roles(&c),
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::User
        ]
    );
    assert_eq!(
        c.turns[2].parts,
        vec![Part::tool_result(
            "t1",
            "list_dir",
            json!("a.txt"),
            false,
            false
        )]
    );
    let other = json!([{"type": "mcp_call", "id": "t", "server_label": "github", "name": "x"}]);
    assert!(
        parse(&other)
            .unwrap_err()
            .starts_with("input[0] (mcp_call): Keel cannot take")
    );
    let unfinished = json!([{"type": "mcp_call", "id": "t", "server_label": "keel", "name": "x"}]);
    assert!(
        parse(&unfinished)
            .unwrap_err()
            .starts_with("input[0] (mcp_call): a call of Keel's own tool")
    );
}

#[test]
fn links_and_files_keep_what_they_are() {
    let c = parse(&json!([{"role": "user", "content": [
            {"type": "input_image", "image_url": "https://example.com/cat.JPG?x=1"},
            {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
            {"type": "input_file", "file_url": "https://example.com/a.pdf"}
        ]}]))
        .unwrap();
    let parts = &c.turns[0].parts;
    assert!(
        matches!(&parts[0].kind, PartKind::File { media_type, url: Some(_), .. } if media_type == "image/jpeg")
    );
    assert!(
        matches!(&parts[1].kind, PartKind::File { media_type, data: Some(_), .. } if media_type == "application/pdf")
    );
    assert!(matches!(
        &parts[2].kind,
        PartKind::File {
            url: Some(_),
            data: None,
            ..
        }
    ));
}

#[test]
fn a_reasoning_item_without_text_adds_nothing() {
    let c = parse(&json!([
        {"role": "user", "content": "q"},
        {"type": "reasoning", "summary": [], "encrypted_content": "xyz"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"}
    ]))
    .unwrap();
    assert_eq!(c.turns[1].parts, vec![Part::text("a")]);
}

#[test]
fn what_keel_cannot_represent_is_refused_by_index_and_type() {
    let refused = [
        (json!(3), "`input` must be"),
        (
            json!([{"content": "x"}]),
            "input[0] needs a `type` or a `role`",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"type": "item_reference", "id": "msg_1"}]),
            "input[1] (item_reference)",
        ),
        (
            json!([{"type": "web_search_call", "id": "ws"}]),
            "input[0] (web_search_call)",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"role": "developer", "content": "late"}]),
            "input[1] (developer message)",
        ),
        (
            json!([{"role": "tool", "content": "x"}]),
            "input[0] (message): unknown role `tool`",
        ),
        (
            json!([{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]),
            "input[0] (user message): content[0] (input_image)",
        ),
        (
            json!([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]),
            "input[0] (user message): content[0] (input_file)",
        ),
        (
            json!([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]),
            "input[0] (user message): content[0] is `output_text`",
        ),
        (
            json!([{"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}]),
            "input[0] (assistant message)",
        ),
        (
            json!([{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}]),
            "input[0] (system message)",
        ),
        (
            json!([{"role": "user", "content": 3}]),
            "input[0] (user message): `content`",
        ),
        (
            json!([{"type": "function_call", "name": "f"}]),
            "input[0] (function_call): `call_id` is required",
        ),
        (
            json!([{"type": "function_call", "call_id": "c"}]),
            "input[0] (function_call): `name` is required",
        ),
        (
            json!([{"type": "function_call_output", "output": "x"}]),
            "input[0] (function_call_output): `call_id` is required",
        ),
        (
            json!([{"type": "function_call_output", "call_id": "c"}]),
            "input[0] (function_call_output): `output`",
        ),
    ];
    for (input, expected) in refused {
        let error = parse(&input).unwrap_err();
        assert!(error.starts_with(expected), "{input}: {error}");
    }
}

#[test]
fn a_whole_conversation_must_pair_its_calls_and_end_for_the_model() {
    let refused = [
        (
            json!([{"role": "user", "content": "q"},
                    {"type": "function_call_output", "call_id": "c", "output": "x"}]),
            "input[1] (function_call_output): no function_call item with call_id `c`",
        ),
        (
            json!([{"role": "user", "content": "q"},
                    {"type": "function_call", "call_id": "c", "name": "f"},
                    {"role": "user", "content": "next"}]),
            "function_call `c` has no function_call_output",
        ),
        (
            json!([{"role": "user", "content": "q"},
                    {"type": "function_call", "call_id": "c", "name": "f"},
                    {"type": "function_call", "call_id": "c", "name": "f"}]),
            "input[1] (function_call): call_id `c` is used twice",
        ),
        (
            json!([{"role": "user", "content": "q"},
                    {"type": "function_call", "call_id": "c", "name": "f"},
                    {"type": "function_call_output", "call_id": "c", "output": "x"},
                    {"type": "function_call_output", "call_id": "c", "output": "y"}]),
            "input[2] (function_call_output): call_id `c` is answered twice",
        ),
        (
            json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]),
            "input[1] (assistant): the input must end",
        ),
        (
            json!([{"role": "system", "content": "s"}]),
            "`input` holds no user message",
        ),
    ];
    for (input, expected) in refused {
        let error = pair_calls(&mut parse(&input).unwrap()).unwrap_err();
        assert!(error.starts_with(expected), "{input}: {error}");
    }
}

#[test]
fn after_a_previous_response_the_input_is_one_turn() {
    let turn = single_turn(
        parse(&json!([
            {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
        ]))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(turn.parts, vec![Part::text("a"), Part::text("b")]);
    let turn = single_turn(
        parse(&json!([
            {"type": "function_call_output", "call_id": "c", "output": "x"}
        ]))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(turn.role, Role::Tool);
    let refused = [
        (
            json!([{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]),
            "input[0] (assistant)",
        ),
        (
            json!([{"type": "function_call", "call_id": "c", "name": "f"},
                    {"type": "function_call_output", "call_id": "c", "output": "x"}]),
            "input[0] (assistant)",
        ),
        (
            json!([{"type": "function_call_output", "call_id": "c", "output": "x"},
                    {"role": "user", "content": "b"}]),
            "input[1] (user message)",
        ),
        (json!([]), "`input` holds no"),
    ];
    for (input, expected) in refused {
        let error = single_turn(parse(&input).unwrap()).unwrap_err();
        assert!(error.starts_with(expected), "{input}: {error}");
    }
}
