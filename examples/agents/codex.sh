#!/bin/sh
# Codex CLI behind sentinel: sentinel tick --agent examples/agents/codex.sh
# Runs `codex exec --json PROMPT` for the file on stdin and turns its last
# agent message and turn.completed usage into sentinel's answer.
exec python3 "$(dirname "$0")/adapter.py" codex
