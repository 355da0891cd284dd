// One session's timeline: Managed Agents events, as they are committed or previewed, turned
// into rows a person reads. Every piece of session content is set as text (textContent),
// never as markup, so nothing a session holds can become code or layout in this page.

/** An element with a class and, optionally, text. */
export function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function clock(iso) {
  const t = iso ? new Date(iso) : null;
  return t && !Number.isNaN(t.getTime()) ? t.toLocaleTimeString([], { hour12: false }) : "";
}

/** The text of content blocks; other blocks are named, not shown. */
function blocksText(content) {
  if (!Array.isArray(content)) return "";
  return content
    .map((b) => (b?.type === "text" ? b.text : `[${b?.type || "block"}]`))
    .join("\n");
}

function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** Longest text shown in one block; the rest is cut with a note, so a huge result cannot stall the page. */
const MAX_SHOWN = 20_000;

function shown(text) {
  return text.length > MAX_SHOWN ? `${text.slice(0, MAX_SHOWN)}\n… (${text.length - MAX_SHOWN} more characters)` : text;
}

export class Timeline {
  constructor(root) {
    this.root = root;
    this.clear();
  }

  clear() {
    this.root.replaceChildren();
    /** Rows of agent messages by event id (previews, then their committed form). */
    this.messages = new Map();
    /** Tool call cards by tool-use event id. */
    this.tools = new Map();
    this.environmentState = null;
  }

  row(kind, type, at) {
    const li = el("li", `row ${kind}`);
    li.dataset.type = type;
    li.append(el("span", "at", clock(at)), el("span", "kind", kind.replace("-", " ")));
    const body = el("div", "body");
    li.append(body);
    this.root.append(li);
    li.scrollIntoView({ block: "nearest" });
    return body;
  }

  note(kind, type, at, text) {
    this.row(kind, type, at).append(el("span", "text", text));
  }

  /** A committed event, as listed or streamed. */
  add(e) {
    const at = e.processed_at;
    switch (e.type) {
      case "user.message":
        this.row("user", e.type, at).append(el("p", "text", shown(blocksText(e.content))));
        break;
      case "user.interrupt":
        this.note("user", e.type, at, "interrupted the agent");
        break;
      case "agent.message": {
        this.message(e.id, at).replaceChildren(el("p", "text", shown(blocksText(e.content))));
        const li = this.messages.get(e.id);
        li.classList.remove("streaming");
        li.querySelector(".at").textContent = clock(at);
        break;
      }
      case "agent.thinking":
        this.note("agent", e.type, at, "thinking");
        break;
      case "agent.tool_use":
      case "agent.mcp_tool_use":
      case "agent.custom_tool_use":
        this.toolCall(e);
        break;
      case "agent.tool_result":
      case "agent.mcp_tool_result":
        this.toolResult(e.tool_use_id || e.mcp_tool_use_id, e, "result");
        break;
      case "user.tool_result":
      case "user.custom_tool_result":
        this.toolResult(e.tool_use_id || e.custom_tool_use_id, e, "result from the client");
        break;
      case "user.tool_confirmation":
        this.confirmation(e);
        break;
      case "session.status_running":
        this.note("status", e.type, at, "turn started: running");
        break;
      case "session.status_idle":
        this.idle(e);
        break;
      case "session.status_rescheduled":
        this.note("status", e.type, at, "rescheduled: the turn will run again");
        break;
      case "session.status_terminated":
        this.note("status", e.type, at, "terminated");
        break;
      case "session.deleted":
        this.note("status", e.type, at, "session deleted");
        break;
      case "session.error": {
        const err = e.error || {};
        const retry = err.retry_status?.type ? ` (${err.retry_status.type})` : "";
        this.note("error", e.type, at, `${err.type || "error"}: ${err.message || ""}${retry}`);
        break;
      }
      case "agent.session.requires_action":
        this.note("environment", e.type, at, "waiting for an executor to connect to the environment");
        break;
      case "session.usage": {
        const u = e.usage || {};
        const written = u.cache_creation?.ephemeral_5m_input_tokens || 0;
        this.note("status", e.type, at,
          `usage so far: ${u.input_tokens || 0} in, ${u.output_tokens || 0} out, ` +
          `${u.cache_read_input_tokens || 0} read from cache, ${written} written to it`);
        break;
      }
      case "span.model_request_start":
      case "span.model_request_end":
        break;
      default:
        if (e.type?.startsWith("agent.session.environment.")) {
          const env = e.environment || {};
          const error = env.error?.message ? `: ${env.error.message}` : "";
          this.note("environment", e.type, at, `executor connection ${env.status || e.type.split(".").pop()}${error}`);
        } else {
          this.note("other", e.type || "unknown", at, e.type || "unknown event");
        }
    }
  }

