#!/bin/sh
# Codex CLI behind sentinel: sentinel tick --agent examples/agents/codex.sh
# Runs `codex exec --json PROMPT --sandbox workspace-write` with its provider's
# own retries off for the file on stdin and turns its last agent message,
# turn.completed usage and any rejected patch into sentinel's answer.
exec python3 "$(dirname "$0")/adapter.py" codex
