/// mimalloc rather than glibc's malloc: a turn is many small, short-lived allocations made
/// and freed on different threads (JSON, events, rows), where glibc's arenas spend a tenth
/// of the process's CPU (profiled under A2A saturation; docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gateway::cli::main_with(gateway::Extensions::default())
}
