#!/bin/sh
# Claude Code behind sentinel: sentinel tick --agent examples/agents/claude-code.sh
# Runs `claude -p PROMPT --output-format json` for the file on stdin and
# turns its result (and total_cost_usd) into sentinel's answer.
exec python3 "$(dirname "$0")/adapter.py" claude