  /** The body of the agent message row for `id`, made on first sight. */
  message(id, at) {
    let li = this.messages.get(id);
    if (!li) {
      const body = this.row("agent", "agent.message", at);
      li = body.parentElement;
      this.messages.set(id, li);
    }
    return li.querySelector(".body");
  }

  /** A preview frame: `event_start` opens the agent's message, `event_delta` adds text as it arrives. */
  preview(p) {
    if (p.type === "event_start" && p.event?.type === "agent.message") {
      if (this.messages.has(p.event.id)) return;
      this.message(p.event.id);
      this.messages.get(p.event.id).classList.add("streaming");
    } else if (p.type === "event_delta") {
      const li = this.messages.get(p.event_id);
      if (!li || !li.classList.contains("streaming")) return;
      const body = li.querySelector(".body");
      const index = Number(p.delta?.index) || 0;
      let block = body.querySelector(`p[data-index="${index}"]`);
      if (!block) {
        block = el("p", "text");
        block.dataset.index = String(index);
        body.append(block);
      }
      block.textContent += p.delta?.content?.text || "";
    }
  }

  toolCall(e) {
    const body = this.row("tool", e.type, e.processed_at);
    const card = body.parentElement;
    const server = e.mcp_server_name ? ` (${e.mcp_server_name})` : "";
    body.append(el("div", "tool-name", `${e.name}${server}`));
    body.append(el("pre", "tool-input", shown(pretty(e.input))));
    const state = el("div", "tool-state");
    if (e.type === "agent.custom_tool_use") state.textContent = "waiting for the client's result";
    else if (e.evaluated_permission === "ask") this.awaitApproval(card, state);
    else state.textContent = "running";
    body.append(state);
    this.tools.set(e.id, card);
  }

  awaitApproval(card, state) {
    card.classList.add("waiting");
    state.textContent = "approval waiting";
  }

  toolResult(toolUseId, e, label) {
    const card = this.tools.get(toolUseId);
    const text = shown(blocksText(e.content));
    const result = el("pre", e.is_error ? "tool-result error" : "tool-result", text);
    if (!card) {
      this.row("tool", e.type, e.processed_at).append(el("div", "tool-name", label), result);
      return;
    }
    card.classList.remove("waiting");
    card.querySelector(".tool-state").textContent = e.is_error ? `${label}: error` : label;
    card.querySelector(".body").append(result);
  }

  confirmation(e) {
    const card = this.tools.get(e.tool_use_id);
    const text = e.result === "allow" ? "approved" : `denied${e.deny_message ? `: ${e.deny_message}` : ""}`;
    if (!card) {
      this.note("user", e.type, e.processed_at, `tool call ${text}`);
      return;
    }
    card.classList.remove("waiting");
    card.querySelector(".tool-state").textContent = text;
  }

  idle(e) {
    const reason = e.stop_reason?.type || "end_turn";
    this.note("status", e.type, e.processed_at, `idle: ${reason.replaceAll("_", " ")}`);
    if (reason !== "requires_action") return;
    for (const id of e.stop_reason.event_ids || []) {
      const card = this.tools.get(id);
      const state = card?.querySelector(".tool-state");
      if (state && card.dataset.type !== "agent.custom_tool_use") this.awaitApproval(card, state);
    }
  }

  /** The environment's state as the session reports it; a change becomes a row. */
  environment(state, at) {
    if (!state || state === this.environmentState) return;
    const first = this.environmentState === null;
    this.environmentState = state;
    // The state when the page opened the session is in the header; rows are changes seen since.
    if (first) return;
    this.note("environment", "environment_state", at, `environment ${state}`);
  }
}
