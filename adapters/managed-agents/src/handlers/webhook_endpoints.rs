//! `/v1/webhooks`: webhook endpoints (an extension, docs/adr/0013). The signing secret is in
//! the creation's answer only.

use std::sync::Arc;

use axum::extract::State;
use axum::{Extension, Json};
use gateway_core::WebhookId;
use gateway_services::auth::Principal;
use gateway_store::{EndpointOrigin, WebhookEndpoint};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Reply;
use crate::ManagedAgents;
use crate::error::ApiError;
use crate::extract::{ApiJson, PathId};
use crate::webhooks::WebhookError;
use crate::wire::{opt_time, time};

/// Longest endpoint URL and description.
const MAX_URL: usize = 2048;
const MAX_DESCRIPTION: usize = 512;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointCreate {
    url: String,
    #[serde(default)]
    event_types: Vec<String>,
    #[serde(default)]
    description: Option<String>,
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Invalid(m) => ApiError::invalid(m),
            WebhookError::Runtime(r) => r.into(),
        }
    }
}

fn endpoint_out(e: &WebhookEndpoint, secret: Option<&str>) -> Value {
    let spec = &e.spec;
    let mut v = json!({
        "id": spec.id,
        "type": "webhook_endpoint",
        "url": spec.url,
        "event_types": spec.event_types,
        "description": spec.description,
        "origin": match spec.origin { EndpointOrigin::Config => "config", EndpointOrigin::Api => "api" },
        "status": if e.enabled { "enabled" } else { "disabled" },
        "consecutive_failures": e.consecutive_failures,
        "created_at": time(e.created_at),
        "disabled_at": opt_time(e.disabled_at),
    });
    if let Some(secret) = secret {
        v["secret"] = json!(secret);
    }
    v
}

/// `POST /v1/webhooks`: within `webhook_delivery.max_endpoints_per_key` endpoints of the
/// calling key (400 `webhook_endpoint_limit` beyond).
pub async fn create(
    State(api): State<Arc<ManagedAgents>>,
    principal: Option<Extension<Principal>>,
    ApiJson(body): ApiJson<EndpointCreate>,
) -> Reply {
    if body.url.len() > MAX_URL || body.description.as_ref().is_some_and(|d| d.len() > MAX_DESCRIPTION) {
        return Err(ApiError::invalid(format!("url holds at most {MAX_URL} bytes, description {MAX_DESCRIPTION}")));
    }
    let creator = crate::auth::owner(principal.as_deref());
    let (endpoint, secret) = api.webhooks.create(&body.url, body.event_types, body.description, &creator).await?;
    Ok(Json(endpoint_out(&endpoint, Some(&secret))))
}

pub async fn list(State(api): State<Arc<ManagedAgents>>) -> Reply {
    let data: Vec<Value> = api.webhooks.list().await?.iter().map(|e| endpoint_out(e, None)).collect();
    Ok(Json(json!({"data": data, "next_page": null})))
}

pub async fn retrieve(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<WebhookId>) -> Reply {
    Ok(Json(endpoint_out(&api.webhooks.get(&id).await?, None)))
}

pub async fn delete(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<WebhookId>) -> Reply {
    if !api.webhooks.delete(&id).await? {
        return Err(
            ApiError::not_found(format!("webhook endpoint {:?} not found", id.as_str())).code("webhook_not_found")
        );
    }
    Ok(Json(json!({"id": id, "type": "webhook_endpoint_deleted"})))
}

/// Re-enables an endpoint (after it was disabled for failing); its failure count restarts.
pub async fn enable(State(api): State<Arc<ManagedAgents>>, PathId(id): PathId<WebhookId>) -> Reply {
    Ok(Json(endpoint_out(&api.webhooks.enable(&id).await?, None)))
}
