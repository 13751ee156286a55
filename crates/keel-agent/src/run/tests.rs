use super::arguments_are_an_object;

#[test]
fn only_whole_json_objects_are_runnable_arguments() {
    assert!(arguments_are_an_object(""));
    assert!(arguments_are_an_object(r#"{"path": "a"}"#));
    assert!(!arguments_are_an_object(r#"{"path": "a"#));
    assert!(!arguments_are_an_object("[1]"));
    assert!(!arguments_are_an_object("null"));
}
