//! Shutdown on SIGTERM or SIGINT for the baseline servers. Open SSE streams never end by
//! themselves, so a graceful shutdown gets [`GRACE`] and then the server returns anyway.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How long open connections may take to finish after a shutdown signal.
pub const GRACE: Duration = Duration::from_secs(2);

/// A token cancelled at the first SIGTERM or SIGINT.
pub fn on_terminate() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = term => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        t.cancel();
    });
    token
}

/// Runs `server` (which stops on `token`) and gives up on it [`GRACE`] after the signal.
pub async fn serve_until<E>(
    token: CancellationToken,
    server: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), E> {
    tokio::select! {
        r = server => r,
        _ = async { token.cancelled().await; tokio::time::sleep(GRACE).await } => Ok(()),
    }
}
