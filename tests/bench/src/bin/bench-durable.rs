//! `bench-durable --listen ADDR --database FILE`: see [`gateway_bench::durable`].

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Minimal durable Managed Agents server: 3 fsynced SQLite commits per round trip")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8090")]
    listen: SocketAddr,
    /// The SQLite file (created; WAL, synchronous=FULL).
    #[arg(long, default_value = "bench-durable.db")]
    database: PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gateway_bench::telemetry::init();
    let args = Args::parse();
    match gateway_bench::durable::serve(gateway_bench::durable::Options {
        listen: args.listen,
        database: args.database,
    })
    .await
    {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bench-durable failed");
            std::process::ExitCode::FAILURE
        }
    }
}
