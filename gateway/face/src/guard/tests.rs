//! The guard's order, seen from outside: what answers, and whether the face or the handler was
//! ever asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Extension, State};
use axum::http::{Method, Request, StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use gateway_runtime::AdmissionLimits;
use gateway_runtime::testing::TestGateway;
use gateway_services::auth::{Authenticator, Principal, generate_key};
use tower::ServiceExt;

use super::{GuardedFace, Refusal, guard};
use crate::FaceContext;

/// A face that serves API keys and keyless local programs but nobody at `/private`, counts
/// what it is asked, and refuses in plain text.
#[derive(Clone)]
struct Probe {
    ctx: FaceContext,
    /// How often the face was asked whether it serves a principal.
    judged: Arc<AtomicUsize>,
    /// How often the handler ran.
    handled: Arc<AtomicUsize>,
}

impl GuardedFace for Probe {
    type Denied = &'static str;

    fn context(&self) -> &FaceContext {
        &self.ctx
    }

    async fn admits(&self, principal: &Principal, _: &Method, uri: &Uri) -> Result<(), &'static str> {
        self.judged.fetch_add(1, Ordering::SeqCst);
        match (principal, uri.path()) {
            (_, "/private") | (Principal::Environment { .. }, _) => Err("not here"),
            (Principal::Loopback | Principal::Key(_), _) => Ok(()),
        }
    }

    fn refusal(&self, refusal: Refusal<&'static str>, _: &Method, _: &Uri) -> Response {
        (refusal.status(), refusal.to_string()).into_response()
    }
}

/// Answers with the principal the guard put in the request's extensions.
async fn whoami(State(probe): State<Probe>, Extension(principal): Extension<Principal>) -> String {
    probe.handled.fetch_add(1, Ordering::SeqCst);
    format!("{principal:?}")
}

async fn rig(limits: AdmissionLimits) -> (TestGateway, Probe, Router) {
    let gw = TestGateway::builder().no_workers().admission(limits).build().await;
    let auth = Arc::new(Authenticator::new(Arc::clone(&gw.store)));
    let probe =
        Probe { ctx: FaceContext::of(&gw, auth, "http://127.0.0.1"), judged: Arc::default(), handled: Arc::default() };
    let router = Router::new()
        .route("/", get(whoami))
        .route("/private", get(whoami))
        .layer(middleware::from_fn_with_state(std::sync::Arc::new(probe.clone()), guard::<Probe>))
        .with_state(probe.clone());
    (gw, probe, router)
}

async fn call(router: &Router, path: &str, key: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::get(path).header("host", "127.0.0.1");
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    let response = router.clone().oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_busy_process_refuses_before_the_caller_is_authenticated() {
    let limits = AdmissionLimits { max_requests: 1, ..AdmissionLimits::default() };
    let (gw, probe, router) = rig(limits).await;
    // Not a loopback peer and no keys: authentication alone would answer 401.
    assert_eq!(call(&router, "/", None).await.0, StatusCode::UNAUTHORIZED);
    let held = gw.coordinator.load().try_request(None).unwrap();
    let (status, body) = call(&router, "/", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("busy"), "{body}");
    drop(held);
    assert_eq!(call(&router, "/", None).await.0, StatusCode::UNAUTHORIZED, "the place is free again");
    assert_eq!(probe.judged.load(Ordering::SeqCst), 0);
    assert_eq!(probe.handled.load(Ordering::SeqCst), 0);
    gw.stop().await;
}

#[tokio::test]
async fn an_unauthenticated_request_never_reaches_the_face_or_the_handler() {
    let (gw, probe, router) = rig(AdmissionLimits::default()).await;
    let key = generate_key();
    gw.store.create_api_key("probe", &key.hash).await.unwrap();
    for presented in [None, Some("gwk_not_a_key")] {
        let (status, body) = call(&router, "/", presented).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{presented:?}: {body}");
    }
    assert_eq!(probe.judged.load(Ordering::SeqCst), 0);
    assert_eq!(probe.handled.load(Ordering::SeqCst), 0);
    gw.stop().await;
}

#[tokio::test]
async fn the_handler_finds_the_authenticated_principal_in_the_extensions() {
    let (gw, probe, router) = rig(AdmissionLimits::default()).await;
    let key = generate_key();
    let stored = gw.store.create_api_key("probe", &key.hash).await.unwrap();
    let (status, body) = call(&router, "/", Some(&key.secret)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, format!("{:?}", Principal::Key(stored.id)));
    assert_eq!((probe.judged.load(Ordering::SeqCst), probe.handled.load(Ordering::SeqCst)), (1, 1));
    gw.stop().await;
}

#[tokio::test]
async fn a_caller_the_face_does_not_serve_is_refused_in_the_faces_words() {
    let (gw, probe, router) = rig(AdmissionLimits::default()).await;
    let key = generate_key();
    gw.store.create_api_key("probe", &key.hash).await.unwrap();
    let (status, body) = call(&router, "/private", Some(&key.secret)).await;
    assert_eq!((status, body.as_str()), (StatusCode::FORBIDDEN, "not here"));
    assert_eq!((probe.judged.load(Ordering::SeqCst), probe.handled.load(Ordering::SeqCst)), (1, 0));
    gw.stop().await;
}
