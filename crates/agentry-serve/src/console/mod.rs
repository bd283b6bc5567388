//! The browser console: one page and its scripts and styles, embedded in the
//! binary and served at `/console/` (`GET /` redirects there).
//!
//! The assets are open (no token): they hold no data. The page asks for a
//! tenant's token, keeps it in the tab's `sessionStorage` and sends it as
//! `Authorization` on every call, which goes to the same public routes any
//! client uses. Every asset is answered with a Content-Security-Policy that
//! allows only this origin's scripts, styles and connections, so nothing a
//! run's events carry can run as script (the scripts also build the DOM with
//! `textContent`, never HTML).

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::error::ApiError;
use super::table::App;

/// Where the page is.
pub const CONSOLE_PATH: &str = "/console/";

/// The policy every console answer carries.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = include_str!("assets/console.html");

/// Each asset under `/console/`: its name, content type and text.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("assets/console.css"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/api.js"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/console.js"),
    ),
    (
        "lanes.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/lanes.js"),
    ),
    (
        "run.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/run.js"),
    ),
];

/// Whether `path` is one of the console's open paths (`GET` needs no token).
pub fn is_open_path(path: &str) -> bool {
    path == "/" || path == "/console" || path.starts_with(CONSOLE_PATH)
}

/// The console's routes.
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/", get(to_console))
        .route("/console", get(to_console))
        .route(CONSOLE_PATH, get(page))
        .route("/console/{file}", get(asset))
}

async fn to_console() -> Redirect {
    Redirect::to(CONSOLE_PATH)
}

async fn page() -> Response {
    answer("text/html; charset=utf-8", HTML)
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, text)) => answer(content_type, text),
        None => ApiError::new(StatusCode::NOT_FOUND, "no such console asset").into_response(),
    }
}

fn answer(content_type: &'static str, text: &'static str) -> Response {
    let mut response = text.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change only with the binary; the page is small.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_every_asset_and_no_other_origin() {
        for (name, _, _) in ASSETS {
            assert!(
                HTML.contains(&format!("/console/{name}")),
                "{name} is not loaded"
            );
        }
        for (_, _, text) in ASSETS.iter().chain([&("", "", HTML)]) {
            assert!(!text.contains("http://") && !text.contains("https://"));
            assert!(!text.contains("innerHTML"), "DOM is built from text");
            assert!(!text.contains(" style=\""), "no inline styles");
        }
        assert!(!HTML.contains("<script>"), "no inline scripts");
    }

    #[test]
    fn open_paths_are_the_console_only() {
        for path in ["/", "/console", "/console/", "/console/api.js"] {
            assert!(is_open_path(path), "{path}");
        }
        for path in ["/runs", "/consoles", "/agents", "/metrics", "//console/"] {
            assert!(!is_open_path(path), "{path}");
        }
    }
}
