#!/usr/bin/env python3
"""A 1-file repo_changed wake against a no-op, side by side for two sentinel
binaries, at 100,000 files on the import-free tree and the tree with 5%
unresolved imports (the trees of scripts/bench).

    python3 scripts/bench_wake_ab.py --base OLD_BIN --bin NEW_BIN [--rounds 15]

Each binary makes its own first run; then `rounds` rounds of a no-op and a
1-file wake per binary, the four in rotated order, each from a copy of that
binary's first-run state. Prints medians of the wall time and the ratios,
in wall and CPU time (user plus system, git children included). Python 3
standard library only; everything lives in one temporary directory.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_noop as b  # noqa: E402

N = 100_000


def measure(tree, bins, rounds, tmp, env):
    work = os.path.join(tmp, tree)
    os.makedirs(work)
    repo = os.path.join(work, "repo")
    base = b.make_repo(repo, N, env, tree)
    one = b.make_side_commits(repo, N, base, env, tree)[1]
    saved = {}
    for name, path in bins.items():
        state_dir = os.path.join(work, f"state-{name}")
        os.makedirs(state_dir)
        argv = b.first_run_argv(path, repo, os.path.join(state_dir, "state.json"))
        code = b.spawn_wait(argv, env, b.FIRST_RUN_TIMEOUT_S)[1]
        if code != 10:
            raise RuntimeError(f"{name}: first run exited {code}, expected 10")
        saved[name] = state_dir + "-saved"
        shutil.copytree(state_dir, saved[name])
    kinds = [(n, k) for n in bins for k in ("noop", "wake")]
    wall = {kind: [] for kind in kinds}
    cpu = {kind: [] for kind in kinds}
    for i in range(rounds):
        for name, kind in kinds[i % 4:] + kinds[: i % 4]:
            state_dir = os.path.join(work, f"state-{name}")
            b.restore_state(saved[name], state_dir)
            b.move_main(repo, env, base if kind == "noop" else one)
            argv = b.tick_argv(bins[name], repo, os.path.join(state_dir, "state.json"), i + 1)
            ms, code, _, cpu_ms = b.spawn_wait(argv, env, b.NOOP_TIMEOUT_S)
            if code != (0 if kind == "noop" else 12):
                raise RuntimeError(f"{name}: {kind} exited {code}")
            wall[(name, kind)].append(ms)
            cpu[(name, kind)].append(cpu_ms)
    b.move_main(repo, env, base)
    rows = []
    for name in bins:
        w = {k: statistics.median(wall[(name, k)]) for k in ("noop", "wake")}
        c = {k: statistics.median(cpu[(name, k)]) for k in ("noop", "wake")}
        rows.append(
            f"| {b.TREE_NAMES.get(tree, tree)} | {name} | {w['wake']:.1f} | {w['noop']:.1f} "
            f"| {w['wake'] / w['noop']:.1f}× | {c['wake'] / c['noop']:.1f}× |"
        )
    shutil.rmtree(work)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the sentinel binary before")
    ap.add_argument("--bin", required=True, help="the sentinel binary after")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    bins = {"before": os.path.abspath(args.base), "after": os.path.abspath(args.bin)}
    env = b.child_env()
    start = os.getloadavg()[0]
    print("| tree | binary | 1-file wake (ms) | no-op (ms) | ÷ no-op | CPU ÷ no-op |")
    print("|:--|:--|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="sentinel-wake-ab.") as tmp:
        for tree in ("plain", "imports"):
            for row in measure(tree, bins, args.rounds, tmp, env):
                print(row, flush=True)
    print(f"\nload average (1 min): {start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
