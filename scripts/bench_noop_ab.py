#!/usr/bin/env python3
"""A no-op tick of two sentinel binaries and the `git log -1` it stands
against, in the same rotated rounds, on one generated tree (or a clone).

    python3 scripts/bench_noop_ab.py --base OLD_BIN --bin NEW_BIN \\
        [--files 100000] [--tree plain|imports|interleaved] [--repo CLONE] \\
        [--rounds 200]

Each binary makes its own first run into a state of its own; then every
round runs the no-op of both binaries and the `git log -1` of
scripts/bench (the same arguments and environment), in rotated order,
after 10 rounds of warm-up. Prints the medians of the wall and the CPU
time (user plus system) and each binary's ratio to `git log -1`: the
no-op target of docs/benchmark.md is 1.2×. Running the three in the same
rounds keeps the machine's drift out of the ratios. Python 3 standard
library only; everything lives in one temporary directory.
"""

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_noop as b  # noqa: E402


def prepare(args, tmp, env):
    """The repository, the watched path, and one first-run state per binary."""
    repo = os.path.join(tmp, "repo")
    if args.repo:
        b.clone_real(args.repo, repo, env)
        watched = None
    else:
        b.make_repo(repo, args.files, env, args.tree)
        watched = b.WATCHED
    states = {}
    for name, path in (("before", args.base), ("after", args.bin)):
        state_dir = os.path.join(tmp, f"state-{name}")
        os.makedirs(state_dir)
        state = os.path.join(state_dir, "state.json")
        argv = b.first_run_argv(path, repo, state, watched)
        code = b.spawn_wait(argv, env, b.FIRST_RUN_TIMEOUT_S)[1]
        if code != 10:
            sys.exit(f"the first run of {path} exited {code}, not 10")
        states[name] = state
    return repo, watched, states


def rounds(args, repo, watched, states, env):
    """Wall and CPU times in ms per command, rotated round by round."""
    genv, git = b.git_log(shutil.which("git"), repo, env, watched)
    bins = {"before": args.base, "after": args.bin}
    names = ["before", "after", "git log -1"]
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for r in range(args.rounds + 10):
        for n in names[r % 3:] + names[:r % 3]:
            if n == "git log -1":
                argv, e = git, genv
            else:
                argv, e = b.tick_argv(bins[n], repo, states[n], 20 + r, watched), env
            ms, code, _, c = b.spawn_wait(argv, e, b.NOOP_TIMEOUT_S)
            if code != 0:
                sys.exit(f"{n} exited {code} in round {r}: not a no-op")
            if r >= 10:
                wall[n].append(ms)
                cpu[n].append(c)
    return wall, cpu


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the sentinel binary before")
    p.add_argument("--bin", required=True, help="the sentinel binary after")
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--tree", default="plain", choices=["plain", "imports", "interleaved"])
    p.add_argument("--repo", help="a clone of a real repository, watched whole")
    p.add_argument("--rounds", type=int, default=200)
    args = p.parse_args()
    env = b.child_env()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sentinel-noop-ab-") as tmp:
        repo, watched, states = prepare(args, tmp, env)
        wall, cpu = rounds(args, repo, watched, states, env)
    what = f"a clone of {args.repo}" if args.repo else f"{args.tree}, {args.files:,} files"
    print(f"no-op against `git log -1`, {args.rounds} rounds, {what}")
    print("| binary | no-op (ms) | `git log -1` (ms) | ÷ git log, wall | ÷ git log, CPU |")
    print("|:--|---:|---:|---:|---:|")
    g_wall, g_cpu = b.median(wall["git log -1"]), b.median(cpu["git log -1"])
    for n in ("before", "after"):
        w, c = b.median(wall[n]), b.median(cpu[n])
        print(f"| {n} | {w:.2f} | {g_wall:.2f} | {w / g_wall:.2f}× | {c / g_cpu:.2f}× |")
    print(f"\nload average (1 min): {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
