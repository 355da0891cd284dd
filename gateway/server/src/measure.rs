//! Times every HTTP request by the face that served it: the one place request durations are
//! recorded (`gateway_http_request_duration_seconds`).
//!
//! The layer is a route layer, so it runs after routing and reads the matched route's
//! template (`/v1/sessions/{id}`): the label set stays bounded whatever paths clients send.
//! A request is timed to its response head; a stream counts until it opens, not while it
//! lasts (its life is the client's choice, not the gateway's latency).

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use gateway_services::Metrics;

/// `router` with each of its routes timed under `face`.
pub fn measured<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    face: &'static str,
    metrics: Arc<Metrics>,
) -> Router<S> {
    router.route_layer(middleware::from_fn_with_state(Face { face, metrics }, time_request))
}

#[derive(Clone)]
struct Face {
    face: &'static str,
    metrics: Arc<Metrics>,
}

async fn time_request(State(f): State<Face>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let response = next.run(req).await;
    f.metrics.request(f.face, &method, route.as_deref(), response.status().as_u16(), started.elapsed());
    response
}
