//! Scenario (g)'s section: one gateway process against two on one PostgreSQL database.

use std::fmt::Write as _;

use super::{fmt, header, row};
use crate::driver::results::{Figures, Results};

pub(super) fn section(out: &mut String, r: &Results) {
    let Some(p) = &r.processes else { return };
    let _ = writeln!(
        out,
        "\n## (g) Two processes on one PostgreSQL database\n\n(b)'s saturation load ({} connections in a closed loop, {} bytes of text, the instant remote) sent to one `gateway serve` on a fresh database, and split across two `gateway serve` processes on one fresh database (one secret key, a data directory and a host id each; half the connections on each), interleaved round by round. It shows what a second process sharing the database adds in messages/s, and what it costs in server CPU per message (both processes' CPU summed). There is no target for this row. On a machine with few cores both are CPU-bound: this one has {} (`nproc`), shared by the driver, the remote, PostgreSQL and the gateway processes, so the second process brings no core of its own; the ratio is what it gains or costs here, not what a second machine would add.\n",
        p.connections, p.text_bytes, r.machine.nproc
    );
    header(
        out,
        &[
            "Engine",
            "cores (`nproc`)",
            "one process msgs/s",
            "two processes msgs/s",
            "ratio (two / one)",
            "p50 ms (one / two)",
            "p99 ms (one / two)",
            "server CPU ms/msg (one / two, summed)",
            "server CPU in cores (one / two)",
            "errors (one / two)",
        ],
    );
    let cores = |f: &Figures| f.cpu_cores.map(|c| format!("{c:.2}")).unwrap_or_else(|| "–".into());
    row(
        out,
        &[
            p.engine.name().into(),
            r.machine.nproc.to_string(),
            fmt::rate(p.one.throughput),
            fmt::rate(p.two.throughput),
            fmt::ratio(p.throughput_ratio()),
            format!("{} / {}", fmt::ms(p.one.latency.p50_ms), fmt::ms(p.two.latency.p50_ms)),
            format!("{} / {}", fmt::ms(p.one.latency.p99_ms), fmt::ms(p.two.latency.p99_ms)),
            format!("{} / {}", fmt::opt_ms(p.one.cpu_ms_per_op), fmt::opt_ms(p.two.cpu_ms_per_op)),
            format!("{} / {}", cores(&p.one), cores(&p.two)),
            format!("{} / {}", fmt::errors(&p.one.errors), fmt::errors(&p.two.errors)),
        ],
    );
    let list: Vec<String> = p
        .segments
        .iter()
        .map(|s| {
            let who = if s.processes == 1 { "one process" } else { "two processes" };
            format!("{who} {}: {}/s p50 {} ms", s.round, fmt::rate(s.throughput), fmt::ms(s.p50_ms))
        })
        .collect();
    if !list.is_empty() {
        let _ = writeln!(out, "\nSegments: {}.", list.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::engine::Engine;
    use crate::driver::report::markdown;
    use crate::driver::results::ProcessesResults;

    #[test]
    fn the_two_process_section_says_how_many_cores_there_were() {
        let figures = |throughput| Figures { throughput, cpu_ms_per_op: Some(2.0), ..Figures::default() };
        let mut r = Results::default();
        r.machine.nproc = 2;
        assert!(!markdown(&r, &[]).contains("Two processes"));
        r.processes = Some(ProcessesResults {
            engine: Engine::Postgres,
            connections: 32,
            text_bytes: 1024,
            one: figures(400.0),
            two: figures(300.0),
            segments: vec![],
        });
        let md = markdown(&r, &[]);
        assert!(md.contains("## (g) Two processes on one PostgreSQL database"), "{md}");
        assert!(md.contains("| PostgreSQL | 2 | 400.0 | 300.0 | 0.75× |"), "{md}");
        assert!(md.contains("this one has 2 (`nproc`)"), "{md}");
    }
}
