//! What every face gets from the process, built once by the composition root.

use std::sync::Arc;

use gateway_core::models::ModelCatalog;
use gateway_runtime::{Coordinator, Runtime};
use gateway_services::auth::Authenticator;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The process as every face sees it. Each face's own context holds one of these beside its
/// own fields (published agents, notification endpoints, workspace roots), so the coordinator, the
/// authenticator and the shutdown handles are named once: a face cannot be handed an
/// authenticator or a shutdown signal that differs from its neighbours'.
#[derive(Clone)]
pub struct FaceContext {
    pub coordinator: Coordinator,
    /// The process's one authenticator (its key cache and revocation watch are shared by
    /// every face). Whether a transport consults it is the transport's property: every HTTP
    /// route runs [`guard`](crate::guard) in front of its handler; a transport on the
    /// process's stdin and stdout has one caller, the program that started the process, and
    /// checks nobody.
    pub auth: Arc<Authenticator>,
    /// The URL clients reach this gateway at: what a face writes into the links it hands
    /// out (agent cards, a self-hosted session's `remote_url`).
    pub public_url: String,
    /// Cancelled when the process stops: open streams and connections end so it can drain.
    pub shutdown: CancellationToken,
    /// The runtime's tracker: a face spawns its connections and background work here, so the
    /// process waits for them before it closes the store.
    pub tasks: TaskTracker,
    /// Which configured model serves an agent's model id: what faces show on agents and
    /// sessions, so nobody mistakes the offline fake for the model the agent names.
    pub models: Arc<ModelCatalog>,
}

impl FaceContext {
    /// The context of the faces of `runtime`, deciding callers with `auth`.
    pub fn of(runtime: &Runtime, auth: Arc<Authenticator>, public_url: impl Into<String>) -> Self {
        Self {
            coordinator: runtime.coordinator.clone(),
            auth,
            public_url: public_url.into(),
            shutdown: runtime.shutdown.clone(),
            tasks: runtime.tasks.clone(),
            models: Arc::new(ModelCatalog::single("fake")),
        }
    }

    /// This context, saying `models` serve the agents (the default: the fake alone).
    pub fn with_models(mut self, models: Arc<ModelCatalog>) -> Self {
        self.models = models;
        self
    }
}
