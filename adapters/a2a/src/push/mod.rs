//! Push-notification configs: validated, stored in the version they were registered with
//! (which decides the body shape delivered).
//!
//! A config's `token` and `authentication.credentials` are credentials for the receiver, so
//! they are stored sealed (`gateway_services::secrets`): whoever reads the documents table
//! (with every transcript beside it) does not get them. They are opened only to answer a
//! client that reads its config back (the spec returns it whole) and, by the deliverer, just
//! before a push is sent. Configs stored before sealing existed hold plaintext, which is
//! served as it is.
//!
//! All configs of a task live in one document (`a2a.push/{task}`) changed only by
//! compare-and-set of the whole set, so the per-task limit holds when clients create configs
//! concurrently: of two creations racing for the last slot, the loser re-reads the set and is
//! refused.

pub mod delivery;
mod feed;

use gateway_core::EventId;
use gateway_services::{SecretBox, SecretError};
use gateway_store::{DocumentWrite, Documents};
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::A2aContext;
use crate::error::{A2aError, Result};
use crate::tasks::records::{self, PUSH, PushRecord, TaskRecord};

use crate::wire::PushConfig;

/// Most configs one task may have.
const MAX_CONFIGS: usize = 16;

/// A value that can be sent as an HTTP header as it is: refused at registration rather than
/// failing every delivery later.
fn header_safe(what: &str, s: &str) -> Result<()> {
    if s.len() > 4096 || axum::http::HeaderValue::from_str(s).is_err() {
        return Err(A2aError::InvalidParams(format!(
            "{what} must be at most 4096 characters of visible text (no control characters)"
        )));
    }
    Ok(())
}

/// Checks a config before it is stored: URL (and the SSRF rule), header-safe token and
/// credentials, a scheme only with credentials.
pub fn validate(cfg: &PushConfig, allow_private: bool) -> Result<()> {
    gateway_services::ssrf::check_url(&cfg.url, allow_private).map_err(|e| A2aError::InvalidParams(e.to_string()))?;
    if let Some(t) = &cfg.token {
        header_safe("token", t)?;
    }
    if let Some(a) = &cfg.authentication {
        if a.scheme.is_empty() || !a.scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+".contains(&b)) {
            return Err(A2aError::InvalidParams("authentication.scheme must be an HTTP auth scheme token".into()));
        }
        match &a.credentials {
            None => {
                return Err(A2aError::InvalidParams("authentication.scheme was given without credentials".into()));
            }
            Some(c) => header_safe("authentication.credentials", c)?,
        }
    }
    if let Some(id) = &cfg.id
        && (id.len() > 128 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)))
    {
        return Err(A2aError::InvalidParams("push config id must be 1-128 of [A-Za-z0-9-_.]".into()));
    }
    Ok(())
}

/// The config as stored: token and credentials sealed.
fn sealed(secrets: &SecretBox, mut cfg: PushConfig) -> PushConfig {
    cfg.token = cfg.token.map(|t| secrets.seal(&t));
    if let Some(a) = &mut cfg.authentication {
        a.credentials = a.credentials.as_deref().map(|c| secrets.seal(c));
    }
    cfg
}

/// A stored value in clear: sealed values opened, plaintext (stored before sealing) as is.
fn reveal(secrets: &SecretBox, value: &str) -> Result<String, SecretError> {
    if SecretBox::is_sealed(value) { secrets.open(value).map(|s| s.0) } else { Ok(value.to_owned()) }
}

/// The config as the client registered it.
fn opened(secrets: &SecretBox, mut cfg: PushConfig) -> Result<PushConfig> {
    let failed = |error| A2aError::SealedCredentials { config: cfg.id.clone().unwrap_or_default(), error };
    let token = cfg.token.as_deref().map(|t| reveal(secrets, t)).transpose().map_err(failed)?;
    let credentials = match cfg.authentication.as_ref().and_then(|a| a.credentials.as_deref()) {
        Some(c) => Some(reveal(secrets, c).map_err(failed)?),
        None => None,
    };
    cfg.token = token;
    if let Some(a) = &mut cfg.authentication {
        a.credentials = credentials;
    }
    Ok(cfg)
}

/// The configs of one task (one document).
#[derive(Debug, Default, Serialize, Deserialize)]
struct PushSet {
    configs: Vec<PushRecord>,
}

/// Attempts of one change. Each lost compare-and-set means another change won, so a writer
/// loses at most once per concurrent writer.
const CAS_ATTEMPTS: u32 = 64;

