//! `docs/benchmarks.md`: method, machine, one table per scenario with the ratios, the
//! acceptance criteria (issue 10's and those added since), notes on anything odd, links to the plots.

mod acceptance;
mod fmt;
mod plots;
mod processes;

use std::fmt::Write as _;

pub use plots::{PlotFile, plots};

use crate::driver::engine::Engine;
use crate::driver::results::{A2aResults, Comparison, Figures, Results};

const METHOD: &str = "\
Every figure comes from real processes talking over loopback sockets or pipes: the release `gateway` binary, started by
the driver with a generated configuration (defaults everywhere except the listen address, the database, the data directory,
the published agents and a 1 s shutdown grace), and baselines the bench builds itself (`tests/bench`):

- **bench-durable**: the minimal durable Managed Agents server. axum, SQLite in WAL mode with `synchronous=FULL`, one writer
  connection, exactly three fsynced commits per round trip: the session row; the `user.message`, committed before the send is
  acknowledged; `session.status_running` + `agent.message` + `session.status_idle` in one transaction, streamed to the open SSE
  stream after that commit. It serves the same paths, status codes and SSE frames the load generator reads from the gateway,
  so the client code is identical for both. It always runs on SQLite: it is the floor of the work, not a second engine.
- **bench-a2a-durable**: the minimal durable A2A proxy, the yardstick of (b)'s saturation and overload. For each blocking
  `SendMessage` it commits the task row and the user's message in one transaction before calling the remote (the same
  request, to the instant `bench-a2a-echo`), then the remote's answer and the task's final state in one transaction before
  answering the client with a completed Task carrying the remote's artifacts: two fsynced commits, nothing grouped. It uses
  bench-durable's store (SQLite, WAL, `synchronous=FULL`, one writer connection) and, like it, always runs on SQLite.
