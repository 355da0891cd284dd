"""An editor for the ACP compat scripts (the Python SDK's client side) that records what it is
sent: the updates of each session, the permission requests it answered (by option kind), and
when a tool call started running."""

import asyncio

from acp import schema


class RecordingEditor:
    def __init__(self):
        self.updates = {}  # session id -> [update]
        self.permissions = []  # (session id, tool call title, options)
        self.answer_kind = "allow_once"
        self.in_progress = asyncio.Event()

    def on_connect(self, conn):
        self.conn = conn

    async def session_update(self, session_id, update, **kwargs):
        self.updates.setdefault(session_id, []).append(update)
        if getattr(update, "session_update", None) == "tool_call_update" and update.status == "in_progress":
            self.in_progress.set()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append((session_id, tool_call.title, options))
        chosen = next(o for o in options if o.kind == self.answer_kind)
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id)
        )

    def text(self, sid, kind="agent_message_chunk"):
        return "".join(
            u.content.text for u in self.updates.get(sid, []) if u.session_update == kind and hasattr(u.content, "text")
        )

    def kinds(self, sid):
        return [u.session_update for u in self.updates.get(sid, [])]

    def results(self):
        """The status and text of every finished tool call, in the order sessions were seen."""
        out = []
        for updates in self.updates.values():
            for u in updates:
                if getattr(u, "session_update", None) == "tool_call_update" and u.status in ("completed", "failed"):
                    texts = [getattr(getattr(c, "content", None), "text", "") for c in (u.content or [])]
                    out.append((u.status, "".join(texts)))
        return out
