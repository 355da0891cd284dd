"""The checks of the ACP compat scripts: each prints `ok - <what>` as it passes, and the run
ends with one `N passed, M failed` line (run-acp shows it) and a non-zero exit on the first
failure."""

import asyncio
import sys

passed = 0


def check(cond, what):
    """Fails the script with `what` unless `cond` holds."""
    global passed
    if not cond:
        raise AssertionError(what)
    passed += 1
    print(f"ok - {what}", flush=True)


def run(main, timeout):
    """Runs `main` (a coroutine function, or a plain function when `timeout` is None) and exits
    with the summary line: 0 when every check passed, 1 on the first failure or error."""
    try:
        if timeout is None:
            main()
        else:
            asyncio.run(asyncio.wait_for(main(), timeout))
    except Exception as e:  # noqa: BLE001 - report and fail
        print(f"FAILED: {type(e).__name__}: {e}", flush=True)
        print(f"{passed} passed, 1 failed")
        sys.exit(1)
    print(f"{passed} passed, 0 failed")
