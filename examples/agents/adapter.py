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
flags. sentinel is the only retry loop, inside the agent too: the tools'
own retries are turned off (Claude Code: CLAUDE_CODE_MAX_RETRIES=0; Codex:
request_max_retries=0 and stream_max_retries=0 of the provider named by
CODEX_PROVIDER, `-c model_provider=...` in CODEX_FLAGS or `model_provider`
in $CODEX_HOME/config.toml). Each tool gets a permission mode that lets it
edit its working copy and nothing else (Claude Code: `--permission-mode
acceptEdits`, which works as root too; Codex: `--sandbox workspace-write`)
unless the flags name one. What a tool refused (Claude Code's
`permission_denials`, a patch or command Codex's sandbox rejected) is the
answer's `error`, so that an EVOLVE that edited nothing says why.
Python 3 standard library only.
"""

import json
import os
import re
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


# The provider's HTTP status, as Claude Code reports it (`api_error_status`),
# mapped to Anthropic's own error types.
STATUS_TYPES = {400: "invalid_request_error", 401: "authentication_error",
                403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                429: "rate_limit_error", 500: "api_error", 502: "api_error",
                503: "overloaded_error", 529: "overloaded_error"}


def phrase_type(message):
    """The error type a tool's message says in words, or None."""
    lowered = message.lower()
    return next((t for words, t in PHRASES if any(w in lowered for w in words)), None)


def fail(message, code=None, kind=None):
    """Print an error body sentinel can classify, and exit 1."""
    kind = kind or phrase_type(message) or "agent_error"
    body = {"error": {"type": kind, "code": code, "message": message[:500]}}
    print(json.dumps(body))
    sys.exit(1)


def api_error(text):
    """The provider's own error inside a tool's message, as Claude Code
    prints it (`API Error: 429 {"type":"error","error":{"type":...}}`):
    its type, else its HTTP status; None when the message has neither."""
    match = re.search(r"API Error: (\d{3})\b", text)
    start = text.find("{")
    if start >= 0:
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            value = None
        error = value.get("error") if isinstance(value, dict) else None
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return error["type"]
    return match.group(1) if match else None


def pass_stderr(done):
    """The end of the tool's stderr on the adapter's own: sentinel keeps it
    for the failure's reason (a refusal a tool printed, EACCES)."""
    tail = (done.stderr or "")[-2048:]
    if tail.strip():
        print(tail, file=sys.stderr, end="" if tail.endswith("\n") else "\n")


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


def run(argv, env=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    except FileNotFoundError:
        # The shell's code for a missing command: sentinel stops the tick.
        print(f"{argv[0]}: command not found", file=sys.stderr)
        sys.exit(127)


def named(flags, *names):
    """Whether the user's flags already give one of these options."""
    return any(f == n or f.startswith(n + "=") for f in flags for n in names)


def claude_argv(request):
    flags = shlex.split(os.environ.get("CLAUDE_FLAGS", ""))
    argv = [os.environ.get("CLAUDE_BIN", "claude"), "-p", PROMPT.format(**request),
            "--output-format", "json"]
    # Edits of the working copy only; unlike bypassPermissions, this mode
    # is not refused as root (every CI container).
    if not named(flags, "--permission-mode", "--dangerously-skip-permissions"):
        argv += ["--permission-mode", "acceptEdits"]
    # What today's budget has left caps the run inside the tool too.
    budget = request.get("budget_left_usd")
    if isinstance(budget, (int, float)) and budget > 0 and not named(flags, "--max-budget-usd"):
        argv += ["--max-budget-usd", f"{budget:.4f}"]
    return argv + flags


def claude(request):
    # sentinel is the only retry loop: one run, one request per model turn.
    env = dict(os.environ, CLAUDE_CODE_MAX_RETRIES="0")
    done = run(claude_argv(request), env)
    try:
        out = json.loads(done.stdout)
    except ValueError:
        # Its stderr is the message: not repeated as the adapter's own.
        fail((done.stderr or done.stdout or f"claude exited with {done.returncode}").strip())
    pass_stderr(done)
    subtype = out.get("subtype")
    if subtype == "error_max_budget_usd":
        fail("the run reached --max-budget-usd, what today's budget had left",
             "error_max_budget_usd", "insufficient_quota")
    if out.get("is_error") or subtype != "success":
        message = str(out.get("result") or subtype or "claude failed")
        # Its words first ("Credit balance is too low" is a 400), then the
        # status: the code is the provider's error, never the subtype
        # ("success" on every API error).
        by_status = STATUS_TYPES.get(out.get("api_error_status"))
        kind = phrase_type(message) or api_error(message) or by_status
        code = api_error(message) or by_status or (subtype if subtype != "success" else None)
        fail(message, code, kind)
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
    if isinstance(out.get("num_turns"), int):
        answer["requests"] = out["num_turns"]
    denials = out.get("permission_denials") or []
    if denials:
        tools = ", ".join(sorted({str(d.get("tool_name", "?")) for d in denials
                                  if isinstance(d, dict)}))
        answer["error"] = {"type": "permission_denied", "message":
                           f"claude refused {len(denials)} tool call(s) (permission_denials): {tools}"}
    print(json.dumps(answer))


BUILT_IN_PROVIDERS = ("openai", "ollama", "lmstudio", "amazon-bedrock")


def codex_provider(flags):
    """The provider Codex will use: CODEX_PROVIDER, `-c model_provider=ID`
    in the flags, else `model_provider` in $CODEX_HOME/config.toml."""
    if os.environ.get("CODEX_PROVIDER"):
        return os.environ["CODEX_PROVIDER"]
    for flag in flags:
        match = re.fullmatch(r"model_provider=[\"']?([\w.-]+)[\"']?", flag)
        if match:
            return match.group(1)
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    try:
        with open(os.path.join(home, "config.toml"), encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("["):
                    break  # only the top-level key, before any table
                match = re.match(r"\s*model_provider\s*=\s*[\"']([\w.-]+)[\"']", line)
                if match:
                    return match.group(1)
    except OSError:
        pass
    return None


def codex_argv(request):
    flags = shlex.split(os.environ.get("CODEX_FLAGS", ""))
    argv = [os.environ.get("CODEX_BIN", "codex"), "exec", "--json", PROMPT.format(**request)]
    # Its default sandbox is read-only: the edit would be rejected.
    if not named(flags, "--sandbox", "-s", "--full-auto",
                 "--dangerously-bypass-approvals-and-sandbox"):
        # Under sentinel's kernel sandbox Codex's own (bubblewrap) cannot
        # start, and sentinel's walls stand in for it.
        walled = os.environ.get("SENTINEL_KERNEL_SANDBOX") == "landlock"
        argv += ["--sandbox", "danger-full-access" if walled else "workspace-write"]
    provider = codex_provider(flags)
    # Up to 5 HTTP tries times 6 stream tries for one 503 otherwise. A
    # built-in provider takes no such setting: see docs/agents.md.
    if provider and provider not in BUILT_IN_PROVIDERS:
        for key in ("request_max_retries", "stream_max_retries"):
            argv += ["-c", f"model_providers.{provider}.{key}=0"]
    return argv + flags


# Words of Codex's refusals: its sandbox, an approval it could not get.
REFUSAL_WORDS = ("read-only", "sandbox", "rejected", "permission denied",
                 "not permitted", "declined", "approval")


def codex_refusal(item):
    """What Codex reports when an edit or a command was refused, or None."""
    kind, status = item.get("type"), item.get("status")
    if kind == "file_change" and status == "failed":
        paths = ", ".join(str(c.get("path")) for c in item.get("changes") or [])
        return f"patch rejected: {paths}"
    text = str(item.get("message") or item.get("aggregated_output") or "")
    if kind == "command_execution" and status == "declined":
        return f"command declined: {item.get('command')}"
    if kind in ("error", "command_execution") and any(w in text.lower() for w in REFUSAL_WORDS):
        return text.strip()[:200]
    return None


def codex(request):
    done = run(codex_argv(request))
    text, usage, failed, errors, refused = None, None, None, [], []
    for line in done.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "item.completed" and item.get("type") == "agent_message":
            text = item.get("text", "")
        elif kind == "item.completed" and codex_refusal(item):
            refused.append(codex_refusal(item))
        elif kind == "turn.completed":
            usage = event.get("usage")
        elif kind == "turn.failed":
            failed = (event.get("error") or {}).get("message", "the turn failed")
        elif kind == "error":
            errors.append(str(event.get("message", "")))
    if failed is None and errors == [] and usage is None and text is None:
        # Its stderr is the message: not repeated as the adapter's own.
        fail(done.stderr.strip() or "codex gave no answer")
    pass_stderr(done)
    if failed is not None or (usage is None and text is None):
        message = failed or "; ".join(errors)
        fail(message, api_error(message))
    answer = answer_in(text or "")
    if answer is None:
        print(text or "")
        return
    if usage:
        answer["usage"] = {k: usage.get(k, 0) for k in
                           ("input_tokens", "cached_input_tokens", "output_tokens")}
    if refused:
        answer["error"] = {"type": "permission_denied", "message": "; ".join(refused)[:500]}
    print(json.dumps(answer))


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("claude", "codex"):
        print("usage: adapter.py claude|codex  (sentinel's request on stdin)", file=sys.stderr)
        sys.exit(2)
    request = json.load(sys.stdin)
    {"claude": claude, "codex": codex}[sys.argv[1]](request)


if __name__ == "__main__":
    main()
