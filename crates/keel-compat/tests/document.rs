//! The OpenAPI document the daemon serves with both doors, held against the router it
//! describes: every route served is documented and every documented route served, and every
//! example in the document satisfies its schema. It lives here, where the doors and the
//! daemon's own routes are both visible, so that the whole document is checked.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use axum::Router;
use keel_server::api::state::AppState;
use serde_json::Value;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

/// The routes the `keel` binary serves, unlayered, and their document.
fn routes() -> (Router<AppState>, utoipa::openapi::OpenApi) {
    keel_server::api::routes(keel_compat::doors())
}

/// The document as JSON, built once.
fn document() -> &'static Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        let (_, document) = routes();
        serde_json::to_value(&document).unwrap_or_else(|e| panic!("the document as JSON: {e}"))
    });
    &DOCUMENT
}

/// The (method, path) pairs a router serves, read from its `Debug` form (axum offers no
/// other listing): each route id's path, and the methods its method router has a handler
/// for. A change of that form finds nothing, and the comparison below then fails.
fn served(router: &Router<AppState>) -> BTreeSet<(String, String)> {
    let text = format!("{router:?}");
    let text = text.split("fallback_router").next().unwrap_or_default();
    let (routes, paths) = text.split_once("node: Node").unwrap_or_default();
    let mut served = BTreeSet::new();
    for entry in routes.split("RouteId(").skip(1) {
        let Some((id, endpoint)) = entry.split_once(')') else {
            continue;
        };
        let Some(path) = paths
            .split(&format!("RouteId({id}): \""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        for method in METHODS {
            let handled = endpoint
                .split(&format!(" {method}: "))
                .nth(1)
                .is_some_and(|value| !value.starts_with("None"));
            if handled {
                served.insert((method.to_owned(), path.to_owned()));
            }
        }
    }
    served
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            if item.get(method).is_some() {
                documented.insert((method.to_owned(), path.clone()));
            }
        }
    }
    documented
}

#[test]
fn the_router_serves_exactly_the_routes_the_document_describes() {
    let (router, _) = routes();
    let served = served(&router);
    let documented = documented(document());
    assert_eq!(document()["openapi"], "3.1.0");
    assert!(
        served.contains(&("post".to_owned(), "/api/v1/chats".to_owned())),
        "the router's routes could not be read: {served:?}"
    );
    for (method, path) in [("post", "/api/v1/ai-sdk/chat"), ("post", "/v1/responses")] {
        assert!(
            served.contains(&(method.to_owned(), path.to_owned())),
            "the doors' {method} {path} is not served: {served:?}"
        );
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but not documented: {undocumented:?}"
    );
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
}

#[test]
fn a_route_added_without_documentation_is_caught() {
    let (router, _) = routes();
    let router = router.route(
        "/api/v1/undocumented",
        axum::routing::get(|| async { "hi" }),
    );
    let served = served(&router);
    assert!(!served.is_subset(&documented(document())));
}

/// Every `example` next to a `schema` (a media type) and every schema's own `example`,
/// with the JSON pointer of the schema it must satisfy.
fn examples(value: &Value, pointer: &str, found: &mut Vec<(String, Value)>) {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::Object(fields) => {
            if let Some(example) = fields.get("example") {
                if fields.contains_key("schema") {
                    found.push((format!("{pointer}/schema"), example.clone()));
                } else {
                    found.push((pointer.to_owned(), example.clone()));
                }
            }
            for (key, child) in fields {
                if key != "example" {
                    examples(child, &format!("{pointer}/{}", escape(key)), found);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                examples(child, &format!("{pointer}/{i}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_example_in_the_document_validates_against_its_schema() {
    const URL: &str = "http://keel.invalid/openapi.json";
    let doc = document();
    let mut found = Vec::new();
    examples(doc, "", &mut found);
    let names: Vec<&str> = found.iter().map(|(at, _)| at.as_str()).collect();
    for expected in ["CreateChat", "SendMessage", "ToolResults", "Content"] {
        assert!(
            names
                .iter()
                .any(|at| at.ends_with(&format!("/schemas/{expected}"))),
            "no example for {expected}: {names:?}"
        );
    }
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(URL, doc.clone()).unwrap();
    let mut schemas = boon::Schemas::new();
    for (at, example) in &found {
        let index = compiler
            .compile(&format!("{URL}#{at}"), &mut schemas)
            .unwrap_or_else(|e| panic!("{at}: {e}"));
        if let Err(error) = schemas.validate(example, index) {
            panic!("the example at {at} does not match its schema: {error}");
        }
    }
}

#[test]
fn an_example_that_breaks_its_schema_is_caught() {
    const URL: &str = "http://keel.invalid/openapi.json";
    let mut compiler = boon::Compiler::new();
    compiler.add_resource(URL, document().clone()).unwrap();
    let mut schemas = boon::Schemas::new();
    let index = compiler
        .compile(
            &format!("{URL}#/components/schemas/ToolResults"),
            &mut schemas,
        )
        .unwrap();
    assert!(
        schemas
            .validate(&serde_json::json!({"results": "x"}), index)
            .is_err()
    );
}
