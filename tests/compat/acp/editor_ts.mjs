// The editor face of `gateway acp`, driven by a TypeScript client on @agentclientprotocol/sdk@2.4.0.
// The SDK parses every incoming frame against the v1 schema, so a malformed frame from the
// gateway fails this script (see sdk.mjs).
//
// Usage: node editor_ts.mjs GATEWAY_BIN CONFIG WORKDIR
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Readable, Writable } from "node:stream";
import { acp, check, run } from "./sdk.mjs";

const [gateway, config, work] = process.argv.slice(2);

await run(async () => {
  const ws1 = join(work, "ws-ts-1");
  const ws2 = join(work, "ws-ts-2");
  mkdirSync(ws1, { recursive: true });
  mkdirSync(ws2, { recursive: true });
  const child = spawn(gateway, ["acp", "--config", config], { cwd: work, stdio: ["pipe", "pipe", "inherit"] });
  const updates = new Map();
  const permissions = [];
  let answerKind = "allow_once";
  let onProgress = () => {};
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "ts-editor" })
    .onNotification("session/update", ({ params }) => {
      if (!updates.has(params.sessionId)) updates.set(params.sessionId, []);
      updates.get(params.sessionId).push(params.update);
      if (params.update.sessionUpdate === "tool_call_update" && params.update.status === "in_progress") onProgress();
    })
    .onRequest("session/request_permission", ({ params }) => {
      permissions.push(params);
      const option = params.options.find((o) => o.kind === answerKind);
      return { outcome: { outcome: "selected", optionId: option.optionId } };
    });
  const text = (sid) =>
    (updates.get(sid) ?? [])
      .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
      .map((u) => u.content.text)
      .join("");
  await app.connectWith(stream, async (agent) => {
    const init = await agent.request("initialize", { protocolVersion: 1, clientCapabilities: {}, clientInfo: { name: "ts", version: "1" } });
    check(init.protocolVersion === 1 && init.agentCapabilities.loadSession === true, "initialize");
    const s1 = (await agent.request("session/new", { cwd: ws1, mcpServers: [] })).sessionId;
    const s2 = (await agent.request("session/new", { cwd: ws2, mcpServers: [] })).sessionId;
    check(s1 && s2 && s1 !== s2, "session/new twice");

    // additionalDirectories: a file beside the project is read by its own path.
    check(init.agentCapabilities.sessionCapabilities.additionalDirectories !== undefined, "additionalDirectories is advertised");
    const extra = join(dirname(ws1), "ws-ts-extra");
    mkdirSync(extra, { recursive: true });
    writeFileSync(join(extra, "beside.txt"), "beside the project\n");
    const sx = (await agent.request("session/new", { cwd: ws1, mcpServers: [], additionalDirectories: [extra] })).sessionId;
    const read = await agent.request("session/prompt", {
      sessionId: sx,
      prompt: [{ type: "text", text: `tool:read {"file_path": "${join(extra, "beside.txt")}"}` }],
    });
    check(read.stopReason === "end_turn" && text(sx).includes("beside the project"), "a file in an additional directory is read");

    let r = await agent.request("session/prompt", { sessionId: s1, prompt: [{ type: "text", text: "streamed reply" }] });
    check(r.stopReason === "end_turn", "a streamed prompt ends with end_turn");
    check(text(s1) === "echo: streamed reply", `the streamed text is whole and not repeated (${JSON.stringify(text(s1))})`);
    const info = updates.get(s1).filter((u) => u.sessionUpdate === "session_info_update");
    check(info.length === 1 && info[0].title === "streamed reply", "session_info_update titles the session from its first prompt");
    const usage = updates.get(s1).filter((u) => u.sessionUpdate === "usage_update");
    check(usage.length === 1 && usage[0].used > 0 && usage[0].size >= usage[0].used, "usage_update reports the context");
    check(r.usage && r.usage.totalTokens === r.usage.inputTokens + r.usage.outputTokens, "the prompt response carries the turn's usage");

    r = await agent.request("session/prompt", {
      sessionId: s1,
      prompt: [{ type: "text", text: 'tool:bash {"command": "echo from-bash > bash.txt"}' }],
    });
    check(r.stopReason === "end_turn" && permissions.length === 1, "bash (always_ask) asked permission once");
    check(permissions[0].toolCall.kind === "execute" && permissions[0].toolCall.status === "pending", "the permission names an execute call");
    check(readFileSync(join(ws1, "bash.txt"), "utf8") === "from-bash\n", "the approved command ran in the cwd");
    const calls = updates.get(s1).filter((u) => u.sessionUpdate.startsWith("tool_call"));
    check(calls.some((u) => u.status === "in_progress") && calls.some((u) => u.status === "completed"), "tool call went in_progress then completed");

    // Reject: the tool does not run.
    answerKind = "reject_once";
    r = await agent.request("session/prompt", {
      sessionId: s1,
      prompt: [{ type: "text", text: 'tool:bash {"command": "echo no > rejected.txt"}' }],
    });
    check(r.stopReason === "end_turn" && permissions.length === 2, "a rejected call ends the turn normally");
    let rejectedExists = true;
    try { readFileSync(join(ws1, "rejected.txt")); } catch { rejectedExists = false; }
    check(!rejectedExists, "a rejected command did not run");

    // Cancel mid-turn while the second session works.
    answerKind = "allow_once";
    const running = new Promise((resolve) => { onProgress = resolve; });
    const long = agent.request("session/prompt", { sessionId: s1, prompt: [{ type: "text", text: 'tool:bash {"command": "sleep 30"}' }] });
    await running;
    const other = agent.request("session/prompt", { sessionId: s2, prompt: [{ type: "text", text: "still here" }] });
    await agent.notify("session/cancel", { sessionId: s1 });
    check((await long).stopReason === "cancelled", "the cancelled prompt ends with stopReason cancelled");
    check((await other).stopReason === "end_turn" && text(s2) === "echo: still here", "the second session kept working");

    const before = updates.get(s1).length;
    await agent.request("session/load", { sessionId: s1, cwd: ws1, mcpServers: [] });
    const replay = updates.get(s1).slice(before);
    check(replay.some((u) => u.sessionUpdate === "user_message_chunk" && u.content.text === "streamed reply"), "load replays user messages");
    check(replay.some((u) => u.sessionUpdate === "agent_message_chunk" && u.content.text === "echo: streamed reply"), "load replays agent messages");

    const listed = await agent.request("session/list", {});
    const ids = listed.sessions.map((s) => s.sessionId);
    check(ids.includes(s1) && ids.includes(s2), "session/list shows both sessions");

    // The permission preset: allow_all runs bash without asking, between prompts.
    const asked = permissions.length;
    const set = await agent.request("session/set_config_option", { sessionId: s1, configId: "permissions", value: "allow_all" });
    check(set.configOptions.find((o) => o.id === "permissions").currentValue === "allow_all", "set_config_option sets the preset");
    r = await agent.request("session/prompt", {
      sessionId: s1,
      prompt: [{ type: "text", text: 'tool:bash {"command": "echo allowed > allowed.txt"}' }],
    });
    check(r.stopReason === "end_turn" && permissions.length === asked, "allow_all: bash ran without asking");
    check(readFileSync(join(ws1, "allowed.txt"), "utf8") === "allowed\n", "allow_all: the command ran");

    // The model option (category "model"): the agent's models, switched between prompts.
    const model = set.configOptions.find((o) => o.id === "model");
    check(model && model.category === "model" && model.options.map((o) => o.value).join() === "claude-sonnet-4-5,claude-opus-4-5",
      "the model option lists the agent's models");
    const switched = await agent.request("session/set_config_option", { sessionId: s1, configId: "model", value: "claude-opus-4-5" });
    check(switched.configOptions.find((o) => o.id === "model").currentValue === "claude-opus-4-5", "set_config_option sets the model");
    check(switched.configOptions.find((o) => o.id === "permissions").currentValue === "allow_all", "the preset stays as it was");

    await agent.request("session/close", { sessionId: s2 });
    let refused = false;
    try {
      await agent.request("session/prompt", { sessionId: s2, prompt: [{ type: "text", text: "x" }] });
    } catch (e) {
      refused = e.code === -32002;
    }
    check(refused, "a closed session is no longer open on the connection (-32002)");

    check(init.agentCapabilities.sessionCapabilities.delete !== undefined, "session/delete is advertised");
    await agent.request("session/delete", { sessionId: s1 });
    const after = (await agent.request("session/list", {})).sessions.map((s) => s.sessionId);
    check(!after.includes(s1) && after.includes(s2), "session/delete removes the session, and only it");
  });
  child.kill("SIGTERM");
});
