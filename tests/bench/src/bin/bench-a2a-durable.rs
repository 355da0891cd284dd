//! `bench-a2a-durable --listen ADDR --database FILE --remote URL`: see
//! [`gateway_bench::durable_a2a`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Minimal durable A2A proxy: 2 fsynced SQLite commits around each blocking SendMessage")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8092")]
    listen: SocketAddr,
    /// The SQLite file (created; WAL, synchronous=FULL).
    #[arg(long, default_value = "bench-a2a-durable.db")]
    database: PathBuf,
    /// The remote's JSON-RPC endpoint (bench-a2a-echo), e.g. http://127.0.0.1:8091/.
    #[arg(long)]
    remote: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gateway_bench::telemetry::init();
    let a = Args::parse();
    let opts = gateway_bench::durable_a2a::Options { listen: a.listen, database: a.database, remote: a.remote };
    match gateway_bench::durable_a2a::serve(opts).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bench-a2a-durable failed");
            std::process::ExitCode::FAILURE
        }
    }
}
