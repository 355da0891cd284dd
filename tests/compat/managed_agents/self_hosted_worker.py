"""The official SDK's self-hosted environment worker, run the way a user runs it.

    python self_hosted_worker.py BASE_URL ENVIRONMENT_ID WORKDIR

The environment key comes from $SELF_HOSTED_ENVIRONMENT_KEY (kept out of argv). It builds
`AsyncAnthropic(base_url=BASE_URL, api_key="unused").beta.environments.work.worker(...)` with the
SDK's defaults (the built-in toolset bound to WORKDIR, max_idle 60 s) and runs it until killed.
Everything is logged to stderr at INFO (the SDK's worker and runner loggers and one line per HTTP
request); test_self_hosted.py starts it in a process group of its own with stderr going to a
file, so that a test can SIGKILL it together with the bash it runs, and shows that file when the
test fails. Not a test module: pytest does not collect it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from anthropic import AsyncAnthropic

log = logging.getLogger("self_hosted_worker")


async def serve(base_url: str, environment_id: str, environment_key: str, workdir: str) -> None:
    client = AsyncAnthropic(base_url=base_url, api_key="unused")
    worker = client.beta.environments.work.worker(
        environment_id=environment_id, environment_key=environment_key, workdir=workdir)
    log.info("worker starting pid=%d environment_id=%s workdir=%s", os.getpid(), environment_id, workdir)
    await worker.run()


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, environment_id, workdir = sys.argv[1:]
    environment_key = os.environ.get("SELF_HOSTED_ENVIRONMENT_KEY", "")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if not environment_key:
        log.error("SELF_HOSTED_ENVIRONMENT_KEY is not set")
        return 2
    try:
        asyncio.run(serve(base_url, environment_id, environment_key, workdir))
    except KeyboardInterrupt:
        log.info("worker interrupted")
        return 130
    except BaseException:
        # run() only returns by raising: a fatal poll error (401/403/404...) ends it.
        log.exception("worker run() ended")
        return 1
    log.error("worker run() returned")
    return 1


if __name__ == "__main__":
    sys.exit(main())
