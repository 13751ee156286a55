//! The OpenAPI 3.1 document, derived from the code: each handler's `#[utoipa::path]` gives its
//! method, path, parameters and answers, the types it exchanges give the schemas, and the
//! router registers handlers through `utoipa_axum::routes!`, which reads the same attribute —
//! so the router and the document cannot name different routes. The served router is held
//! against the document, and every example in it against its schema, by a test of the crate
//! that adds the compatible doors, so that the whole document is checked.

use std::sync::Arc;

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

/// The document a router was built with, as JSON, for the route that serves it.
#[derive(Clone)]
pub(super) struct Served(pub Arc<serde_json::Value>);

impl Served {
    pub(super) fn of(document: &Document) -> Self {
        // Serialising plain data (strings, maps) cannot fail.
        Self(Arc::new(serde_json::to_value(document).unwrap_or_default()))
    }
}
