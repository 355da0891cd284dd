"""A remote A2A agent for the outbound-backend tests: a2a-sdk 1.3.0 (v1.0, JSON-RPC).

    python peer_v1.py PORT [--no-streaming]

Text "slow N": N seconds of work (an artifact every 0.5 s) then "done"; "ask": INPUT_REQUIRED,
then "hello <answer>"; anything else: "echo: <text>". GET /count tells how many messages
(execute calls) and cancels the peer received, so tests can prove nothing was resent.
"""

import asyncio
import sys

import uvicorn
from a2a.helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

COUNTS = {"messages": 0, "cancels": 0, "texts": []}


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue) -> None:
        COUNTS["messages"] += 1
        text = context.get_user_input()
        COUNTS["texts"].append(text)
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await up.add_artifact([new_text_part(f"hello {text}")])
            await up.complete()
            return
        await up.start_work()
        words = text.split()
        if words[:1] == ["slow"]:
            seconds = float(words[1]) if len(words) > 1 else 5
            for i in range(int(seconds * 2)):
                await asyncio.sleep(0.5)
                await up.add_artifact([new_text_part(f"tick {i}")], artifact_id=f"tick-{i}")
            await up.add_artifact([new_text_part("done")], artifact_id="done")
            await up.complete()
        elif text == "ask":
            await up.requires_input(up.new_agent_message([new_text_part("what is your name?")]))
        else:
            await up.add_artifact([new_text_part(f"echo: {text}")])
            await up.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        COUNTS["cancels"] += 1
        up = TaskUpdater(event_queue, context.task_id, context.context_id)
        await up.cancel()


async def count(_request):
    return JSONResponse(COUNTS)


def main() -> None:
    port = int(sys.argv[1])
    streaming = "--no-streaming" not in sys.argv
    url = f"http://127.0.0.1:{port}/"
    card = AgentCard(
        name="peer-v1",
        description="echo peer (a2a-sdk 1.3.0)",
        version="1.0.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")],
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(Echo(), InMemoryTaskStore(), card)
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/") + [Route("/count", count)]
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
