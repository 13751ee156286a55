use super::*;
use serde_json::json;

#[test]
fn one_step_scripts_render_flat_and_parse_back() {
    let script = Script::new(Step::text("hi").rate(0.0)).id("a");
    let directive = script.directive();
    assert_eq!(directive, r#"#mock {"id":"a","rate":0.0,"text":"hi"}"#);
    let parsed = parse_directive(&script.message("hello")).unwrap().unwrap();
    assert_eq!(parsed.script, script);
    assert_eq!(parsed.rest, "hello");
}

#[test]
fn multi_step_scripts_use_steps() {
    let script =
        Script::new(Step::tool_call("list_dir", json!({"path": "."}))).then(Step::text("done"));
    let value = Value::from(script.clone());
    assert!(value.get("steps").is_some());
    assert_eq!(Script::try_from(value).unwrap(), script);
}

#[test]
fn typos_are_errors() {
    assert!(parse_directive("#mock {\"txt\": \"x\"}").is_err());
    assert!(parse_directive("#mock {\"steps\": [], \"text\": \"x\"}").is_err());
    assert!(parse_directive("#mock [1]").is_err());
}

#[test]
fn no_directive_and_empty_directive() {
    assert!(parse_directive("hello #mock").unwrap().is_none());
    assert!(parse_directive("#mockery").unwrap().is_none());
    let empty = parse_directive("hi\n#mock").unwrap().unwrap();
    assert_eq!(empty.script.steps, vec![Step::default()]);
}

#[test]
fn retry_after_accepts_numbers() {
    let parsed = parse_directive(r#"#mock {"error": {"status": 429, "retry_after": 3}}"#)
        .unwrap()
        .unwrap();
    let error = parsed.script.steps[0].error.clone().unwrap();
    assert_eq!(error.retry_after.as_deref(), Some("3"));
}
