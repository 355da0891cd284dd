//! `bench-a2a-echo --listen ADDR [--delay-ms N] [--no-streaming]`: see [`gateway_bench::echo`].

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
#[command(about = "A2A v1.0 JSON-RPC agent that echoes each message, at once or after a delay")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8091")]
    listen: SocketAddr,
    /// How long each task works before it completes.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Do not advertise or serve SendStreamingMessage (callers then send and poll).
    #[arg(long)]
    no_streaming: bool,
    /// Tasks remembered for GetTask; the oldest are forgotten beyond it.
    #[arg(long, default_value_t = 20_000)]
    max_tasks: usize,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    gateway_bench::telemetry::init();
    let a = Args::parse();
    let opts = gateway_bench::echo::Options {
        listen: a.listen,
        delay: Duration::from_millis(a.delay_ms),
        streaming: !a.no_streaming,
        max_tasks: a.max_tasks,
    };
    match gateway_bench::echo::serve(opts).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bench-a2a-echo failed");
            std::process::ExitCode::FAILURE
        }
    }
}
