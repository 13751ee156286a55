//! The OpenAPI 3.1 document, derived from the code: each handler's `#[utoipa::path]` gives its
//! method, path, parameters and answers, the types it exchanges give the schemas, and the
//! router registers handlers through `utoipa_axum::routes!`, which reads the same attribute —
//! so the router and the document cannot name different routes. A test holds the router that
//! is served against the document, and every example in the document against its schema.

use std::sync::LazyLock;

use serde::Deserialize;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, ResponseBuilder};
use utoipa::{IntoParams, Modify, OpenApi};

/// The document's fixed parts; the paths come from the router (see [`crate::api::routes`]).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Keel HTTP API",
        version = "1.0.0",
        description = "Durable agent chats: create chats, send messages, follow live events, \
                       interrupt, answer client-side tool calls."
    ),
    security((), ("bearer" = [])),
    modifiers(&Bearer),
    components(schemas(crate::api::error::ErrorBody))
)]
pub(super) struct ApiDoc;

/// `Idempotency-Key`: a retry with the same key returns the first outcome.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(
    dead_code,
    reason = "describes the header; handlers read it with their own checks"
)]
pub(super) struct IdempotencyKey {
    /// Visible ASCII; a retry with the same key returns the first outcome.
    #[serde(rename = "Idempotency-Key")]
    #[param(min_length = 1, max_length = 255, pattern = "^[!-~]([ -~]*[!-~])?$")]
    pub key: Option<String>,
}

/// Bearer tokens (`keel users add`), required once any user is configured.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The statuses any authenticated route may answer with the error body, whatever the
/// handler: bad input, no or a wrong token, an unknown id, a state that forbids the request,
/// a body too large or not JSON.
/// 429 is a cap or, for a request that starts a run, a used-up budget.
const ERROR_STATUSES: [&str; 7] = ["400", "401", "404", "409", "413", "415", "429"];

/// Adds the error answers to every operation of the authenticated API (`/api/v1`, `/v1`)
/// but the document itself.
pub(crate) fn add_error_answers(doc: &mut Document) {
    for (path, item) in doc.paths.paths.iter_mut() {
        let authenticated = (path.starts_with("/api/v1/") || path.starts_with("/v1/"))
            && path != "/api/v1/openapi.json";
        if !authenticated {
            continue;
        }
        let operations: [&mut Option<Operation>; 5] = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            for status in ERROR_STATUSES {
                operation
                    .responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| {
                        ResponseBuilder::new()
                            .description("Error")
                            .content(
                                "application/json",
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name("Error")))
                                    .build(),
                            )
                            .build()
                            .into()
                    });
            }
        }
    }
}

/// The document as JSON, built once.
pub(super) fn document() -> &'static serde_json::Value {
    static DOCUMENT: LazyLock<serde_json::Value> = LazyLock::new(|| {
        let (_, doc) = crate::api::routes();
        // Serialising plain data (strings, maps) cannot fail.
        serde_json::to_value(&doc).unwrap_or_default()
    });
    &DOCUMENT
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    use super::*;

    const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

    /// The (method, path) pairs a router serves, read from its `Debug` form (axum offers no
    /// other listing): each route id's path, and the methods its method router has a handler
    /// for. A change of that form finds nothing, and the comparison below then fails.
    fn served(router: &axum::Router<crate::api::state::AppState>) -> BTreeSet<(String, String)> {
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
        let (router, _) = crate::api::routes();
        let served = served(&router);
        let documented = documented(document());
        assert_eq!(document()["openapi"], "3.1.0");
        assert!(
            served.contains(&("post".to_owned(), "/api/v1/chats".to_owned())),
            "the router's routes could not be read: {served:?}"
        );
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
        let (router, _) = crate::api::routes();
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
}
