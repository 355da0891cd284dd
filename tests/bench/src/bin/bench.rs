//! `bench`: the end-to-end benchmark driver; see [`gateway_bench::driver`] and `bench --help`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    gateway_bench::telemetry::init();
    let args = gateway_bench::driver::Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(gateway_bench::driver::run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bench failed");
            std::process::ExitCode::FAILURE
        }
    }
}
