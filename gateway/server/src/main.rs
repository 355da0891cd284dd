fn main() -> std::process::ExitCode {
    gateway::cli::main_with(gateway::Extensions::default())
}
