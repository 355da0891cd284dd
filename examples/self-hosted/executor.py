"""One executor: the official SDK's self-hosted environment worker, in a process of its own.

    python executor.py GATEWAY_URL ENVIRONMENT_ID WORKDIR SESSION_ID

handler.py starts it (one per session that asked for an executor). The environment key comes
from $ANTHROPIC_ENVIRONMENT_KEY, never from argv; it is removed from this process's environment
before the worker starts, so the `bash` tool (and whatever the agent runs with it) cannot read it
back. SESSION_ID only labels the log lines: the worker polls the whole environment's work queue.

It runs `AsyncAnthropic(base_url=GATEWAY_URL, api_key="unused").beta.environments.work.worker(
environment_id=ENVIRONMENT_ID, environment_key=..., workdir=WORKDIR).run()`, which loops until it
is killed (the handler SIGTERMs its process group) or a fatal poll error (a revoked key, a deleted
environment) ends it. Logs go to stderr.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from anthropic import AsyncAnthropic

log = logging.getLogger("self_hosted.executor")


async def serve(gateway_url: str, environment_id: str, environment_key: str, workdir: str) -> None:
    client = AsyncAnthropic(base_url=gateway_url, api_key="unused")
    worker = client.beta.environments.work.worker(
        environment_id=environment_id, environment_key=environment_key, workdir=workdir)
    await worker.run()


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    gateway_url, environment_id, workdir, session_id = sys.argv[1:]
    environment_key = os.environ.pop("ANTHROPIC_ENVIRONMENT_KEY", "")
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s executor[{session_id} pid={os.getpid()}] %(name)s: %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore"):  # one line per poll otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not environment_key:
        log.error("ANTHROPIC_ENVIRONMENT_KEY is not set")
        return 2
    log.info("starting: environment_id=%s workdir=%s", environment_id, workdir)
    try:
        asyncio.run(serve(gateway_url, environment_id, environment_key, workdir))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # run() only ends by raising: a fatal poll error (401/403/404...)
        log.error("worker ended: %s: %s", type(e).__name__, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
