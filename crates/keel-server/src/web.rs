//! The web page served at `/`: a chat client in plain HTML, CSS and JavaScript, embedded in
//! the binary so the daemon needs no files, build step or network access to serve it.
//!
//! The page talks to the public API only (`/api/v1`), with the bearer token the user enters
//! when the server asks for one. Markdown, sanitising and code highlighting come from
//! pinned copies of `marked`, `DOMPurify` and `highlight.js` under `web/vendor/` (versions
//! and licences in its README), served from `/vendor/`.

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const APP_CSS: &str = include_str!("../web/app.css");

/// The vendored libraries: (path, content type, body).
const VENDOR: &[(&str, &str, &str)] = &[
    (
        "/vendor/marked.umd.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/vendor/marked.umd.js"),
    ),
    (
        "/vendor/purify.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/vendor/purify.min.js"),
    ),
    (
        "/vendor/highlight.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../web/vendor/highlight.min.js"),
    ),
    (
        "/vendor/highlight.css",
        "text/css; charset=utf-8",
        include_str!("../web/vendor/highlight.css"),
    ),
];

/// Everything the page loads comes from this origin: no CDN, no outside requests.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The page's routes: `/`, `/app.js`, `/app.css` and the vendored libraries. Generic over
/// the state so it merges into the API router before the state is supplied.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new();
    for &(path, content_type, body) in VENDOR {
        router = router.route(path, get(move || async move { asset(content_type, body) }));
    }
    router
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }),
        )
        .route(
            "/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The assets change with the binary; revalidating is cheap on loopback.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::Service as _;

    async fn get(path: &str) -> (StatusCode, String, String) {
        let mut app = router::<()>();
        let response = app
            .call(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            content_type,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn serves_the_page_and_its_assets() {
        let (status, content_type, body) = get("/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(content_type.starts_with("text/html"));
        assert!(body.contains("/app.js") && body.contains("/app.css"));
        let (_, content_type, body) = get("/app.js").await;
        assert!(content_type.starts_with("text/javascript"));
        assert!(body.contains("/api/v1"));
        let (_, content_type, _) = get("/app.css").await;
        assert!(content_type.starts_with("text/css"));
        for &(path, expected, _) in VENDOR {
            let (status, content_type, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(content_type, expected, "{path}");
            assert!(!body.is_empty(), "{path}");
            assert!(
                INDEX_HTML.contains(path),
                "{path} is not loaded by the page"
            );
        }
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for asset in [INDEX_HTML, APP_JS, APP_CSS] {
            assert!(!asset.contains("http://") && !asset.contains("https://"));
        }
    }
}
