#!/bin/sh
# Claude Code behind sentinel: sentinel tick --agent examples/agents/claude-code.sh
# Runs `claude -p PROMPT --output-format json --permission-mode acceptEdits
# --max-budget-usd LEFT` with CLAUDE_CODE_MAX_RETRIES=0 for the file on stdin
# and turns its result (total_cost_usd, permission_denials) into sentinel's answer.
exec python3 "$(dirname "$0")/adapter.py" claude
