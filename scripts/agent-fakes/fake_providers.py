#!/usr/bin/env python3
"""Local fakes of the Anthropic Messages API and the OpenAI Responses API,
both streamed as SSE, for running the real Claude Code and Codex CLIs
behind sentinel's adapters with no network (scripts/real-agents-check).

    fake_providers.py PORTFILE LOG MODE

binds 127.0.0.1 on a free port, writes the port to PORTFILE, appends one
line per request to LOG ("<method> <path> <status>"), and answers as MODE
says:

    edit    a scripted agent: read the file, rewrite it, answer EVOLVE
    refuse  the same script; the CLI's own permission check is what differs
    429     every model request is a rate limit (Anthropic's and OpenAI's body)
    503     every model request is an overloaded server

The scripted agent finds the file in the prompt ("You maintain one file of
this repository: PATH") and the working directory in the CLI's system
prompt, and tells the turns apart by the tool results already in the
conversation. The event shapes follow Anthropic's streaming documentation
and openai/codex's codex-rs/core/tests/common/responses.rs. Python 3
standard library only.
"""

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTFILE, LOG, MODE = sys.argv[1], sys.argv[2], sys.argv[3]
NEW_TEXT = "// rewritten by the scripted model\nexport const a = 1;\n"
ANSWER = json.dumps({"action": "EVOLVE", "reason": "the export has no name",
                     "findings": [{"line": 1, "severity": "minor", "message": "name the export"}]})


def sse(events):
    """Server-sent events: `event: NAME` and `data: JSON` per event."""
    out = []
    for name, data in events:
        if name:
            out.append(f"event: {name}")
        out.append("data: " + json.dumps(data))
        out.append("")
    return ("\n".join(out) + "\n").encode()


def file_of(body):
    """The file the prompt names, and the working directory the CLI says."""
    text = json.dumps(body)
    path = re.search(r"maintain one file of this repository: ([^\s\\\\\"]+)", text)
    cwd = re.search(r"[Ww]orking directory: ([^\s\\\\<]+)", text) or \
        re.search(r"<cwd>([^<]+)</cwd>", text)
    return (path.group(1) if path else "unknown"), (cwd.group(1) if cwd else ".")


# --- Anthropic Messages ------------------------------------------------------

def anthropic_message(blocks, stop):
    """One streamed message: text blocks are strings, tool calls (name, input)."""
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 1}}})]
    for i, block in enumerate(blocks):
        if isinstance(block, str):
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                           "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                           "delta": {"type": "text_delta", "text": block}}))
        else:
            name, args = block
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                           "content_block": {"type": "tool_use", "id": f"toolu_fake{i}{name}",
                                             "name": name, "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                           "delta": {"type": "input_json_delta",
                                     "partial_json": json.dumps(args)}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                   "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": 20}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(events)


def anthropic_turn(body):
    """The scripted agent's next message, from the tool results so far."""
    if not body.get("tools"):
        # A side request of the CLI (a title, a summary): a short text.
        return anthropic_message(["ok"], "end_turn")
    results = [c for m in body.get("messages", []) if m.get("role") == "user"
               and isinstance(m.get("content"), list)
               for c in m["content"] if c.get("type") == "tool_result"]
    path, cwd = file_of(body)
    full = path if path.startswith("/") else f"{cwd.rstrip('/')}/{path}"
    if len(results) == 0:
        return anthropic_message([("Read", {"file_path": full})], "tool_use")
    if len(results) == 1:
        return anthropic_message([("Write", {"file_path": full, "content": NEW_TEXT})], "tool_use")
    return anthropic_message([f"I rewrote {path}.\n\n{ANSWER}"], "end_turn")


# --- OpenAI Responses --------------------------------------------------------

def responses_stream(items):
    """One streamed response: `response.created`, each output item, then
    `response.completed` with usage."""
    events = [("response.created", {"type": "response.created",
               "response": {"id": "resp_fake"}})]
    for item in items:
        events.append(("response.output_item.done", {"type": "response.output_item.done",
                                                     "item": item}))
    events.append(("response.completed", {"type": "response.completed", "response": {
        "id": "resp_fake", "usage": {
            "input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 120}}}))
    return sse(events)


def responses_turn(body):
    """The scripted agent's next response, from the tool outputs so far."""
    outputs = [i for i in body.get("input", []) if isinstance(i, dict)
               and i.get("type") in ("function_call_output", "custom_tool_call_output")]
    path, _ = file_of(body)
    # Codex 0.169 offers `exec_command` (a shell command line); its edits
    # go through the shell, inside its sandbox.
    if len(outputs) == 0:
        return responses_stream([{"type": "function_call", "name": "exec_command",
                                  "call_id": "call_read",
                                  "arguments": json.dumps({"cmd": f"cat {path}"})}])
    if len(outputs) == 1:
        write = f"printf '%s' '{NEW_TEXT}' > {path}"
        return responses_stream([{"type": "function_call", "name": "exec_command",
                                  "call_id": "call_write",
                                  "arguments": json.dumps({"cmd": write})}])
    return responses_stream([{"type": "message", "role": "assistant", "id": "msg_fake",
                              "content": [{"type": "output_text", "text": ANSWER}]}])


ERRORS = {
    "429": (429, {"type": "error", "error": {"type": "rate_limit_error",
                                             "message": "rate limited by the fake"}},
            {"error": {"type": "rate_limit_exceeded", "code": "rate_limit_exceeded",
                       "message": "Rate limit reached (fake)"}}),
    "503": (503, {"type": "error", "error": {"type": "overloaded_error",
                                             "message": "Overloaded"}},
            {"error": {"type": "server_error", "message": "The server is overloaded (fake)"}}),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self, status):
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(f"{self.command} {self.path} {status}\n")

    def reply(self, status, body, ctype="application/json"):
        self.note(status)
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):
        self.note(200)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            return self.reply(200, json.dumps({"object": "list", "data": [],
                                               "models": []}).encode())
        self.reply(404, b'{"error":{"type":"not_found","message":"not here"}}')

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        # The last request of each kind, to see what a new CLI version sends.
        with open(f"{LOG}.last-body.json", "wb") as f:
            f.write(raw)
        anthropic = self.path.split("?")[0].endswith("/messages")
        responses = self.path.split("?")[0].endswith("/responses")
        if not (anthropic or responses):
            return self.reply(404, b'{"error":{"type":"not_found","message":"not here"}}')
        if MODE in ERRORS and (responses or body.get("tools")):
            status, a_body, o_body = ERRORS[MODE]
            return self.reply(status, json.dumps(a_body if anthropic else o_body).encode())
        stream = anthropic_turn(body) if anthropic else responses_turn(body)
        self.reply(200, stream, "text/event-stream")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORTFILE, "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
