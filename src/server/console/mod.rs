//! The web console of `capsule serve` (docs/console.md): server-rendered pages at `/`, on
//! the same origin and TLS as `/v1`, for holders of a bearer token.
//!
//! Sign-in is a form taking the token (`POST /login`); it opens a session kept in memory
//! and named by a random cookie (HttpOnly, Secure, SameSite=Strict, with an expiry). Every
//! request of a session checks its token again, so a token revoked or expired ends the
//! sessions opened with it. State-changing requests (sign-in, sign-out) are POSTs that must
//! come from this origin (`Origin`) and carry a CSRF token: the sign-in form's double-submit
//! cookie, the session's own token for sign-out. Pages that read flows or packets run under
//! the session's user with the API's limits ([`Guard`]) and write the API's audit line.
//! Every asset is compiled into the binary; the Content-Security-Policy of every page lets
//! it load nothing from elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::{Method, Request, Response, StatusCode};

use super::audit::Record;
use super::body::Body;
use super::guard::Guard;
use super::Server;
use crate::tokens::Auth;

mod alerts;
mod analytics;
mod pages;
mod sessions;
mod status;
mod timeline;

/// The session cookie's name.
const SESSION_COOKIE: &str = "capsule_session";
/// The sign-in form's CSRF cookie (double submit: the form carries the same value).
const LOGIN_COOKIE: &str = "capsule_login";
/// How long a session lasts after its sign-in.
const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most (the oldest goes first past it).
const MAX_SESSIONS: usize = 10_000;
/// Bytes of a form body read at most.
const MAX_FORM: usize = 4096;

/// The console's stylesheet and script, compiled in.
const CSS: &str = include_str!("console.css");
const JS: &str = include_str!("console.js");

/// What every console page may load: itself, nothing else.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                   base-uri 'none'";

/// One signed-in browser.
#[derive(Debug, Clone)]
struct Session {
    user: String,
    /// The token it signed in with, checked again at each request (revocation, expiry).
    token: String,
    /// The CSRF token its forms carry.
    csrf: String,
    expires: Instant,
}