/// Changes a task's set by compare-and-set; `change` says whether it changed anything.
async fn update(
    docs: &dyn Documents,
    task_id: &str,
    change: impl Fn(&mut Vec<PushRecord>) -> Result<bool>,
) -> Result<()> {
    for attempt in 0..CAS_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt.min(10)))).await;
        }
        let (mut set, version) = match records::get::<PushSet>(docs, PUSH, task_id).await? {
            Some((set, v)) => (set, Some(v)),
            None => (PushSet::default(), None),
        };
        if !change(&mut set.configs)? {
            return Ok(());
        }
        match records::put(docs, PUSH, task_id, &set, version).await {
            Ok(_) => return Ok(()),
            Err(A2aError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(A2aError::Unavailable(format!("the push configs of task {task_id} keep changing concurrently; retry")))
}

/// A config checked, named and bound to `task_id`: the config as registered (to answer the
/// client) and as it is stored (sealed).
fn prepare(ctx: &A2aContext, task_id: &str, mut cfg: PushConfig, v03: bool) -> Result<(PushConfig, PushRecord)> {
    validate(&cfg, ctx.allow_private_push_targets)?;
    let id = cfg.id.clone().unwrap_or_else(|| format!("pcfg_{}", &EventId::new().as_str()[EventId::PREFIX.len()..]));
    cfg.id = Some(id);
    cfg.task_id = Some(task_id.to_owned());
    let rec = PushRecord { config: sealed(&ctx.secrets, cfg.clone()), v03 };
    Ok((cfg, rec))
}

/// The push document of a task that does not exist yet, holding the config sent inline with
/// its first message: created in the transaction that admits the message (`service::send`),
/// so the config exists if and only if the task does.
pub fn inline(ctx: &A2aContext, task_id: &str, cfg: PushConfig, v03: bool) -> Result<DocumentWrite> {
    let (_, rec) = prepare(ctx, task_id, cfg, v03)?;
    records::create(PUSH, task_id, &PushSet { configs: vec![rec] })
}

/// Creates (or replaces, for a known id) a config of `task`.
///
/// The task's session is followed by the push channel first (a no-op for a task that already
/// is): the feed then holds every update committed from now on, and each is sent to the
/// configs stored when the channel folds it, as when the task had a config from its start.
pub async fn create(ctx: &A2aContext, task: &TaskRecord, cfg: PushConfig, v03: bool) -> Result<PushConfig> {
    let (cfg, rec) = prepare(ctx, &task.id, cfg, v03)?;
    let id = cfg.id.clone().unwrap_or_default();
    let feeds = ctx.coordinator.feeds();
    if !feeds.follow(delivery::CHANNEL, &task.session_id, &task.id).await.map_err(records::store_err)? {
        return Err(A2aError::TaskNotFound(task.id.clone()));
    }
    update(ctx.coordinator.documents(), &task.id, |configs| {
        match configs.iter().position(|c| c.config.id.as_deref() == Some(id.as_str())) {
            Some(i) => configs[i] = rec.clone(),
            None if configs.len() >= MAX_CONFIGS => {
                return Err(A2aError::InvalidParams(format!("a task may have at most {MAX_CONFIGS} push configs")));
            }
            None => configs.push(rec.clone()),
        }
        Ok(true)
    })
    .await?;
    info!(task = %task.id, config = %id, "push config stored");
    Ok(cfg)
}

pub async fn get(ctx: &A2aContext, task: &TaskRecord, id: &str) -> Result<PushConfig> {
    let stored = records(ctx.coordinator.documents(), &task.id)
        .await?
        .into_iter()
        .find(|r| r.config.id.as_deref() == Some(id))
        .map(|r| r.config)
        .ok_or_else(|| A2aError::TaskNotFound(format!("{} (push config {id})", task.id)))?;
    opened(&ctx.secrets, stored)
}

pub async fn list(ctx: &A2aContext, task: &TaskRecord) -> Result<Vec<PushConfig>> {
    records(ctx.coordinator.documents(), &task.id).await?.into_iter().map(|r| opened(&ctx.secrets, r.config)).collect()
}

/// A task's configs as stored (credentials sealed), in creation order.
pub async fn records(docs: &dyn Documents, task_id: &str) -> Result<Vec<PushRecord>> {
    Ok(records::get::<PushSet>(docs, PUSH, task_id).await?.map(|(s, _)| s.configs).unwrap_or_default())
}

pub async fn delete(ctx: &A2aContext, task: &TaskRecord, id: &str) -> Result<()> {
    update(ctx.coordinator.documents(), &task.id, |configs| {
        let before = configs.len();
        configs.retain(|c| c.config.id.as_deref() != Some(id));
        Ok(configs.len() != before)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::AuthInfo;

    fn cfg(url: &str) -> PushConfig {
        PushConfig { id: None, task_id: None, url: url.into(), token: None, authentication: None }
    }

    #[test]
    fn configs_are_checked_before_they_are_stored() {
        assert!(validate(&cfg("http://127.0.0.1:9/h"), true).is_ok());
        assert_eq!(validate(&cfg("http://127.0.0.1:9/h"), false).unwrap_err().code(), -32602);
        let mut c = cfg("https://example.com/h");
        c.token = Some("a\r\nX-Injected: 1".into());
        assert!(validate(&c, false).is_err(), "CR/LF in the token");
        for undeliverable in ["a\u{1}b", "del\u{7f}"] {
            c.token = Some(undeliverable.into());
            assert!(validate(&c, false).is_err(), "{undeliverable:?} could never be sent as a header");
        }
        c.token = None;
        c.authentication = Some(AuthInfo { scheme: "Bearer".into(), credentials: None });
        assert!(validate(&c, false).is_err(), "a scheme needs credentials");
        c.authentication = Some(AuthInfo { scheme: "Bearer".into(), credentials: Some("s3cret".into()) });
        assert!(validate(&c, false).is_ok());
    }
}
