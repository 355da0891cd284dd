//! gateway-face: the seam a protocol face plugs into.
//!
//! A face (one protocol that clients speak to the gateway) is something the composition root
//! adds, not code it edits: it builds one [`FaceContext`] for the process, builds each face from it and
//! its own configuration, hands the list to the HTTP router, and the router merges every face's
//! routes, measured under the face's [`Face::name`], and spawns its background tasks on the
//! process's tracker so they are joined before the store closes. Adding a face is a new
//! implementation of [`Face`] and one line in the list; no existing face changes.
//!
//! Every face's protected routes run behind the one [`guard`]: admission, authentication, the
//! face's own rule of whom it serves ([`GuardedFace::admits`]) and the metered body, in one
//! order, with only the wire shape of a refusal left to the face ([`GuardedFace::refusal`]).
//! Nothing here names a protocol.

mod context;
pub mod guard;

use axum::Router;
use tokio_util::task::TaskTracker;

pub use context::FaceContext;
pub use guard::{GuardedFace, Refusal, guard};

/// One protocol face of the gateway's HTTP surface.
pub trait Face: Send + Sync {
    /// The face's name in metrics labels and logs (the protocol's short name): fixed, few.
    fn name(&self) -> &'static str;

    /// The face's routes, with every layer of its own ([`guard`] among them) applied.
    fn router(&self) -> Router;

    /// Starts the face's background work (outbound deliveries and the like) on `tasks`, which
    /// the process joins on shutdown. Most faces have none.
    fn background(&self, tasks: &TaskTracker) {
        let _ = tasks;
    }
}
