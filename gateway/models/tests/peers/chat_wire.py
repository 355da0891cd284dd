"""Validates the model stub's Chat Completions wire format with the official `openai` package.

Usage: chat_wire.py <base_url>   (the stub's URL with `/v1`, as the SDK takes it)

Run by gateway/models/tests/openai_sdk.rs, which starts the stub and queues one fault for the
first request (a 429 `rate_limit_exceeded`). Every JSON body and every streamed chunk the stub
sends is validated strictly (pydantic strict mode: no coercion) against the package's own types,
`ChatCompletion` and `ChatCompletionChunk`, and rejected if it holds a field the types do not
know, anywhere, or lacks a field the real API always sends even where the types say optional.
The same answers then go through the SDK's own readers (its SSE decoder, its stream helper that
accumulates tool calls) to prove a real client consumes them. Exits non-zero on any mismatch.
"""

import json
import sys

import openai
import pydantic
from openai.types.chat import ChatCompletion, ChatCompletionChunk

MODEL = "gpt-stub"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
# The fake model calls a tool when the last user text starts with `tool:<name> <json input>`.
CALL_PROMPT = 'tool:get_weather {"city": "Paris", "units": ["C", "F"]}'
CALL_INPUT = {"city": "Paris", "units": ["C", "F"]}

# Keys the real API always sends, even where the SDK's types make them optional.
ALWAYS = {
    "chunk.choice": {"index", "delta", "finish_reason", "logprobs"},
    "completion.choice": {"index", "message", "finish_reason", "logprobs"},
    "message": {"role", "content", "refusal"},
    "usage": {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"},
}


class Mismatch(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Mismatch(what)


def no_unknown_fields(value, path):
    """Every model in the tree holds only fields its class declares."""
    if isinstance(value, pydantic.BaseModel):
        extra = value.model_extra or {}
        check(not extra, f"{path}: fields unknown to openai=={openai.__version__}: {sorted(extra)}")
        for name in type(value).model_fields:
            no_unknown_fields(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            no_unknown_fields(item, f"{path}[{n}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            no_unknown_fields(item, f"{path}.{key}")


def has_keys(data, kind, path):
    missing = ALWAYS[kind] - set(data)
    check(not missing, f"{path}: missing {sorted(missing)}")


def strict(cls, raw, path):
    """`raw` (JSON text) as `cls`, with no coercion and no unknown field anywhere."""
    try:
        value = cls.model_validate_json(raw, strict=True)
    except pydantic.ValidationError as e:
        raise Mismatch(f"{path}: not a valid {cls.__name__}: {e}") from e
    no_unknown_fields(value, path)
    return value


def usage_is_consistent(usage, path):
    has_keys(usage, "usage", path)
    check(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], f"{path}: total_tokens")
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    check(0 <= cached < usage["prompt_tokens"] or usage["prompt_tokens"] == 0, f"{path}: cached_tokens {cached}")


def completion(client, path, **kwargs):
    """A non-streamed completion, validated from its raw body, then parsed by the SDK."""
    raw = client.chat.completions.with_raw_response.create(model=MODEL, **kwargs)
    text = raw.http_response.text
    strict(ChatCompletion, text, path)
    data = json.loads(text)
    check(data["model"] == MODEL, f"{path}: model {data['model']!r}")
    check(len(data["choices"]) == 1, f"{path}: one choice")
    has_keys(data["choices"][0], "completion.choice", f"{path}.choices[0]")
    has_keys(data["choices"][0]["message"], "message", f"{path}.choices[0].message")
    usage_is_consistent(data["usage"], f"{path}.usage")
    return raw.parse()


def raw_stream(client, path, **kwargs):
    """A streamed completion read line by line: each chunk validated; returns the chunks."""
    chunks = []
    done = False
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, stream=True, stream_options={"include_usage": True}, **kwargs
    ) as response:
        check(response.headers["content-type"].startswith("text/event-stream"), f"{path}: content-type")
        for line in response.iter_lines():
            if not line:
                continue
            check(not done, f"{path}: data after [DONE]")
            check(line.startswith("data: "), f"{path}: a line that is not data: {line!r}")
            data = line[len("data: "):]
            if data == "[DONE]":
                done = True
                continue
            where = f"{path} chunk {len(chunks)}"
            strict(ChatCompletionChunk, data, where)
            chunk = json.loads(data)
            check("usage" in chunk, f"{where}: with include_usage every chunk has usage")
            for choice in chunk["choices"]:
                has_keys(choice, "chunk.choice", f"{where}.choices[{choice.get('index')}]")
            chunks.append(chunk)
    check(done, f"{path}: no data: [DONE]")
    check(len(chunks) >= 3, f"{path}: {len(chunks)} chunks")
    first = chunks[0]
    for n, chunk in enumerate(chunks):
        same = (chunk["id"], chunk["created"], chunk["model"]) == (first["id"], first["created"], MODEL)
        check(same, f"{path} chunk {n}: id, created and model differ from the first chunk's")
    *answer, last = chunks
    check(last["choices"] == [] and last["usage"] is not None, f"{path}: the last chunk carries the usage only")
    usage_is_consistent(last["usage"], f"{path} usage")
    check(all(c["usage"] is None for c in answer), f"{path}: usage before the last chunk")
    check(answer[0]["choices"][0]["delta"].get("role") == "assistant", f"{path}: the first delta names the role")
    finishes = [c["choices"][0]["finish_reason"] for c in answer]
    check(finishes[-1] is not None and all(f is None for f in finishes[:-1]), f"{path}: finish_reason {finishes}")
    return answer


def rate_limit_error(client):
    """The first request meets the fault the Rust test queued: OpenAI's error shape."""
    try:
        client.with_options(max_retries=0).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}]
        )
    except openai.RateLimitError as e:
        check(e.status_code == 429, f"error: status {e.status_code}")
        check(e.type == "rate_limit_exceeded", f"error: type {e.type!r}")
        check("stub fault" in e.message, f"error: message {e.message!r}")
        check(isinstance(e.body, dict) and set(e.body) == {"message", "type", "param", "code"}, f"error: body {e.body}")
        return
    raise Mismatch("error: the queued 429 did not raise openai.RateLimitError")


