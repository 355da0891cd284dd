//! Tasks: the operations (`service`), the projection of a session's events onto a task
//! (`projection`), following one task live (`watch`), and the adapter's documents (`records`).

pub mod projection;
pub mod records;
pub mod service;
pub mod watch;