/// The console's open sessions, by cookie value.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn open(&self, user: String, token: String) -> (String, Session) {
        let id = random_hex();
        let s = Session {
            user,
            token,
            csrf: random_hex(),
            expires: Instant::now() + SESSION_TTL,
        };
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        m.retain(|_, s| s.expires > now);
        if m.len() >= MAX_SESSIONS {
            if let Some(k) = m
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
            {
                m.remove(&k);
            }
        }
        m.insert(id.clone(), s.clone());
        (id, s)
    }

    fn get(&self, id: &str) -> Option<Session> {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        match m.get(id) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                m.remove(id);
                None
            }
            None => None,
        }
    }

    fn close(&self, id: &str) {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// 32 random bytes as hex: a session id or a CSRF token.
fn random_hex() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the system's random source");
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `path` is the console's (everything but `/v1/`, `/healthz` and `/metrics`).
pub(super) fn owns(path: &str) -> bool {
    matches!(
        path,
        "/" | "/login"
            | "/logout"
            | "/sessions"
            | "/timeline"
            | "/analytics"
            | "/alerts"
            | "/status"
            | "/download"
            | "/selection"
            | "/static/console.css"
            | "/static/console.js"
            | "/favicon.ico"
    )
}

/// A console page's response: HTML, with the headers that keep it to this origin.
fn html(status: StatusCode, body: String) -> Response<Body> {
    secured(Response::builder().status(status))
        .header("content-type", "text/html; charset=utf-8")
        .body(Body::Full(Some(Bytes::from(body))))
        .expect("a valid response")
}

fn secured(b: hyper::http::response::Builder) -> hyper::http::response::Builder {
    b.header("content-security-policy", CSP)
        .header("x-frame-options", "DENY")
        .header("x-content-type-options", "nosniff")
        .header("referrer-policy", "same-origin")
        .header("cache-control", "no-store")
}

/// A redirect (303: the next request is a GET) to `to`, a path of this origin.
fn redirect(to: &str) -> Response<Body> {
    secured(Response::builder().status(StatusCode::SEE_OTHER))
        .header("location", to)
        .body(Body::Full(None))
        .expect("a valid response")
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(req: &'a Request<hyper::body::Incoming>, name: &str) -> Option<&'a str> {
    req.headers()
        .get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Whether a POST comes from a page of this origin: its `Origin` is `https://` and the
/// `Host` it was sent to (a browser sends `Origin` with every POST).
fn same_origin(req: &Request<hyper::body::Incoming>) -> bool {
    let h = |n| req.headers().get(n).and_then(|v| v.to_str().ok());
    match (h(hyper::header::ORIGIN), h(hyper::header::HOST)) {
        (Some(o), Some(host)) => o.strip_prefix("https://") == Some(host),
        _ => false,
    }
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Reads a form body (`application/x-www-form-urlencoded`) of at most [`MAX_FORM`] bytes.
async fn read_form(body: hyper::body::Incoming) -> Result<HashMap<String, String>, String> {
    use http_body::Body as _;
    let mut body = body;
    let mut buf = Vec::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|e| format!("cannot read the form: {e}"))?;
        if let Ok(d) = frame.into_data() {
            buf.extend_from_slice(&d);
            if buf.len() > MAX_FORM {
                return Err(format!("the form is larger than {MAX_FORM} bytes"));
            }
        }
    }
    let text = String::from_utf8(buf).map_err(|_| "the form is not UTF-8".to_string())?;
    let mut out = HashMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = super::params::url_decode(k).ok_or("a bad escape in the form")?;
        let v = super::params::url_decode(v).ok_or("a bad escape in the form")?;
        out.insert(k, v);
    }
    Ok(out)
}

/// Where to go after signing in: `next` when it is a path of this origin, else the first
/// view.
fn next_of(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

/// Answers a request for a console path ([`owns`]).
pub(super) async fn handle(
    server: Arc<Server>,
    mut rec: Record,
    req: Request<hyper::body::Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let q = req.uri().query().map(str::to_string);
    let method = req.method().clone();
    // Written for requests refused before a user is known: a bounded line, not fsynced.
    let refused = |rec: &mut Record, resp: Response<Body>, outcome: &str| {
        rec.bound_for_anonymous();
        let r = rec.finish(resp.status(), outcome, None, 0);
        tokio::task::block_in_place(|| server.audit.record_unsynced(&r));
        resp
    };
    match (&method, path.as_str()) {
        (&Method::GET, "/static/console.css") => {
            // The look of the sign-in page: no data, served to anyone.
            return secured(Response::builder())
                .header("content-type", "text/css; charset=utf-8")
                .body(Body::Full(Some(Bytes::from_static(CSS.as_bytes()))))
                .expect("a valid response");
        }
        (&Method::GET, "/favicon.ico") => {
            // Browsers ask for it on their own: nothing, rather than an error in their console.
            return secured(Response::builder().status(StatusCode::NO_CONTENT))
                .body(Body::Full(None))
                .expect("a valid response");
        }
        (&Method::GET, "/login") => {
            let p = super::params::params(q.as_deref(), &["next"]).unwrap_or_default();
            let login = cookie(&req, LOGIN_COOKIE);
            return login_form(&next_of(p.get("next").map(String::as_str)), login, None);
        }
        (&Method::POST, "/login") => {
            let login = cookie(&req, LOGIN_COOKIE).map(str::to_string);
            let origin_ok = same_origin(&req);
            let form = read_form(req.into_body()).await;
            let form = match form {
                Ok(f) => f,
                Err(e) => {
                    let r = html(
                        StatusCode::BAD_REQUEST,
                        pages::message("Sign-in failed", &e),
                    );
                    return refused(&mut rec, r, &e);
                }
            };
            let next = next_of(form.get("next").map(String::as_str));
            let csrf_ok = matches!((&login, form.get("csrf")),
                (Some(c), Some(f)) if same_secret(c, f));
            if !origin_ok || !csrf_ok {
                let m = "the sign-in form did not come from this console (no matching Origin \
                         or CSRF token): reload the sign-in page";
                let r = login_form(&next, login.as_deref(), Some((StatusCode::FORBIDDEN, m)));
                return refused(
                    &mut rec,
                    r,
                    "console sign-in refused: cross-site or no CSRF token",
                );
            }
            let token = form
                .get("token")
                .map(|t| t.trim().to_string())
                .unwrap_or_default();
            let auth = tokio::task::block_in_place(|| server.tokens.check(&token));
            let user = match auth {
                Auth::User(u) => u,
                other => {
                    let why = match other {
                        Auth::Expired(u) => {
                            rec.user = Some(u);
                            "console sign-in refused: expired token"
                        }
                        _ => "console sign-in refused: unknown token (or revoked)",
                    };
                    let r = login_form(
                        &next,
                        login.as_deref(),
                        Some((StatusCode::UNAUTHORIZED, "the token is not valid")),
                    );
                    return refused(&mut rec, r, why);
                }
            };
            let (id, _) = server.console.open(user.clone(), token);
            rec.user = Some(user);
            let mut r = redirect(&next);
            let h = r.headers_mut();
            h.append(
                hyper::header::SET_COOKIE,
                session_cookie(&id, SESSION_TTL.as_secs())
                    .parse()
                    .expect("a valid header"),
            );
            h.append(
                hyper::header::SET_COOKIE,
                format!(
                    "{LOGIN_COOKIE}=; Path=/login; Max-Age=0; HttpOnly; Secure; SameSite=Strict"
                )
                .parse()
                .expect("a valid header"),
            );
            let done = rec.finish(r.status(), "console sign-in", None, 0);
            tokio::task::block_in_place(|| server.audit.record(&done));
            return r;
        }
        _ => {}
    }
    // Everything else needs a session.
    let sid = cookie(&req, SESSION_COOKIE).map(str::to_string);
    let session = sid.as_deref().and_then(|id| server.console.get(id));
    let session = match session {
        Some(s) => match tokio::task::block_in_place(|| server.tokens.check(&s.token)) {
            Auth::User(_) => Some(s),
            _ => {
                if let Some(id) = &sid {
                    server.console.close(id);
                }
                None
            }
        },
        None => None,
    };
    let Some(session) = session else {
        let r = if method == Method::GET {
            let here = match &q {
                Some(q) => format!("{path}?{q}"),
                None => path.clone(),
            };
            redirect(&format!("/login?next={}", pages::enc(&here)))
        } else {
            html(
                StatusCode::UNAUTHORIZED,
                pages::message("Signed out", "sign in again: this session is not valid"),
            )
        };
        return refused(&mut rec, r, "unauthorized: no console session");
    };
    rec.user = Some(session.user.clone());
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("HOST")
        .to_string();
    let g = Guard {
        server: server.clone(),
        rec,
        user: session.user.clone(),
    };
    let nav = pages::Nav {
        user: session.user.clone(),
        csrf: session.csrf.clone(),
        host,
    };
    match (&method, path.as_str()) {
        (&Method::POST, "/logout") => {
            let origin_ok = same_origin(&req);
            let form = read_form(req.into_body()).await.unwrap_or_default();
            let csrf_ok = form
                .get("csrf")
                .is_some_and(|c| same_secret(c, &session.csrf));
            if !origin_ok || !csrf_ok {
                let r = html(
                    StatusCode::FORBIDDEN,
                    pages::message(
                        "Sign-out refused",
                        "the sign-out did not come from this console (no matching Origin or \
                         CSRF token)",
                    ),
                );
                return g.done(r, "console sign-out refused: cross-site or no CSRF token");
            }
            if let Some(id) = &sid {
                server.console.close(id);
            }
            let mut r = redirect("/login");
            r.headers_mut().append(
                hyper::header::SET_COOKIE,
                session_cookie("", 0).parse().expect("a valid header"),
            );
            g.done(r, "console sign-out")
        }
        (&Method::GET, "/static/console.js") => secured(Response::builder())
            .header("content-type", "text/javascript; charset=utf-8")
            .body(Body::Full(Some(Bytes::from_static(JS.as_bytes()))))
            .expect("a valid response"),
        // The first view: the whole store's timeline (from the index's millisecond series,
        // fast on a big store), where a window is picked for the others.
        (&Method::GET, "/") => redirect(&match &q {
            Some(q) => format!("/timeline?{q}"),
            None => "/timeline".to_string(),
        }),
        (&Method::GET, "/sessions") => sessions::sessions(g, nav, q.as_deref()).await,
        (&Method::GET, "/selection") => sessions::size(g, q.as_deref()).await,
        (&Method::GET, "/timeline") => timeline::timeline(g, nav, q.as_deref()).await,
        (&Method::GET, "/analytics") => analytics::analytics(g, nav, q.as_deref()).await,
        (&Method::GET, "/alerts") => alerts::alerts(g, nav, q.as_deref()).await,
        (&Method::GET, "/status") => status::status(g, nav).await,
        (&Method::GET, "/download") => super::stream::packets(g, q.as_deref()).await,
        _ => {
            let r = html(
                StatusCode::METHOD_NOT_ALLOWED,
                pages::message("Not allowed", &format!("{method} {path} is not served")),
            );
            g.done(r, "method not allowed")
        }
    }
}

/// The `Set-Cookie` value of session `id` lasting `max_age` seconds (0: deleted).
fn session_cookie(id: &str, max_age: u64) -> String {
    format!("{SESSION_COOKIE}={id}; Path=/; Max-Age={max_age}; HttpOnly; Secure; SameSite=Strict")
}

/// The sign-in page and its CSRF cookie (the browser's own when it has one, so that two
/// loads of the page agree), with an error when a sign-in failed.
fn login_form(
    next: &str,
    login: Option<&str>,
    error: Option<(StatusCode, &str)>,
) -> Response<Body> {
    let csrf = match login {
        Some(c) if c.len() == 64 && c.bytes().all(|b| b.is_ascii_hexdigit()) => c.to_string(),
        _ => random_hex(),
    };
    let status = error.map_or(StatusCode::OK, |e| e.0);
    let mut r = html(status, pages::login(next, &csrf, error.map(|e| e.1)));
    r.headers_mut().append(
        hyper::header::SET_COOKIE,
        format!(
            "{LOGIN_COOKIE}={csrf}; Path=/login; Max-Age=600; HttpOnly; Secure; SameSite=Strict"
        )
        .parse()
        .expect("a valid header"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_origin() {
        assert_eq!(next_of(Some("/timeline?from=1")), "/timeline?from=1");
        assert_eq!(next_of(Some("//evil.example/")), "/");
        assert_eq!(next_of(Some("https://evil.example/")), "/");
        assert_eq!(next_of(Some("/\\evil.example")), "/");
        assert_eq!(next_of(None), "/");
    }

    #[test]
    fn sessions_expire_and_close() {
        let s = Sessions::default();
        let (id, sess) = s.open("alice".into(), "t".into());
        assert_eq!(s.get(&id).unwrap().user, "alice");
        assert_eq!(sess.csrf.len(), 64);
        assert!(s.get("nope").is_none());
        s.map.lock().unwrap().get_mut(&id).unwrap().expires = Instant::now();
        assert!(s.get(&id).is_none(), "an expired session is gone");
        let (id, _) = s.open("bob".into(), "t".into());
        s.close(&id);
        assert!(s.get(&id).is_none());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
