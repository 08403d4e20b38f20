#!/usr/bin/env python3
"""Helper of scripts/bench: measure sentinel's no-op tick and print figures.

Run it through scripts/bench, which builds the release binary, makes and
removes the temporary directory and passes the sizes. This file only prints
numbers; it never decides that a time is good or bad enough to fail.

Per size N:
  * a git repository with N small files under src/d<i//100>/f<i>.txt, made
    with one `git fast-import` (one commit, one pack, no checkout: sentinel
    reads the object store, never the work tree);
  * one first tick with --batch 0 (wall time, peak RSS, state size);
  * warm-up, then `reps` rounds of four interleaved processes, the order
    rotated each round:
      - the no-op `sentinel tick` (a distinct, later --now every time),
      - the same `git log` that sentinel runs for its head lookup, alone,
      - `sentinel --version` (the cost of starting the binary at all),
      - `/bin/true` (the cost of starting any process from this harness);
  * checks: every no-op exits 0, the state file is byte-for-byte untouched,
    the journal has one line per no-op.

Standard library only (Python 3.11). Every loop is bounded and every child
has a timeout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

# What sentinel's GitSource removes from its child's environment.
REDIRECTING_ENV = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
)
WATCHED = "src"
FIRST_NOW = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc)
COMMIT_TIME = 1767225600  # 2026-01-01T00:00:00Z: the same commit id every run
NOOP_TIMEOUT_S = 60
FIRST_RUN_TIMEOUT_S = 3600
SETUP_TIMEOUT_S = 1200


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise Timeout()


def spawn_wait(argv, env, timeout_s, stdout="/dev/null", stderr="/dev/null"):
    """Start argv, wait for it; returns (wall ms, exit code, ru_maxrss KiB).

    posix_spawn + wait4 keeps the harness's own share small and equal for
    every command measured; the wall time runs from just before the spawn to
    just after the reap, i.e. process start to exit as a scheduler sees it.
    """
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    signal.alarm(timeout_s)
    try:
        _, status, usage = os.wait4(pid, 0)
    except Timeout:
        os.kill(pid, signal.SIGKILL)
        os.wait4(pid, 0)
        raise RuntimeError(f"timed out after {timeout_s} s: {' '.join(argv)}") from None
    finally:
        signal.alarm(0)
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e6, os.waitstatus_to_exitcode(status), usage.ru_maxrss


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(1, math.ceil(p / 100 * len(s)))
    return s[k - 1]


def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def child_env():
    """The ambient environment, minus anything that would change what
    sentinel or git do, plus a config-free git: the same for every command."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SENTINEL_") and k not in REDIRECTING_ENV
    }
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    return env


def make_repo(repo: str, n: int, env) -> str:
    """One commit holding n small files, written by git fast-import."""
    subprocess.run(
        ["git", "init", "-q", "--initial-branch=main", repo],
        check=True, env=env, timeout=SETUP_TIMEOUT_S,
    )
    parts = []
    msg = f"{n} files\n".encode()
    ident = f"Bench <bench@example.invalid> {COMMIT_TIME} +0000"
    parts.append(f"commit refs/heads/main\nauthor {ident}\ncommitter {ident}\n".encode())
    parts.append(b"data %d\n%s\n" % (len(msg), msg))
    for i in range(n):
        body = f"file {i} of {n}\nvalue = {i * 7919 % 100003}\n".encode()
        path = f"{WATCHED}/d{i // 100}/f{i}.txt"
        parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(body), body))
    parts.append(b"done\n")
    subprocess.run(
        ["git", "-C", repo, "fast-import", "--quiet", "--done"],
        input=b"".join(parts), check=True, env=env, timeout=SETUP_TIMEOUT_S,
    )
    head = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"],
        check=True, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S,
    ).stdout.strip()
    listed = subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", "--name-only", "HEAD"],
        check=True, env=env, capture_output=True, timeout=SETUP_TIMEOUT_S,
    ).stdout.count(b"\n")
    if listed != n:
        raise RuntimeError(f"the repository holds {listed} files, not {n}")
    return head


