use super::*;

#[test]
fn a_batch_is_the_array_serde_json_writes() {
    let documents = [
        serde_json::json!({"data": {"part": {"text": "a\"b", "type": "text"}}, "event": "part"}),
        serde_json::json!({"data": {}, "event": "stream_reset"}),
    ];
    let texts: Vec<String> = documents.iter().map(Value::to_string).collect();
    assert_eq!(
        json_array(texts.iter().map(String::as_str)),
        serde_json::to_string(&documents).unwrap()
    );
    assert_eq!(json_array(std::iter::empty()), "[]");
}
