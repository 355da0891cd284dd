//! `bench-acp-stub`: a trivial ACP agent on stdio; see [`gateway_bench::acp_stub`].
//! Logs (none in normal operation) go to stderr; stdout carries only protocol lines.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    gateway_bench::telemetry::init();
    let input = tokio::io::BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    match gateway_bench::acp_stub::run(input, tokio::io::stdout()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "bench-acp-stub failed");
            std::process::ExitCode::FAILURE
        }
    }
}