def main(base_url):
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=30)
    rate_limit_error(client)

    text = completion(client, "text", messages=[{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "hello there"}])
    check(text.choices[0].message.content == "echo: hello there", f"text: {text.choices[0].message.content!r}")
    check(text.choices[0].finish_reason == "stop", "text: finish_reason")

    call = completion(client, "call", messages=[{"role": "user", "content": CALL_PROMPT}], tools=TOOLS)
    message = call.choices[0].message
    check(call.choices[0].finish_reason == "tool_calls", "call: finish_reason")
    check(message.content is None and len(message.tool_calls or []) == 1, f"call: {message}")
    tool_call = message.tool_calls[0]
    check(tool_call.type == "function" and tool_call.function.name == "get_weather", f"call: {tool_call}")
    check(json.loads(tool_call.function.arguments) == CALL_INPUT, f"call: arguments {tool_call.function.arguments!r}")

    # The conversation goes on the way SDK users write it: the assistant message as returned.
    answered = completion(client, "answered", tools=TOOLS, messages=[
        {"role": "user", "content": CALL_PROMPT},
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny, 21 C"},
    ])
    check(answered.choices[0].message.content == "done: sunny, 21 C", f"answered: {answered.choices[0].message}")

    chunks = raw_stream(client, "streamed call", messages=[{"role": "user", "content": CALL_PROMPT}], tools=TOOLS)
    calls = {}
    for chunk in chunks:
        for delta in chunk["choices"][0]["delta"].get("tool_calls") or []:
            entry = calls.setdefault(delta["index"], {"id": None, "name": None, "arguments": ""})
            entry["id"] = entry["id"] or delta.get("id")
            entry["name"] = entry["name"] or (delta.get("function") or {}).get("name")
            entry["arguments"] += (delta.get("function") or {}).get("arguments") or ""
    check(list(calls) == [0], f"streamed call: indexes {list(calls)}")
    check(calls[0]["id"] and calls[0]["name"] == "get_weather", f"streamed call: {calls[0]}")
    check(json.loads(calls[0]["arguments"]) == CALL_INPUT, f"streamed call: arguments {calls[0]['arguments']!r}")
    check(chunks[-1]["choices"][0]["finish_reason"] == "tool_calls", "streamed call: finish_reason")

    chunks = raw_stream(client, "streamed text", messages=[{"role": "user", "content": "stream me a reply"}])
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    check(streamed == "echo: stream me a reply", f"streamed text: {streamed!r}")

    # The SDK's own readers: its SSE decoder, and its helper accumulating a tool call.
    texts = [
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=MODEL, stream=True, messages=[{"role": "user", "content": "stream me a reply"}]
        )
        if c.choices
    ]
    check("".join(texts) == "echo: stream me a reply", f"SDK stream: {texts}")
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": CALL_PROMPT}], tools=TOOLS,
        stream_options={"include_usage": True},
    ) as stream:
        final = stream.get_final_completion()
    # (The helper's accumulated object is the SDK's own making, `index` of the deltas kept;
    # the chunks it was made of were validated above.)
    call = final.choices[0].message.tool_calls[0]
    check(json.loads(call.function.arguments) == CALL_INPUT, f"SDK stream helper: {call}")
    check(final.usage is not None and final.usage.total_tokens > 0, f"SDK stream helper: usage {final.usage}")
    print(f"chat wire valid for openai=={openai.__version__}")


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except Mismatch as e:
        print(f"mismatch: {e}", file=sys.stderr)
        sys.exit(1)
