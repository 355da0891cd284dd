// The gateway's public Managed Agents API as the viewer uses it: the key kept for this tab,
// JSON reads, and the session event stream.
//
// The stream is read with fetch and a ReadableStream, not EventSource: EventSource cannot
// send the `x-api-key` header, and a key in the URL would end up in logs and history. Reading
// the bytes ourselves also lets us resume with `Last-Event-ID` after the last event this page
// saw, on every reconnect we make.

const KEY_SLOT = "gateway-viewer.api-key";

/** The API key for this tab only (sessionStorage; never localStorage or a cookie). */
export const key = {
  get() {
    return sessionStorage.getItem(KEY_SLOT) || "";
  },
  set(value) {
    sessionStorage.setItem(KEY_SLOT, value);
  },
  clear() {
    sessionStorage.removeItem(KEY_SLOT);
  },
};

/** A refusal or failure answered by the gateway, in the API's error shape. */
export class ApiError extends Error {
  constructor(status, type, message, retryAfter) {
    super(message);
    this.status = status;
    this.type = type;
    this.retryAfter = retryAfter;
  }

  /** The request was refused for its credentials: the page must ask for a key. */
  get unauthorized() {
    return this.status === 401;
  }
}

async function apiError(response) {
  let type = "";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    type = body?.error?.type || "";
    message = body?.error?.message || message;
  } catch {
    // Not the API's JSON error shape; the status line says enough.
  }
  const retry = Number.parseInt(response.headers.get("retry-after") || "", 10);
  return new ApiError(response.status, type, message, Number.isFinite(retry) ? retry : null);
}

function headers(accept) {
  const h = new Headers({ accept });
  const k = key.get();
  if (k) h.set("x-api-key", k);
  return h;
}

function url(path, params) {
  const u = new URL(path, window.location.origin);
  for (const [name, value] of params || []) u.searchParams.append(name, value);
  return u;
}

// Same origin only, no cookies, never from a cache: every read is the gateway's answer now.
const FETCH = { cache: "no-store", credentials: "omit", redirect: "error", referrerPolicy: "no-referrer" };

/** GET `path` with query `params` (pairs); the parsed JSON body, or throws ApiError. */
export async function getJson(path, params, signal) {
  const response = await fetch(url(path, params), { ...FETCH, headers: headers("application/json"), signal });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

/** Most list pages read when loading one session's history. */
const MAX_EVENT_PAGES = 50;

/** A session's committed events, oldest first (at most MAX_EVENT_PAGES pages of 1000). */
export async function listEvents(sessionId, signal) {
  const events = [];
  let page = "";
  for (let n = 0; n < MAX_EVENT_PAGES; n++) {
    const params = [["limit", "1000"]];
    if (page) params.push(["page", page]);
    const body = await getJson(`/v1/sessions/${encodeURIComponent(sessionId)}/events`, params, signal);
    events.push(...body.data);
    page = body.next_page;
    if (!page) return { events, complete: true };
  }
  return { events, complete: false };
}

/** Longest line the parser holds while waiting for its end (the gateway's frames are one line of JSON). */
const MAX_LINE = 8 * 1024 * 1024;

/**
 * Server-Sent Events framing (the HTML standard's event stream format): text in, frames out.
 * A frame is `{event, data, id}`; comment lines (`: keep-alive`) produce none.
 */
export class SseParser {
  constructor() {
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
  }

  /** Feeds decoded text; returns the frames it completed. */
  push(text) {
    this.buffer += text;
    const frames = [];
    for (;;) {
      const end = this.buffer.search(/[\r\n]/);
      if (end < 0) break;
      // A CR at the very end may be the first half of a CRLF still on its way.
      if (this.buffer[end] === "\r" && end === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, end);
      const skip = this.buffer.startsWith("\r\n", end) ? 2 : 1;
      this.buffer = this.buffer.slice(end + skip);
      const frame = this.line(line);
      if (frame) frames.push(frame);
    }
    if (this.buffer.length > MAX_LINE) throw new Error("an event stream line is longer than the viewer reads");
    return frames;
  }

  line(line) {
    if (line === "") {
      const frame = this.data.length ? { event: this.event || "message", data: this.data.join("\n"), id: this.id } : null;
      this.reset();
      return frame;
    }
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
    return null;
  }
}

/** Without a byte for this long (the gateway sends a keep-alive every 15 s) the stream is dead. */
const IDLE_MS = 40_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Follows one session's event stream until `stop()`, reconnecting after every end or failure
 * and resuming after `lastId()` (the last committed event the page holds), so no event is
 * missed or shown twice across a reconnect. Agent text deltas (`event_deltas[]`) are asked
 * for; they are previews, never replayed.
 *
 * - `opened(resumed)` runs once the stream's head arrived, before its frames are read, so
 *   the caller can read the history knowing the stream already holds whatever comes next;
 * - `frame(f)` gets each frame; `state(s)` "connecting" / "live" / "reconnecting";
 * - `fatal(error)` when retrying cannot help (a refused key, an unknown session); following stops.
 */
export function follow(sessionId, { lastId, opened, frame, state, fatal }) {
  let stopped = false;
  let aborter = null;
  (async () => {
    let failures = 0;
    let connected = false;
    while (!stopped) {
      aborter = new AbortController();
      const signal = aborter.signal;
      // 1 s after a stream ended, then doubling per failure up to 10 s.
      let wait = Math.min(1000 * 2 ** failures, 10_000);
      failures = Math.min(failures + 1, 4);
      state(connected ? "reconnecting" : "connecting");
      try {
        const h = headers("text/event-stream");
        const resumeFrom = lastId();
        if (resumeFrom) h.set("last-event-id", resumeFrom);
        const path = `/v1/sessions/${encodeURIComponent(sessionId)}/events/stream`;
        const response = await fetch(url(path, [["event_deltas[]", "agent.message"]]), { ...FETCH, headers: h, signal });
        if (!response.ok) {
          const error = await apiError(response);
          if (response.status === 429 || response.status >= 500) {
            if (error.retryAfter) wait = error.retryAfter * 1000;
            throw error;
          }
          fatal(error);
          return;
        }
        await opened(Boolean(resumeFrom));
        state("live");
        connected = true;
        failures = 0;
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        const parser = new SseParser();
        let idle = setTimeout(() => aborter.abort(), IDLE_MS);
        try {
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            clearTimeout(idle);
            idle = setTimeout(() => aborter.abort(), IDLE_MS);
            for (const f of parser.push(value)) {
              if (f.event === "session.deleted") stopped = true;
              frame(f);
            }
          }
        } finally {
          clearTimeout(idle);
        }
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && error.unauthorized) {
          fatal(error);
          return;
        }
      }
      if (!stopped) {
        state("reconnecting");
        await sleep(wait);
      }
    }
  })();
  return {
    stop() {
      stopped = true;
      aborter?.abort();
    },
  };
}
