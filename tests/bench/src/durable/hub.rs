//! Live fan-out of committed frames to open SSE streams, per session.
//!
//! Frames are published only after their commit returned, so a client never sees an event
//! that is not on disk. A stream that falls more than [`BUFFER`] frames behind is closed
//! rather than buffered without bound. Entries disappear with their last subscriber.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::broadcast;

/// Frames a slow subscriber may lag behind before its stream is closed.
pub const BUFFER: usize = 256;

#[derive(Clone, Default)]
pub struct Hub {
    sessions: Arc<Mutex<HashMap<String, broadcast::Sender<Bytes>>>>,
}

/// A subscription; dropping it removes the session's entry once nobody listens.
pub struct Subscription {
    hub: Hub,
    session: String,
    rx: Option<broadcast::Receiver<Bytes>>,
}

impl Subscription {
    /// The next frame; `None` when the stream must end (lagged or hub gone).
    pub async fn next(&mut self) -> Option<Bytes> {
        self.rx.as_mut()?.recv().await.ok()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut map = self.hub.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.session).is_some_and(|tx| tx.receiver_count() == 0) {
            map.remove(&self.session);
        }
    }
}

impl Hub {
    pub fn subscribe(&self, session: &str) -> Subscription {
        let mut map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let rx = map.entry(session.to_owned()).or_insert_with(|| broadcast::channel(BUFFER).0).subscribe();
        Subscription { hub: self.clone(), session: session.to_owned(), rx: Some(rx) }
    }

    /// Sends committed frames to the session's open streams, if any.
    pub fn publish(&self, session: &str, frames: Vec<Bytes>) {
        let map = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(session) {
            for f in frames {
                let _ = tx.send(f);
            }
        }
    }

    /// Sessions with at least one open stream.
    pub fn len(&self) -> usize {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_get_frames_and_entries_go_with_them() {
        let hub = Hub::default();
        let mut a = hub.subscribe("s");
        hub.publish("s", vec![Bytes::from_static(b"x")]);
        hub.publish("other", vec![Bytes::from_static(b"y")]);
        assert_eq!(a.next().await.as_deref(), Some(&b"x"[..]));
        assert_eq!(hub.len(), 1);
        drop(a);
        assert!(hub.is_empty());
    }
}