def file_digest(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest(), st.st_size, st.st_mtime_ns


GNU_TIME = "/usr/bin/time"


def run_with_rss(argv, env, timeout_s, workdir, name):
    """Run argv once; returns (wall s, exit code, peak RSS KiB, how, stderr).

    The peak RSS comes from `/usr/bin/time -v`, a small C program that forks:
    its child's high-water mark is sentinel's own (and that of the git
    children sentinel waited for). Without it, wait4's ru_maxrss of a child
    spawned from this Python process is used; posix_spawn shares this
    process's memory until exec, so that figure is only an upper bound.
    """
    err = os.path.join(workdir, f"{name}.stderr")
    if os.access(GNU_TIME, os.X_OK):
        tv = os.path.join(workdir, f"{name}.time")
        wall, code, _ = spawn_wait([GNU_TIME, "-v", "-o", tv] + argv, env, timeout_s, stderr=err)
        text = open(tv, encoding="utf-8", errors="replace").read()
        m = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", text)
        rss_kib = int(m.group(1)) if m else None
        how = "/usr/bin/time -v"
        ex = re.search(r"Exit status:\s*(\d+)", text)
        if ex:
            code = int(ex.group(1))
    else:
        wall, code, rss_kib = spawn_wait(argv, env, timeout_s, stderr=err)
        how = "wait4 ru_maxrss, an upper bound (no /usr/bin/time)"
    line = open(err, encoding="utf-8", errors="replace").read().strip()
    return wall / 1000, code, rss_kib, how, line


def first_run(bin_path, repo, state, env, workdir):
    argv = [
        bin_path, "tick", "--repo", repo, "--path", WATCHED, "--state", state,
        "--batch", "0", "--now", FIRST_NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]
    wall, code, rss_kib, how, line = run_with_rss(
        argv, env, FIRST_RUN_TIMEOUT_S, workdir, "first_run"
    )
    return wall, code, rss_kib, how, line, " ".join(argv)


def bench_size(n, reps, warmup, bin_path, tmp, env, true_bin, git_bin):
    log(f"{n} files: building the repository")
    work = os.path.join(tmp, f"n{n}")
    os.makedirs(work)
    repo = os.path.join(work, "repo")
    state = os.path.join(work, "state", "state.json")
    t = time.perf_counter()
    head = make_repo(repo, n, env)
    repo_s = time.perf_counter() - t

    log(f"{n} files: first tick (--batch 0)")
    fr_wall, fr_code, fr_rss, rss_via, fr_line, fr_cmd = first_run(
        bin_path, repo, state, env, work
    )
    if fr_code != 10:
        raise RuntimeError(f"first tick exited {fr_code}, expected 10 (first_run): {fr_line}")
    with open(state, "rb") as f:
        doc = json.load(f)
    tracked = len(doc.get("files", {}))
    backlog = len(doc.get("backlog", []))
    if tracked != n or backlog:
        raise RuntimeError(f"state tracks {tracked} files with a backlog of {backlog}; expected {n} and 0")
    del doc
    state_before = file_digest(state)

    # Exactly the head lookup GitSource::head makes, with the environment it sets.
    git_env = dict(env, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    git_argv = [
        git_bin, "-C", repo, "--literal-pathspecs", "log", "-1", "--format=%H",
        "--no-show-signature", "--no-follow", "--end-of-options", "HEAD", "--", WATCHED,
    ]
    out = subprocess.run(git_argv, env=git_env, capture_output=True, text=True,
                         timeout=NOOP_TIMEOUT_S).stdout.strip()
    if out != head:
        raise RuntimeError(f"git log alone answered {out!r}, expected {head}")

    def tick_argv(i):
        now = FIRST_NOW + dt.timedelta(minutes=i + 1)
        return [
            bin_path, "tick", "--repo", repo, "--path", WATCHED, "--state", state,
            "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        ]

    kinds = ("tick", "git", "version", "true")
    samples = {k: [] for k in kinds}
    log(f"{n} files: {warmup} warm-up + {reps} measured rounds")
    for i in range(warmup + reps):
        order = kinds[i % 4:] + kinds[: i % 4]
        for kind in order:
            if kind == "tick":
                ms, code, _ = spawn_wait(tick_argv(i), env, NOOP_TIMEOUT_S)
                if code != 0:
                    raise RuntimeError(f"no-op tick {i} exited {code}, expected 0 (none)")
            elif kind == "git":
                ms, code, _ = spawn_wait(git_argv, git_env, NOOP_TIMEOUT_S)
            elif kind == "version":
                ms, code, _ = spawn_wait([bin_path, "--version"], env, NOOP_TIMEOUT_S)
            else:
                ms, code, _ = spawn_wait([true_bin], env, NOOP_TIMEOUT_S)
            if code != 0:
                raise RuntimeError(f"{kind} exited {code}")
            if i >= warmup:
                samples[kind].append(ms)

    # One more no-op, outside the timed rounds, for its peak RSS.
    _, code, noop_rss, noop_rss_via, _ = run_with_rss(
        tick_argv(warmup + reps), env, NOOP_TIMEOUT_S, work, "noop_rss"
    )
    if code != 0:
        raise RuntimeError(f"the no-op tick for RSS exited {code}, expected 0 (none)")
    state_after = file_digest(state)
    journal = state + ".noops"
    with open(journal, "rb") as f:
        jbytes = f.read()
    jlines = jbytes.count(b"\n")
    noops = warmup + reps + 1
    overhead = [a - b for a, b in zip(samples["tick"], samples["git"])]
    # overhead = starting sentinel at all + the tick's own work; starting it
    # is what `sentinel --version` costs from the same harness.
    rest = [o - v for o, v in zip(overhead, samples["version"])]
    return {
        "n": n,
        "reps": reps,
        "warmup": warmup,
        "repo_s": repo_s,
        "first_wall_s": fr_wall,
        "first_rss_mib": fr_rss / 1024 if fr_rss is not None else None,
        "rss_via": rss_via,
        "first_line": fr_line,
        "first_cmd": fr_cmd,
        "state_bytes": state_before[1],
        "state_untouched": state_before == state_after,
        "journal_bytes": len(jbytes),
        "journal_lines": jlines,
        "journal_expected_lines": noops + 1,  # + the epoch line
        "tick": samples["tick"],
        "git": samples["git"],
        "version": samples["version"],
        "true": samples["true"],
        "overhead": overhead,
        "rest": rest,
        "noop_rss_mib": noop_rss / 1024 if noop_rss is not None else None,
        "noop_rss_via": noop_rss_via,
    }


def machine_line():
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count()
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    u = os.uname()
    return f"nproc {ncpu}, {model}, {u.sysname} {u.release}"


def fmt(x, digits=2):
    return "n/a" if x is None else f"{x:,.{digits}f}"


def target_for(n):
    return {1000: 5.0, 100000: 25.0}.get(n)


def report(results, args, elapsed_s):
    out = []
    p = out.append
    p("")
    p("### No-op tick benchmark")
    p("")
    p(
        "| tracked files | first_run wall (s) | first_run peak RSS (MiB) | state bytes/file "
        "| no-op tick median (ms) | p95 (ms) | git log alone median (ms) "
        "| sentinel overhead median (ms) | overhead target |"
    )
    p("|---:|---:|---:|---:|---:|---:|---:|---:|:---|")
    for r in results:
        ov = median(r["overhead"])
        tgt = target_for(r["n"])
        tgt_s = "—" if tgt is None else f"< {tgt:g} ms ({'met' if ov < tgt else 'MISSED'})"
        p(
            f"| {r['n']:,} | {fmt(r['first_wall_s'])} | {fmt(r['first_rss_mib'], 1)} "
            f"| {fmt(r['state_bytes'] / r['n'], 1)} | {fmt(median(r['tick']))} "
            f"| {fmt(percentile(r['tick'], 95))} | {fmt(median(r['git']))} "
            f"| {fmt(ov)} | {tgt_s} |"
        )
    p("")
    p(
        "Targets: sentinel's own no-op overhead (tick minus the `git log` it runs) "
        "under 5 ms at 1,000 and under 25 ms at 100,000 tracked files."
    )
    p(f"Machine: {machine_line()}.")
    p(
        f"Command: `{args.command}` (release build `{args.build}`; "
        f"no-op figures over {'/'.join(str(r['reps']) for r in results)} interleaved "
        f"rounds after {results[0]['warmup']} warm-up; overhead = median of the per-round "
        f"differences; repository: one commit, files under `{WATCHED}/`, `--path {WATCHED}`; "
        "default `--max-files` 200000)."
    )
    p("")
    p("Details (not for the README):")
    p("")
    p(
        "| tracked files | repo setup (s) | state file (MiB) | journal after runs (bytes, lines) "
        "| no-op peak RSS (MiB) | spawn floor `/bin/true` (ms) "
        "| `sentinel --version` (ms) | git log p95 (ms) | overhead p95 (ms) "
        "| of which starting sentinel = `--version` (ms) | of which the tick's work (ms) |"
    )
    p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        p(
            f"| {r['n']:,} | {fmt(r['repo_s'])} | {fmt(r['state_bytes'] / 2**20)} "
            f"| {r['journal_bytes']:,} B, {r['journal_lines']} lines "
            f"| {fmt(r['noop_rss_mib'], 1)} | {fmt(median(r['true']))} "
            f"| {fmt(median(r['version']))} | {fmt(percentile(r['git'], 95))} "
            f"| {fmt(percentile(r['overhead'], 95))} | {fmt(median(r['version']))} "
            f"| {fmt(median(r['rest']))} |"
        )
    p("")
    for r in results:
        checks = []
        checks.append("state untouched by no-ops" if r["state_untouched"] else "STATE FILE CHANGED during no-ops")
        if r["journal_lines"] == r["journal_expected_lines"]:
            checks.append(f"journal: epoch line + {r['journal_lines'] - 1} no-op lines")
        else:
            checks.append(
                f"JOURNAL has {r['journal_lines']} lines, expected {r['journal_expected_lines']}"
            )
        p(f"- {r['n']:,}: first run `{r['first_line']}` (peak RSS via {r['rss_via']}; includes the git children sentinel waited for); {'; '.join(checks)}.")
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    p(f"- {git_version}. Spawn floor: this harness starting and reaping `/bin/true`. "
      "The overhead (tick minus git log alone) splits into starting sentinel at all "
      "(`sentinel --version` from the same harness) and the tick's work: CLI parsing, "
      "lock, header line, journal append, and starting and reaping the git child.")
    p(
        f"- load average (1 min) at the start {args.load_start:.2f}, at the end "
        f"{os.getloadavg()[0]:.2f}: other work on the machine shows in the p95s, "
        "and in git log alone as much as in the tick."
    )
    p(f"- helper run time: {elapsed_s:.1f} s")
    print("\n".join(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the sentinel binary")
    ap.add_argument("--tmp", required=True, help="an empty scratch directory (removed by the caller)")
    ap.add_argument("--sizes", required=True, help="comma-separated tracked-file counts")
    ap.add_argument("--reps", required=True, help="comma-separated rounds, one per size")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--command", default="scripts/bench")
    ap.add_argument("--build", default="unknown")
    args = ap.parse_args()
    args.load_start = os.getloadavg()[0]

    sizes = [int(s) for s in args.sizes.split(",")]
    reps = [int(s) for s in args.reps.split(",")]
    if len(sizes) != len(reps) or min(sizes) < 1 or min(reps) < 1 or args.warmup < 0:
        ap.error("--sizes and --reps need the same number of positive values")
    if sys.platform != "linux":
        log(f"written for Linux; running on {platform.system()}")
    signal.signal(signal.SIGALRM, _alarm)
    git_bin = shutil.which("git")
    true_bin = shutil.which("true") or "/bin/true"
    if not git_bin:
        sys.exit("git is not on PATH")
    bin_path = os.path.abspath(args.bin)
    env = child_env()

    t0 = time.perf_counter()
    results = [
        bench_size(n, r, args.warmup, bin_path, os.path.abspath(args.tmp), env, true_bin, git_bin)
        for n, r in zip(sizes, reps)
    ]
    report(results, args, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
