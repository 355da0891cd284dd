"""Keep-alive comments on an idle stream (ADR 0007 §7: every 15 s).

The probe stream is opened by an autouse session fixture when the suite starts, so by the time
this (last) file runs most of the wait has already passed."""

from __future__ import annotations

import time

KEEPALIVE_WITHIN = 20.0  # seconds: one 15 s period plus slack


def test_idle_stream_gets_keep_alive_comments(keepalive_probe):
    left = KEEPALIVE_WITHIN - (time.monotonic() - keepalive_probe.started)
    keepalive_probe.seen.wait(timeout=max(left, 0.0))
    assert keepalive_probe.error is None, f"the probe stream failed: {keepalive_probe.error!r}"
    assert keepalive_probe.comments, f"no keep-alive comment within {KEEPALIVE_WITHIN}s on an idle stream"
    at, line = keepalive_probe.comments[0]
    assert line.startswith(":") and at <= KEEPALIVE_WITHIN, (at, line)