- **bench-a2a-echo**: an A2A v1.0 JSON-RPC agent (card, `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
  `SubscribeToTask`) that answers every message with a completed Task echoing the text, at once or after a fixed delay. The
  gateway publishes it as an `a2a:` remote; its card advertises streaming, so the gateway streams from it.
- **bench-acp-stub**: an ACP agent on stdio answering each prompt with one `agent_message_chunk` and `end_turn`. The gateway
  runs it as the ACP process of an `acp:stub` agent; the editor side is the driver, talking to `gateway acp` over stdio.

Comparisons are interleaved in one run (gateway, baseline, baseline, gateway, …; A2A saturation three ways: gateway,
durable baseline, direct, then backwards), and each ratio is gateway ÷ baseline from the same run. Latencies are
recorded in HDR histograms (µs resolution). Open-loop latencies count from each request's *due* time, so queueing in the
server (or the driver) cannot hide (no coordinated omission); a request still unanswered at the timeout (counted from
its due time) is a timeout. Each A2A gateway segment gets a fresh gateway and database, so an overload's backlog cannot
leak into the next segment (bench-a2a-durable segments likewise get a fresh process and file). Server CPU is `utime +
stime` of the server process over the measured window, divided by the requests it completed (for A2A and ACP, the
gateway process alone on one side and the remote, the durable A2A proxy or the stub alone on the other). The PostgreSQL
runs put the gateway in a fresh schema of the test database; SQLite runs use a fresh file in the work directory. The
driver, the servers and the database share the machine's cores, as they would on a small production host.";

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn header(out: &mut String, cells: &[&str]) {
    row(out, &cells.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
    row(out, &cells.iter().map(|_| "---".to_owned()).collect::<Vec<_>>());
}

fn engines(r: &Results) -> Vec<Engine> {
    let mut e: Vec<Engine> = r
        .managed_agents
        .iter()
        .map(|c| c.engine)
        .chain(r.a2a.iter().map(|a| a.engine))
        .chain(r.acp.iter().map(|c| c.engine))
        .chain(r.memory.iter().filter_map(|m| m.engine))
        .chain(r.previews.iter().filter_map(|p| p.engine))
        .chain(r.processes.iter().map(|p| p.engine))
        .collect();
    e.sort_by_key(|e| *e as u8);
    e.dedup();
    e
}

fn image(out: &mut String, plots: &[PlotFile], file: &str) {
    if let Some(p) = plots.iter().find(|p| p.file == file) {
        let _ = writeln!(out, "\n![{}](benchmarks/{})\n", p.title, p.file);
    }
}

fn notes(out: &mut String, list: &[String]) {
    for n in list {
        let _ = writeln!(out, "- {n}");
    }
}

fn segments(out: &mut String, c: &Comparison) {
    let list: Vec<String> = c
        .segments
        .iter()
        .map(|s| {
            format!("{:?} {}: {}/s p50 {} ms", s.side, s.round, fmt::rate(s.throughput), fmt::ms(s.p50_ms))
                .to_lowercase()
        })
        .collect();
    if !list.is_empty() {
        let _ = writeln!(out, "\nSegments ({}): {}.", c.engine.name(), list.join("; "));
    }
}

fn machine(out: &mut String, r: &Results) {
    let m = &r.machine;
    let _ = writeln!(out, "## Machine\n");
    header(out, &["", ""]);
    row(out, &["CPU".into(), format!("{} × {}", m.nproc, m.cpu_model)]);
    row(out, &["Memory".into(), m.memory.clone()]);
    row(out, &["Kernel".into(), m.kernel.clone()]);
    row(out, &["Data directory".into(), format!("`{}` on {}", m.work_dir, m.disk)]);
    row(out, &["PostgreSQL".into(), m.postgres.clone().unwrap_or_else(|| "not measured".into())]);
    row(out, &["Open files limit".into(), m.nofile_limit.to_string()]);
    if let Some(f) = &r.fsync {
        let pg = f
            .postgres
            .as_ref()
            .map(|p| format!("; PostgreSQL commit p50 {} ms (p99 {})", fmt::ms(p.p50_ms), fmt::ms(p.p99_ms)))
            .unwrap_or_default();
        row(
            out,
            &[
                "Fsync floor (d)".into(),
                format!(
                    "SQLite fsynced commit p50 {} ms (p99 {}){pg}",
                    fmt::ms(f.sqlite.p50_ms),
                    fmt::ms(f.sqlite.p99_ms)
                ),
            ],
        );
    }
}

fn managed_agents(out: &mut String, r: &Results, plots: &[PlotFile]) {
    if r.managed_agents.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n## (a) Managed Agents round trip\n\nCreate a session, open its stream, send a `user.message`, read to `session.status_idle` (the fake model answers `echo: …`); 16 clients in a closed loop.\n"
    );
    header(
        out,
        &[
            "Engine",
            "gateway sessions/s",
            "bench-durable sessions/s",
            "ratio",
            "p50 ms (gw / base)",
            "p99 ms (gw / base)",
            "CPU ms/session (gw / base)",
            "CPU ratio",
            "gateway errors",
        ],
    );
    for c in &r.managed_agents {
        row(
            out,
            &[
                c.engine.name().into(),
                fmt::rate(c.gateway.throughput),
                fmt::rate(c.baseline.throughput),
                fmt::ratio(c.throughput_ratio()),
                format!("{} / {}", fmt::ms(c.gateway.latency.p50_ms), fmt::ms(c.baseline.latency.p50_ms)),
                format!("{} / {}", fmt::ms(c.gateway.latency.p99_ms), fmt::ms(c.baseline.latency.p99_ms)),
                format!("{} / {}", fmt::opt_ms(c.gateway.cpu_ms_per_op), fmt::opt_ms(c.baseline.cpu_ms_per_op)),
                fmt::ratio(c.cpu_ratio()),
                fmt::errors(&c.gateway.errors),
            ],
        );
    }
    for c in &r.managed_agents {
        segments(out, c);
        notes(out, &c.notes);
    }
    image(out, plots, "ma-latency.svg");
}

fn open_row(out: &mut String, engine: Engine, what: &str, f: &Figures) {
    row(
        out,
        &[
            engine.name().into(),
            what.into(),
            fmt::rate(f.offered_rate.unwrap_or_default()),
            format!("{} / {}", f.ok, f.offered),
            fmt::pct(f.completed_share()),
            fmt::ms(f.latency.p50_ms),
            fmt::ms(f.latency.p99_ms),
            f.timeouts.to_string(),
            fmt::errors(&f.errors),
        ],
    );
}

fn a2a(out: &mut String, r: &Results, plots: &[PlotFile]) {
    if r.a2a.is_empty() {
        return;
    }
    let delay = r.a2a.first().map(|a| a.remote_delay_ms).unwrap_or_default();
    let _ = writeln!(
        out,
        "\n## (b) A2A `SendMessage`\n\n### Open loop, remote answering after {delay} ms\n\nBlocking `SendMessage` through a gateway agent published on `a2a:` against the same remote called directly; latency from each request's due time.\n"
    );
    header(out, &["Engine", "target", "offered/s", "completed", "share", "p50 ms", "p99 ms", "timeouts", "errors"]);
    for a in &r.a2a {
        for c in &a.open_loop {
            open_row(out, a.engine, "gateway", &c.gateway);
            open_row(out, a.engine, "direct", &c.baseline);
        }
    }
    let _ = writeln!(out);
    header(
        out,
        &["Engine", "offered/s", "completed ratio (gw / direct)", "p50 difference ms", "gateway CPU ms/message"],
    );
    for a in &r.a2a {
        for c in &a.open_loop {
            row(
                out,
                &[
                    a.engine.name().into(),
                    fmt::rate(c.gateway.offered_rate.unwrap_or_default()),
                    fmt::ratio(c.completed_ratio()),
                    fmt::signed_ms(c.gateway.latency.p50_ms - c.baseline.latency.p50_ms),
                    fmt::opt_ms(c.gateway.cpu_ms_per_op),
                ],
            );
        }
    }
    image(out, plots, "a2a-open-latency.svg");
    image(out, plots, "a2a-throughput.svg");
    saturation(out, r, plots);
    instant_half_load(out, r);
    overload(out, r);
    for a in &r.a2a {
        notes(out, &a.notes);
    }
}

fn saturation(out: &mut String, r: &Results, plots: &[PlotFile]) {
    let _ = writeln!(
        out,
        "\n### Saturation: 32 connections, 1 KiB text, instant remote (closed loop)\n\nInterleaved three ways: the gateway, bench-a2a-durable in front of the same remote (SQLite, two fsynced commits per message: the durable baseline), and the remote called directly (a reference: no durability at all).\n"
    );
    header(
        out,
        &[
            "Engine",
            "gateway msgs/s",
            "durable baseline msgs/s",
            "ratio (gw / durable)",
            "direct msgs/s (reference)",
            "ratio (gw / direct)",
            "p50 ms (gw / durable / direct)",
            "p99 ms (gw / durable / direct)",
            "CPU ms/msg (gw / durable)",
            "gateway errors",
        ],
    );
    for a in &r.a2a {
        let Some(c) = &a.saturation else { continue };
        let d = a.saturation_durable.as_ref();
        let durable = |f: fn(&Figures) -> String| d.map(|d| f(&d.baseline)).unwrap_or_else(|| "–".into());
        row(
            out,
            &[
                a.engine.name().into(),
                fmt::rate(c.gateway.throughput),
                durable(|f| fmt::rate(f.throughput)),
                fmt::ratio(d.and_then(Comparison::throughput_ratio)),
                fmt::rate(c.baseline.throughput),
                fmt::ratio(c.throughput_ratio()),
                format!(
                    "{} / {} / {}",
                    fmt::ms(c.gateway.latency.p50_ms),
                    durable(|f| fmt::ms(f.latency.p50_ms)),
                    fmt::ms(c.baseline.latency.p50_ms)
                ),
                format!(
                    "{} / {} / {}",
                    fmt::ms(c.gateway.latency.p99_ms),
                    durable(|f| fmt::ms(f.latency.p99_ms)),
                    fmt::ms(c.baseline.latency.p99_ms)
                ),
                format!("{} / {}", fmt::opt_ms(c.gateway.cpu_ms_per_op), durable(|f| fmt::opt_ms(f.cpu_ms_per_op))),
                fmt::errors(&c.gateway.errors),
            ],
        );
    }
    let durable_errors: Vec<String> = r
        .a2a
        .iter()
        .filter_map(|a| a.saturation_durable.as_ref())
        .filter(|d| !d.baseline.errors.is_empty())
        .map(|d| format!("durable baseline errors ({} run): {}", d.engine.name(), fmt::errors(&d.baseline.errors)))
        .collect();
    if !durable_errors.is_empty() {
        let _ = writeln!(out);
        notes(out, &durable_errors);
    }
    image(out, plots, "a2a-saturation-latency.svg");
}

fn overload_row(out: &mut String, engine: Engine, target: &str, capacity: f64, o: &Figures, cpu: String) {
    row(
        out,
        &[
            engine.name().into(),
            target.into(),
            fmt::rate(capacity),
            fmt::rate(o.offered_rate.unwrap_or_default()),
            fmt::rate(o.goodput_in_window.unwrap_or(o.throughput)),
            o.goodput_share(capacity).map(fmt::pct).unwrap_or_else(|| "–".into()),
            format!("{} / {}", o.ok, o.offered),
            format!("{} / {}", fmt::ms(o.latency.p50_ms), fmt::ms(o.latency.p99_ms)),
            o.refused.to_string(),
            format!("{} / {}", fmt::ms(o.refused_latency.p50_ms), fmt::ms(o.refused_latency.max_ms)),
            o.timeouts.to_string(),
            cpu,
            fmt::errors(&o.errors),
        ],
    );
}

/// The CPU-per-refusal cell of an overload row measured as a residual.
fn residual(share: Option<f64>) -> String {
    format!("residual: {}", share.map(fmt::pct).unwrap_or_else(|| "–".into()))
}

/// The CPU-per-refusal cell of the refusal row: the direct figure, or why there is none.
fn direct(a: &A2aResults) -> String {
    let Some(c) = &a.refusal else { return "–".into() };
    match (c.share_of_served, c.cpu_ms_per_refusal) {
        (Some(share), Some(per)) => format!("direct: {} ({} ms)", fmt::pct(share), fmt::ms(per)),
        (None, Some(per)) => format!("direct: {} ms", fmt::ms(per)),
        _ => "direct: no figure (see below)".into(),
    }
}

fn overload(out: &mut String, r: &Results) {
    let _ = writeln!(
        out,
        "\n### Overload: each offered 2× its own saturation throughput (instant remote, open loop)\n\n\
         CPU per refusal, as a share of the CPU per message served at saturation, two ways. **Direct** (the figure the \
         acceptance criterion is decided on): a fresh gateway configured to refuse every message that would start a turn \
         (`[admission] max_queued_runs = 0`: the same check and the same busy answer as a saturated gateway's refusals) is \
         offered the gateway's overload rate for the same window, its segments interleaved with the overload's; its CPU \
         divided by its refusals. Nothing is served there, so nothing has to be subtracted (the process's idle work over \
         the window is charged to the refusals). **Residual** (context): the server's CPU over the overload segments, \
         less the completed messages at the CPU per message it spent at saturation, per refused message (– when nothing \
         was refused). Serving under overload does not cost what it did at saturation (which sends 1 KiB of text; the \
         overload sends 5 bytes), and the difference lands on the refusals: the residual is noisy, and negative when \
         serving got cheaper under overload.\n"
    );
    header(
        out,
        &[
            "Engine",
            "target",
            "capacity msgs/s",
            "offered/s",
            "goodput msgs/s (during the offering)",
            "goodput / capacity",
            "completed within the timeout",
            "completed p50 / p99 ms",
            "refused",
            "refused p50 / max ms",
            "timeouts",
            "CPU per refusal, share of a served message (direct or residual)",
            "errors",
        ],
    );
    for a in &r.a2a {
        if let (Some(o), Some(s)) = (&a.overload, &a.saturation) {
            overload_row(out, a.engine, "gateway", s.gateway.throughput, o, residual(a.residual_refusal_cpu_share()));
        }
        if let (Some(c), Some(s)) = (&a.refusal, &a.saturation) {
            let target = "gateway refusing every turn";
            overload_row(out, a.engine, target, s.gateway.throughput, &c.figures, direct(a));
        }
        if let (Some(o), Some(s)) = (&a.overload_durable, &a.saturation_durable) {
            let share = a.durable_residual_refusal_cpu_share();
            overload_row(out, a.engine, "durable baseline", s.baseline.throughput, o, residual(share));
        }
    }
    let refusal_notes: Vec<String> = r
        .a2a
        .iter()
        .filter_map(|a| Some((a.engine, a.refusal.as_ref()?)))
        .flat_map(|(e, c)| c.notes.iter().map(move |n| format!("gateway refusing every turn ({}): {n}", e.name())))
        .collect();
    if !refusal_notes.is_empty() {
        let _ = writeln!(out);
        notes(out, &refusal_notes);
    }
}

fn instant_half_load(out: &mut String, r: &Results) {
    if r.a2a.iter().all(|a| a.instant_half_load.is_none()) {
        return;
    }
    let _ = writeln!(
        out,
        "\n### Open loop, instant remote, half the gateway's capacity\n\nThe open loop above, against the remote that answers at once and offered half the gateway's saturation throughput: a tail the 1 s remote hides is the whole difference here.\n"
    );
    header(
        out,
        &[
            "Engine",
            "offered/s",
            "completed (gw / direct)",
            "p50 ms (gw / direct)",
            "p99 ms (gw / direct)",
            "p99 difference ms",
            "refused",
            "timeouts",
            "gateway errors",
        ],
    );
    for a in &r.a2a {
        let Some(c) = &a.instant_half_load else { continue };
        row(
            out,
            &[
                a.engine.name().into(),
                fmt::rate(c.gateway.offered_rate.unwrap_or_default()),
                format!("{} / {} of {}", c.gateway.ok, c.baseline.ok, c.gateway.offered),
                format!("{} / {}", fmt::ms(c.gateway.latency.p50_ms), fmt::ms(c.baseline.latency.p50_ms)),
                format!("{} / {}", fmt::ms(c.gateway.latency.p99_ms), fmt::ms(c.baseline.latency.p99_ms)),
                fmt::signed_ms(c.gateway.latency.p99_ms - c.baseline.latency.p99_ms),
                c.gateway.refused.to_string(),
                c.gateway.timeouts.to_string(),
                fmt::errors(&c.gateway.errors),
            ],
        );
    }
}

fn acp(out: &mut String, r: &Results, plots: &[PlotFile]) {
    if r.acp.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n## (c) ACP prompt round trip\n\nOne prompt at a time: `session/prompt` written → response read, through `gateway acp` (agent on `acp:stub`) and straight to `bench-acp-stub`.\n"
    );
    header(
        out,
        &[
            "Engine",
            "prompts (gw / direct)",
            "p50 ms (gw / direct)",
            "p99 ms (gw / direct)",
            "p50 ratio",
            "gateway CPU ms/prompt",
            "gateway errors",
        ],
    );
    for c in &r.acp {
        row(
            out,
            &[
                c.engine.name().into(),
                format!("{} / {}", c.gateway.ok, c.baseline.ok),
                format!("{} / {}", fmt::ms(c.gateway.latency.p50_ms), fmt::ms(c.baseline.latency.p50_ms)),
                format!("{} / {}", fmt::ms(c.gateway.latency.p99_ms), fmt::ms(c.baseline.latency.p99_ms)),
                fmt::ratio(c.p50_ratio()),
                fmt::opt_ms(c.gateway.cpu_ms_per_op),
                fmt::errors(&c.gateway.errors),
            ],
        );
    }
    image(out, plots, "acp-latency.svg");
}

fn fsync(out: &mut String, r: &Results) {
    let Some(f) = &r.fsync else { return };
    let _ = writeln!(
        out,
        "\n## (d) One fsynced commit\n\nSingle-row INSERT transactions, one after another, on the disk of the data directory. SQLite: WAL, `synchronous=FULL`. PostgreSQL: default settings, one connection.\n"
    );
    header(out, &["Engine", "commits", "p50 ms", "p90 ms", "p99 ms", "max ms"]);
    let mut line = |name: &str, s: &crate::driver::stats::Summary| {
        row(
            out,
            &[
                name.into(),
                s.count.to_string(),
                fmt::ms(s.p50_ms),
                fmt::ms(s.p90_ms),
                fmt::ms(s.p99_ms),
                fmt::ms(s.max_ms),
            ],
        );
    };
    line("SQLite", &f.sqlite);
    if let Some(p) = &f.postgres {
        line("PostgreSQL", p);
    }
}

fn memory(out: &mut String, r: &Results) {
    if r.memory.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n## (e) Memory of waiting work\n\nGateway VmRSS with idle SSE subscribers (raw connections from one process, spread over sessions) and with sessions parked on a custom tool nobody answers (measured in a second, fresh gateway process on the same database, so memory the allocator kept from the subscribers does not hide it). Idle CPU is the gateway's while the subscribers sat idle for 3 s. bench-durable with the same subscribers for reference.\n"
    );
    header(
        out,
        &[
            "Engine",
            "RSS ready",
            "sessions",
            "RSS with sessions",
            "subscribers",
            "RSS subscribed",
            "KiB/subscriber",
            "idle CPU (cores)",
            "RSS after close",
            "parked",
            "RSS before parking (fresh process)",
            "RSS parked",
            "KiB/parked",
            "bench-durable RSS subscribed",
        ],
    );
    for m in &r.memory {
        row(
            out,
            &[
                m.engine.map(Engine::name).unwrap_or("?").into(),
                fmt::mib(m.rss_ready_kib),
                m.sessions.to_string(),
                fmt::mib(m.rss_sessions_kib),
                format!("{} / {}", m.subscribers, m.subscribers_wanted),
                fmt::mib(m.rss_subscribed_kib),
                format!("{:.1}", m.kib_per_subscriber),
                format!("{:.3}", m.idle_cpu_cores),
                fmt::mib(m.rss_unsubscribed_kib),
                format!("{} / {}", m.parked, m.parked_wanted),
                fmt::mib(m.rss_before_parked_kib),
                fmt::mib(m.rss_parked_kib),
                format!("{:.1}", m.kib_per_parked),
                format!(
                    "{} ({} subscribers, {} at start)",
                    fmt::mib(m.baseline_rss_subscribed_kib),
                    m.baseline_subscribers,
                    fmt::mib(m.baseline_rss_ready_kib)
                ),
            ],
        );
    }
    for m in &r.memory {
        notes(out, &m.notes);
        for (e, n) in &m.park_errors {
            let _ = writeln!(out, "- parking: {n} × {e}");
        }
    }
}

fn previews(out: &mut String, r: &Results, plots: &[PlotFile]) {
    let Some(p) = &r.previews else { return };
    let _ = writeln!(
        out,
        "\n## (f) Previews across processes\n\nTwo `gateway serve` processes, A and B, on one PostgreSQL database. Each trial creates a session, opens a stream asking for `agent.message` previews on A and one on B, and sends a `user.message` to B, which runs the turn: the fake model answers {} words, one delta each, {} ms apart. B's subscriber gets the deltas from B itself, A's through PostgreSQL `NOTIFY`; the added latency is A's arrival minus B's, delta by delta (matched by event id and text). One turn at a time, after 2 warm-up turns: this is latency, not load. Previews are best effort, so the share A received is reported, not required.\n",
        p.words, p.drip_ms
    );
    header(
        out,
        &[
            "Engine",
            "trials",
            "deltas at A / at B",
            "share at A",
            "added p50 / p90 / p99 / max ms",
            "A's first delta before the committed message",
            "how long before (p50 / min ms)",
            "errors",
        ],
    );
    let lead_min = p.lead.cdf.first().map(|q| q[0]).unwrap_or_default();
    row(
        out,
        &[
            p.engine.map(Engine::name).unwrap_or("?").into(),
            format!("{} / {}", p.trials, p.trials_wanted),
            format!("{} / {}", p.deltas_relayed, p.deltas_local),
            p.relayed_share().map(fmt::pct).unwrap_or_else(|| "–".into()),
            format!(
                "{} / {} / {} / {}",
                fmt::ms(p.added.p50_ms),
                fmt::ms(p.added.p90_ms),
                fmt::ms(p.added.p99_ms),
                fmt::ms(p.added.max_ms)
            ),
            format!("{} of {} trials", p.early_trials, p.trials_wanted),
            format!("{} / {}", fmt::ms(p.lead.p50_ms), fmt::ms(lead_min)),
            fmt::errors(&p.errors),
        ],
    );
    notes(out, &p.notes);
    image(out, plots, "previews-latency.svg");
}

pub fn markdown(r: &Results, plots: &[PlotFile]) -> String {
    let mut out = String::new();
    let m = &r.meta;
    let _ = writeln!(out, "# Benchmarks\n");
    let _ = writeln!(
        out,
        "Written by `scripts/bench{}` (the `bench` driver of `tests/bench`), {} to {}. Gateway measured: `{}` ({}, \
         built {}){}. Load average at start {}, at end {} (other work on the machine shows here).\n",
        if m.quick { " --quick" } else { "" },
        m.started,
        m.finished,
        m.gateway_binary,
        m.gateway_version,
        m.gateway_built,
        m.git.as_ref().map(|g| format!("; working tree at {g}")).unwrap_or_default(),
        m.load_start,
        m.load_end,
    );
    if m.quick {
        let _ = writeln!(
            out,
            "> **Quick run**: a few seconds per scenario and one round (gateway, then baseline). The figures are indicative only; `scripts/bench` (full mode) publishes the real ones.\n"
        );
    }
    let _ = writeln!(
        out,
        "Raw figures: [benchmarks/results.json](benchmarks/results.json). Run it yourself: `scripts/bench` (full, ~15 min) or `scripts/bench --quick`.\n"
    );
    machine(&mut out, r);
    let es = engines(r);
    if !es.is_empty() {
        let _ = writeln!(
            out,
            "\n## Acceptance criteria, as measured{}\n",
            if m.quick { " (quick run: indicative)" } else { "" }
        );
        let mut head = vec!["Criterion"];
        head.extend(es.iter().map(|e| e.name()));
        header(&mut out, &head);
        for a in acceptance::rows(r, &es) {
            let mut cells = vec![a.criterion.to_owned()];
            cells.extend(a.cells);
            row(&mut out, &cells);
        }
    }
    managed_agents(&mut out, r, plots);
    a2a(&mut out, r, plots);
    acp(&mut out, r, plots);
    fsync(&mut out, r);
    memory(&mut out, r);
    previews(&mut out, r, plots);
    processes::section(&mut out, r);
    if !r.failures.is_empty() {
        let _ = writeln!(out, "\n## What could not be measured\n");
        for f in &r.failures {
            let first = f.lines().next().unwrap_or_default();
            let _ = writeln!(out, "- {first}");
        }
    }
    let _ = writeln!(out, "\n## Method\n\n{METHOD}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (b) on SQLite (the acceptance tests' fixture): 1 ms of CPU per message served at
    /// 500/s; an overload at 1000/s that served 100 and refused 100 on 120 ms; a refusal
    /// segment with `ok` accepted and 1000 refused on 50 ms.
    fn results(ok: u64) -> Results {
        super::acceptance::tests::results(Some((ok, 1000, 50.0)))
    }

    #[test]
    fn the_overload_table_shows_the_direct_refusal_figure_and_the_residual() {
        let md = markdown(&results(0), &[]);
        assert!(md.contains("| SQLite | gateway | 500.0 | 1000 |"), "{md}");
        assert!(md.contains("| residual: 20.0 % |"), "{md}");
        assert!(md.contains("| SQLite | gateway refusing every turn | 500.0 | 1000 |"), "{md}");
        assert!(md.contains("| 0 / 1000 |"), "{md}");
        assert!(md.contains("| direct: 5.0 % (0.050 ms) |"), "{md}");
        assert!(!md.contains("- gateway refusing every turn (SQLite)"), "{md}");
    }

    #[test]
    fn a_refusal_segment_that_accepted_anything_is_a_note_not_a_figure() {
        let md = markdown(&results(5), &[]);
        assert!(md.contains("| direct: no figure (see below) |"), "{md}");
        assert!(
            md.contains(
                "- gateway refusing every turn (SQLite): the gateway meant to refuse every turn accepted 5 of 1005"
            ),
            "{md}"
        );
    }
}
