#!/usr/bin/env python3
"""Thin adapters from sentinel's agent protocol to agent CLIs.

sentinel writes one JSON object on stdin (path, content, fingerprint,
wake_reason, head, previous, trigger, budget_left_usd) and reads one JSON
answer on stdout: {"action", "reason", "findings", "cost_usd", "usage"}.
A failure is an error body {"error": {"type", "code", "message"}} and a
non-zero exit, which sentinel classifies like a provider's error.

    adapter.py claude   runs `claude -p PROMPT --output-format json`
    adapter.py codex    runs `codex exec --json PROMPT`

CLAUDE_BIN / CODEX_BIN name the binaries; CLAUDE_FLAGS / CODEX_FLAGS add
flags (for example the permission mode the agent may edit files with).
Python 3 standard library only.
"""

import json
import os
import shlex
import subprocess
import sys

PROMPT = """You maintain one file of this repository: {path}
(sentinel woke for: {wake_reason}). Read the file and decide whether it
needs a change now. Prefer to leave it alone unless there is a concrete
defect or risk. If it needs a change, edit only that file, in place.
End your reply with one JSON object and nothing after it:
{{"action": "SKIP" or "EVOLVE", "reason": "...", "findings":
[{{"line": 1, "severity": "info|minor|major|critical|blocker", "message": "..."}}]}}"""

# Phrases of the tools' own failure messages, mapped to the error types
# sentinel's error protocol reads: the class decides whether to retry.
PHRASES = [
    (("credit balance", "quota", "billing", "usage limit"), "insufficient_quota"),
    (("rate limit", "rate_limit", "too many requests"), "rate_limit_error"),
    (("overloaded", "529", "503", "temporarily unavailable"), "overloaded_error"),
    (("invalid api key", "authentication", "unauthorized", "not logged in", "login"), "authentication_error"),
    (("prompt is too long", "context length", "context window"), "invalid_request_error"),
]


def fail(message, code=None):
    """Print an error body sentinel can classify, and exit 1."""
    lowered = message.lower()
    kind = next((t for words, t in PHRASES if any(w in lowered for w in words)), "agent_error")
    body = {"error": {"type": kind, "code": code, "message": message[:500]}}
    print(json.dumps(body))
    sys.exit(1)


def answer_in(text):
    """The last JSON object in the agent's final text that has an action."""
    decoder = json.JSONDecoder()
    found = None
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, _ = decoder.raw_decode(text[start:])
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("action") in ("SKIP", "EVOLVE"):
            found = value
    if found is None:
        return None
    return {
        "action": found["action"],
        "reason": str(found.get("reason", "")),
        "findings": found.get("findings", []),
    }


def run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        # The shell's code for a missing command: sentinel stops the tick.
        print(f"{argv[0]}: command not found", file=sys.stderr)
        sys.exit(127)


def claude(request):
    argv = [os.environ.get("CLAUDE_BIN", "claude"), "-p", PROMPT.format(**request),
            "--output-format", "json"] + shlex.split(os.environ.get("CLAUDE_FLAGS", ""))
    done = run(argv)
    try:
        out = json.loads(done.stdout)
    except ValueError:
        fail((done.stderr or done.stdout or f"claude exited with {done.returncode}").strip())
    if out.get("is_error") or out.get("subtype") != "success":
        fail(str(out.get("result") or out.get("subtype") or "claude failed"), out.get("subtype"))
    answer = answer_in(str(out.get("result", "")))
    if answer is None:
        # Not an answer: sentinel reads this as bad_response and retries once.
        print(str(out.get("result", "")))
        return
    usage = out.get("usage") or {}
    cached = usage.get("cache_read_input_tokens", 0)
    answer["usage"] = {
        "input_tokens": usage.get("input_tokens", 0) + cached
        + usage.get("cache_creation_input_tokens", 0),
        "cached_input_tokens": cached,
        "output_tokens": usage.get("output_tokens", 0),
    }
    if isinstance(out.get("total_cost_usd"), (int, float)):
        answer["cost_usd"] = out["total_cost_usd"]
    print(json.dumps(answer))


def codex(request):
    argv = [os.environ.get("CODEX_BIN", "codex"), "exec", "--json", PROMPT.format(**request)]
    argv += shlex.split(os.environ.get("CODEX_FLAGS", ""))
    done = run(argv)
    text, usage, failed, errors = None, None, None, []
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "item.completed" and item.get("type") == "agent_message":
            text = item.get("text", "")
        elif kind == "turn.completed":
            usage = event.get("usage")
        elif kind == "turn.failed":
            failed = (event.get("error") or {}).get("message", "the turn failed")
        elif kind == "error":
            errors.append(str(event.get("message", "")))
    if failed is not None or (usage is None and text is None):
        fail(failed or "; ".join(errors) or done.stderr.strip() or "codex gave no answer")
    answer = answer_in(text or "")
    if answer is None:
        print(text or "")
        return
    if usage:
        answer["usage"] = {k: usage.get(k, 0) for k in
                           ("input_tokens", "cached_input_tokens", "output_tokens")}
    print(json.dumps(answer))


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("claude", "codex"):
        print("usage: adapter.py claude|codex  (sentinel's request on stdin)", file=sys.stderr)
        sys.exit(2)
    request = json.load(sys.stdin)
    {"claude": claude, "codex": codex}[sys.argv[1]](request)


if __name__ == "__main__":
    main()
