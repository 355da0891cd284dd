"""A native v0.3 remote A2A agent (a2a-sdk 0.3.26, JSON-RPC at /), same script as peer_v1.py.

    python peer_v03.py PORT
"""

import asyncio
import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Part, TaskState, TextPart
from a2a.utils import new_task
from starlette.responses import JSONResponse
from starlette.routing import Route

COUNTS = {"messages": 0, "cancels": 0, "texts": []}
CANCELED = set()


def text_part(t: str) -> Part:
    return Part(root=TextPart(text=t))


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue) -> None:
        COUNTS["messages"] += 1
        text = context.get_user_input()
        COUNTS["texts"].append(text)
        task = context.current_task
        if task is None:
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.input_required:
            await up.add_artifact([text_part(f"hello {text}")])
            await up.complete()
            return
        await up.start_work()
        words = text.split()
        if words[:1] == ["slow"]:
            seconds = float(words[1]) if len(words) > 1 else 5
            for i in range(int(seconds * 2)):
                await asyncio.sleep(0.5)
                if task.id in CANCELED:
                    return
                await up.add_artifact([text_part(f"tick {i}")], artifact_id=f"tick-{i}")
            await up.add_artifact([text_part("done")], artifact_id="done")
            await up.complete()
        elif text == "ask":
            await up.requires_input(up.new_agent_message([text_part("what is your name?")]), final=True)
        else:
            await up.add_artifact([text_part(f"echo: {text}")])
            await up.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        COUNTS["cancels"] += 1
        CANCELED.add(context.task_id)
        up = TaskUpdater(event_queue, context.task_id, context.context_id)
        await up.cancel()


async def count(_request):
    return JSONResponse(COUNTS)


def main() -> None:
    port = int(sys.argv[1])
    card = AgentCard(
        name="peer-v03",
        description="echo peer (a2a-sdk 0.3.26)",
        url=f"http://127.0.0.1:{port}/",
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text"],
        default_output_modes=["text"],
        skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore())
    app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
    app.router.routes.append(Route("/count", count))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
