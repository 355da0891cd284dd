//! gateway-face: the seam a protocol face plugs into.
//!
//! A face (Managed Agents, ACP over WebSocket, A2A) is something the composition root adds, not
//! code it edits: it builds each face from its configuration, hands the list to the HTTP router,
//! and the router merges every face's routes, measured under the face's [`Face::name`], and
//! spawns its background tasks on the process's tracker so they are joined before the store
//! closes. Adding a face is a new implementation of [`Face`] and one line in the list; no
//! existing face changes.

use axum::Router;
use tokio_util::task::TaskTracker;

/// One protocol face of the gateway's HTTP surface.
pub trait Face: Send + Sync {
    /// The face's name in metrics labels and logs (`managed_agents`, `a2a`, `acp`): fixed, few.
    fn name(&self) -> &'static str;

    /// The face's routes, with every layer of its own (authentication, admission) applied.
    fn router(&self) -> Router;

    /// Starts the face's background work (outbound deliveries and the like) on `tasks`, which
    /// the process joins on shutdown. Most faces have none.
    fn background(&self, tasks: &TaskTracker) {
        let _ = tasks;
    }
}
