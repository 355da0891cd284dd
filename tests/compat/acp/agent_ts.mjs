// An ACP agent on @agentclientprotocol/sdk@2.4.0, run by the gateway as an `acp:` backend.
// What it does is chosen by the prompt's first word:
//   files       read input.txt through fs/read_text_file, write output.txt (upper-cased) through
//               fs/write_text_file, report both as tool calls
//   terminal    run `sh -c 'echo term-out; exit 4'` through terminal/*, report its output
//   permission  ask permission for an edit; on allow write approved.txt, else say rejected
//   slow        stream a chunk every 200 ms until cancelled (then answer stopReason cancelled)
//   whoami      say its session id and whether it was reopened with session/load
//   anything    echo it back in two chunks
// It checks the gateway advertised fs and terminal capabilities, and fails the prompt if not.
import { Readable, Writable } from "node:stream";
import { join } from "node:path";
import { acp } from "./sdk.mjs";

const sessions = new Map(); // sessionId -> { cwd, cancelled }
let clientCaps = {};
let n = 0;

const say = (client, sessionId, text) =>
  client.notify("session/update", { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text } } });
const tool = (client, sessionId, update) => client.notify("session/update", { sessionId, update });

acp
  .agent({ name: "ts-agent" })
  .onRequest("initialize", ({ params }) => {
    clientCaps = params.clientCapabilities ?? {};
    return {
      protocolVersion: 1,
      agentCapabilities: { loadSession: true, promptCapabilities: { embeddedContext: true } },
      authMethods: [],
      agentInfo: { name: "ts-agent", version: "1.0.0" },
    };
  })
  .onRequest("session/new", ({ params }) => {
    const sessionId = `ts-${++n}`;
    sessions.set(sessionId, { cwd: params.cwd, cancelled: false, loaded: false });
    return { sessionId };
  })
  .onRequest("session/load", async ({ params, client }) => {
    // A new process knows nothing of the session; a real agent would read its transcript.
    sessions.set(params.sessionId, { cwd: params.cwd, cancelled: false, loaded: true });
    await client.notify("session/update", { sessionId: params.sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "replayed history" } } });
    return {};
  })
  .onNotification("session/cancel", ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (s) s.cancelled = true;
  })
  .onRequest("session/prompt", async ({ params, client }) => {
    const { sessionId } = params;
    const s = sessions.get(sessionId);
    s.cancelled = false;
    const text = params.prompt.filter((b) => b.type === "text").map((b) => b.text).join(" ");
    const word = text.trim().split(/\s+/)[0];
    if (!clientCaps.fs?.readTextFile || !clientCaps.fs?.writeTextFile || !clientCaps.terminal) {
      throw new Error(`the client did not advertise fs and terminal: ${JSON.stringify(clientCaps)}`);
    }
    if (word === "files") {
      await tool(client, sessionId, { sessionUpdate: "tool_call", toolCallId: "read-1", title: "Read input.txt", kind: "read", status: "in_progress", rawInput: { path: "input.txt" } });
      const { content } = await client.request("fs/read_text_file", { sessionId, path: join(s.cwd, "input.txt") });
      await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "read-1", status: "completed", content: [{ type: "content", content: { type: "text", text: content } }] });
      await tool(client, sessionId, { sessionUpdate: "tool_call", toolCallId: "write-1", title: "Write output.txt", kind: "edit", status: "in_progress" });
      await client.request("fs/write_text_file", { sessionId, path: join(s.cwd, "sub", "output.txt"), content: content.toUpperCase() });
      await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "write-1", status: "completed", content: [{ type: "diff", path: join(s.cwd, "sub", "output.txt"), newText: content.toUpperCase() }] });
      let refused = "";
      try {
        await client.request("fs/read_text_file", { sessionId, path: "/etc/hostname" });
      } catch (e) {
        refused = `refused ${e.code}`;
      }
      await say(client, sessionId, `read ${content.length} bytes; outside: ${refused}`);
      return { stopReason: "end_turn" };
    }
    if (word === "terminal") {
      const { terminalId } = await client.request("terminal/create", { sessionId, command: "sh", args: ["-c", "echo term-out; echo $GREETING; exit 4"], env: [{ name: "GREETING", value: "hi-env" }], outputByteLimit: 1000 });
      await tool(client, sessionId, { sessionUpdate: "tool_call", toolCallId: "term-1", title: "Run sh", kind: "execute", status: "in_progress", content: [{ type: "terminal", terminalId }] });
      const exit = await client.request("terminal/wait_for_exit", { sessionId, terminalId });
      const out = await client.request("terminal/output", { sessionId, terminalId });
      await client.request("terminal/release", { sessionId, terminalId });
      await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "term-1", status: exit.exitCode === 0 ? "completed" : "failed", rawOutput: out });
      await say(client, sessionId, `terminal exit ${exit.exitCode}: ${out.output.trim().replace(/\n/g, " ")}`);
      return { stopReason: "end_turn" };
    }
    if (word === "permission") {
      await tool(client, sessionId, { sessionUpdate: "tool_call", toolCallId: "perm-1", title: "Write approved.txt", kind: "edit", status: "pending", rawInput: { file: "approved.txt" } });
      const answer = await client.request("session/request_permission", {
        sessionId,
        toolCall: { toolCallId: "perm-1", title: "Write approved.txt", kind: "edit", status: "pending" },
        options: [
          { optionId: "yes", name: "Allow", kind: "allow_once" },
          { optionId: "no", name: "Reject", kind: "reject_once" },
        ],
      });
      if (s.cancelled || answer.outcome.outcome === "cancelled") return { stopReason: "cancelled" };
      if (answer.outcome.optionId === "yes") {
        await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "perm-1", status: "in_progress" });
        await client.request("fs/write_text_file", { sessionId, path: join(s.cwd, "approved.txt"), content: "approved" });
        await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "perm-1", status: "completed", content: [{ type: "content", content: { type: "text", text: "wrote approved.txt" } }] });
        await say(client, sessionId, "permission: allowed");
      } else {
        await tool(client, sessionId, { sessionUpdate: "tool_call_update", toolCallId: "perm-1", status: "failed" });
        await say(client, sessionId, "permission: rejected");
      }
      return { stopReason: "end_turn" };
    }
    if (word === "whoami") {
      await say(client, sessionId, `session ${sessionId} loaded=${s.loaded}`);
      return { stopReason: "end_turn" };
    }
    if (word === "slow") {
      for (let i = 0; i < 100 && !s.cancelled; i++) {
        await say(client, sessionId, `tick ${i} `);
        await new Promise((r) => setTimeout(r, 200));
      }
      return { stopReason: s.cancelled ? "cancelled" : "end_turn" };
    }
    await client.notify("session/update", { sessionId, update: { sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "thinking about it" } } });
    const reply = `agent says: ${text}`;
    const half = Math.floor(reply.length / 2);
    await say(client, sessionId, reply.slice(0, half));
    await say(client, sessionId, reply.slice(half));
    return { stopReason: "end_turn" };
  })
  .connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
