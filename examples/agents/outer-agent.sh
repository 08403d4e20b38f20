#!/bin/sh
# outer-agent.sh: bring the clone up to date, act only on what sentinel
# hands over, say what happened, and share the agent's commits.
# Run from the clone (cron: cd /srv/agent-clone && ./outer-agent.sh).
set -u

# Local commits the last push could not deliver go on top of the new
# upstream; a conflict is for a person (cron mails the error).
if ! git pull -q --rebase; then
    git rebase --abort 2>/dev/null
    echo "outer-agent: cannot rebase the agent's commits on the upstream; resolve it by hand" >&2
    exit 1
fi

tick=$(mktemp "${TMPDIR:-/tmp}/outer-agent.XXXXXX") || exit 1
trap 'rm -f "$tick" "$tick.files"' EXIT
sentinel tick --llm off --json > "$tick"
case $? in
    0|20|21) exit 0 ;;            # nothing to do, or another tick is running
    1[0-7]) ;;                    # woke: look at the files
    *) exit 1 ;;                  # an error: let cron mail it
esac

# `record` is the loop protection: it tells sentinel that the agent's
# commit is the agent's own output, not a person's change to hand over.
record() {
    for wait in 1 2 4; do
        sentinel record "$1" --decision "$2"
        [ $? -eq 20 ] || return 0          # recorded (or refused: said on stderr)
        sleep "$wait"                       # 20: a tick holds the lock; try again
    done
    echo "outer-agent: \`$1\` was not recorded ($2): run \`sentinel record $1 --decision $2\`" >&2
    return 1
}

status=0
python3 -c 'import json, sys; [print(f["path"]) for f in json.load(open(sys.argv[1]))["files"] if f["outcome"] == "needs_review"]' "$tick" > "$tick.files" || exit 1
while read -r file; do
    if my-agent "$file"; then
        record "$file" evolved || status=1
    else
        record "$file" failed || status=1
    fi
done < "$tick.files"

# A push that loses a race with a person is retried by the next run.
git push -q || echo "outer-agent: the push failed; the next run rebases and pushes again" >&2
exit "$status"
