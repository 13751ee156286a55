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

/// The page's own files and the vendored libraries: (path, content type, body). The
/// scripts are loaded in this order by `index.html`.
const ASSETS: &[(&str, &str, &str)] = &[
    ("/app.css", CSS, include_str!("../web/app.css")),
    ("/api.js", JS, include_str!("../web/api.js")),
    ("/render.js", JS, include_str!("../web/render.js")),
    ("/list.js", JS, include_str!("../web/list.js")),
    ("/chat.js", JS, include_str!("../web/chat.js")),
    ("/app.js", JS, include_str!("../web/app.js")),
    (
        "/favicon.svg",
        "image/svg+xml",
        include_str!("../web/favicon.svg"),
    ),
    (
        "/vendor/marked.umd.js",
        JS,
        include_str!("../web/vendor/marked.umd.js"),
    ),
    (
        "/vendor/purify.min.js",
        JS,
        include_str!("../web/vendor/purify.min.js"),
    ),
    (
        "/vendor/highlight.min.js",
        JS,
        include_str!("../web/vendor/highlight.min.js"),
    ),
    (
        "/vendor/highlight.css",
        CSS,
        include_str!("../web/vendor/highlight.css"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// The icon browsers ask for on their own: a 32×32 PNG in an ICO file.
const FAVICON_ICO: &[u8] = include_bytes!("../web/favicon.ico");

/// Everything the page loads comes from this origin: no CDN, no outside requests.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The page's routes: `/` and `/c/{chat_id}` (a chat's own address: the same page, which
/// opens that chat or says there is none), its scripts and styles, its icon and the vendored
/// libraries. Generic over the state so it merges into the API router before the state is
/// supplied.
pub(crate) fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new();
    for &(path, content_type, body) in ASSETS {
        router = router.route(path, get(move || async move { asset(content_type, body) }));
    }
    router
        .route("/", get(|| async { asset(HTML, INDEX_HTML) }))
        .route("/c/{chat_id}", get(|| async { asset(HTML, INDEX_HTML) }))
        .route(
            "/favicon.ico",
            get(|| async { asset("image/x-icon", FAVICON_ICO) }),
        )
}

fn asset(content_type: &'static str, body: impl IntoResponse) -> Response {
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
        for page in ["/", "/c/0b7e2d4c-5f7a-4d3e-9d55-0a1b2c3d4e5f"] {
            let (status, content_type, body) = get(page).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            assert!(content_type.starts_with("text/html"));
            assert_eq!(body, INDEX_HTML);
        }
        let (_, _, body) = get("/api.js").await;
        assert!(body.contains("/api/v1"));
        for &(path, expected, _) in ASSETS {
            let (status, content_type, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(content_type, expected, "{path}");
            assert!(!body.is_empty(), "{path}");
            assert!(
                INDEX_HTML.contains(&format!("\"{path}\"")),
                "{path} is not loaded by the page"
            );
        }
        let mut app = router::<()>();
        let response = app
            .call(Request::get("/favicon.ico").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[header::CONTENT_TYPE], "image/x-icon");
        // An ICO file: reserved 0, type 1 (icon), one image.
        assert_eq!(FAVICON_ICO[..6], [0, 0, 1, 0, 1, 0]);
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        assert!(!INDEX_HTML.contains("http://") && !INDEX_HTML.contains("https://"));
        for &(path, _, body) in ASSETS {
            // The vendored libraries name sites in comments; the icon's `xmlns` names a
            // namespace, not something to load.
            if path.starts_with("/vendor/") || path.ends_with(".svg") {
                continue;
            }
            assert!(
                !body.contains("https://") && !body.contains("http://"),
                "{path}"
            );
        }
    }
}
