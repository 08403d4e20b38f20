#!/usr/bin/env python3
"""The measuring half of scripts/bench: measure what sentinel's ticks cost and print figures.

Run it through scripts/bench, which builds the release binary (or takes one
given with --bin), makes and removes the temporary directory and passes the
sizes. This file only prints numbers; it never decides that a time is good
or bad enough to fail.

Per tree and size N:
  * a git repository with N small files under src/d<i//100>/, made with one
    `git fast-import` (one commit, one pack, no checkout: sentinel reads the
    object store, never the work tree), plus two commits on side branches
    that change 1 and 100 of those files. Three generated trees: `plain`,
    text files that import nothing; `imports`, JavaScript files each
    importing a sibling, 5% of them a sibling that does not exist (an
    unresolved import); and `interleaved`, the plain files written in
    creation order with consecutive files in different directories, so that
    the pack's order is not the tree's (as a history written by `git
    fast-import` in creation order is). With --real PATH, a third: a clone of a real repository, watched
    whole, bare-cloned with --shared (its objects are only read) and given
    the two side commits (each changed file gets a line appended);
  * first runs with --batch 0 and no model, alternated with the floor: the
    same `git ls-tree -r` and one `git cat-file --batch` over every blob,
    fed and drained through pipes as sentinel's own children are;
  * warm-up, then `reps` rounds of four interleaved processes, the order
    rotated each round:
      - the no-op `sentinel tick` (a distinct, later --now every time),
      - the `git log` sentinel runs for its head lookup when the branch tip
        has moved (a no-op whose tip has not moved runs no git at all),
      - `sentinel --version` (the cost of starting the binary at all),
      - `/bin/true` (the cost of starting any process from this harness);
  * wake rounds, the order rotated each round: a no-op, a repo_changed wake
    that sees 1 changed file and one that sees 100, each from the same copy
    of the first run's state (restored, and `main` moved, outside the
    timing);
  * bytes written to the state directory by each kind of tick (a file
    replaced counts whole, a file appended to counts its growth) and peak
    RSS from one more run of each under `/usr/bin/time -v`;
  * checks: every no-op exits 0, the state file is byte-for-byte untouched,
    the journal has one line per no-op, a wake exits 12 (repo_changed).

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
    """Start argv, wait for it; returns (wall ms, exit code, ru_maxrss KiB,
    CPU ms): the CPU time, user plus system, of the child and of the
    children it waited for, which the load of the machine moves far less
    than the wall time.

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
    cpu_ms = (usage.ru_utime + usage.ru_stime) * 1000
    return (t1 - t0) / 1e6, os.waitstatus_to_exitcode(status), usage.ru_maxrss, cpu_ms


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


def body_of(tree: str, i: int, n: int, changed: bool = False) -> tuple[str, bytes]:
    """The path and bytes of generated file i of n in `tree`."""
    value = i * 7919 % 100003 + (1 if changed else 0)
    note = ", changed" if changed else ""
    if tree == "plain":
        return f"{WATCHED}/d{i // 100}/f{i}.txt", f"file {i} of {n}{note}\nvalue = {value}\n".encode()
    if tree == "interleaved":
        dirs = max(1, n // 100)
        return f"{WATCHED}/d{i % dirs}/f{i}.txt", f"file {i} of {n}{note}\nvalue = {value}\n".encode()
    # A sibling in the same directory; one file in twenty imports one
    # that does not exist.
    d = i // 100
    sibling = d * 100 + (i + 1) % 100
    lines = [f"// file {i} of {n}{note}"]
    if sibling < n and sibling != i:
        lines.append(f"import {{ value as next }} from './f{sibling}.js';")
    if i % 20 == 7:
        lines.append(f"import {{ gone }} from './gone{i}.js';")
    lines.append(f"export const value = {value};")
    return f"{WATCHED}/d{d}/f{i}.js", ("\n".join(lines) + "\n").encode()


def make_repo(repo: str, n: int, env, tree: str = "plain") -> str:
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
        path, body = body_of(tree, i, n)
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


def tree_bytes(path: str) -> int:
    """The bytes of every file under `path` (0 when it does not exist): the
    shards of a sharded state."""
    total = 0
    for root, _dirs, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


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
        wall, code, _, _ = spawn_wait([GNU_TIME, "-v", "-o", tv] + argv, env, timeout_s, stderr=err)
        text = open(tv, encoding="utf-8", errors="replace").read()
        m = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", text)
        rss_kib = int(m.group(1)) if m else None
        how = "/usr/bin/time -v"
        ex = re.search(r"Exit status:\s*(\d+)", text)
        if ex:
            code = int(ex.group(1))
    else:
        wall, code, rss_kib, _ = spawn_wait(argv, env, timeout_s, stderr=err)
        how = "wait4 ru_maxrss, an upper bound (no /usr/bin/time)"
    line = open(err, encoding="utf-8", errors="replace").read().strip()
    return wall / 1000, code, rss_kib, how, line


def make_side_commits(repo: str, n: int, base: str, env, tree: str = "plain") -> dict[int, str]:
    """Commits on top of `base` that change the first k files, k = 1 and
    min(100, n), each on a branch of its own: a wake is measured by moving
    `main` onto one of them."""
    heads = {}
    for k in sorted({1, min(100, n)}):
        ident = f"Bench <bench@example.invalid> {COMMIT_TIME + 60} +0000"
        msg = f"change {k} files\n".encode()
        parts = [
            f"commit refs/heads/change{k}\nauthor {ident}\ncommitter {ident}\n".encode(),
            b"data %d\n%s\n" % (len(msg), msg),
            f"from {base}\n".encode(),
        ]
        for i in range(k):
            path, body = body_of(tree, i, n, changed=True)
            parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(body), body))
        parts.append(b"done\n")
        subprocess.run(
            ["git", "-C", repo, "fast-import", "--quiet", "--done"],
            input=b"".join(parts), check=True, env=env, timeout=SETUP_TIMEOUT_S,
        )
        heads[k] = git_out(repo, env, "rev-parse", f"refs/heads/change{k}")
    return heads


def clone_real(source: str, repo: str, env) -> tuple[str, int]:
    """A bare clone of `source` sharing its objects, its HEAD as `main`;
    returns the head and the number of regular files in it."""
    subprocess.run(
        ["git", "clone", "-q", "--bare", "--shared", source, repo],
        check=True, env=env, timeout=SETUP_TIMEOUT_S,
    )
    head = git_out(repo, env, "rev-parse", "HEAD^{commit}")
    git_out(repo, env, "update-ref", "refs/heads/main", head)
    git_out(repo, env, "symbolic-ref", "HEAD", "refs/heads/main")
    return head, len(real_files(repo, env))


def real_files(repo: str, env) -> list[str]:
    """The regular files at HEAD with plain names, in tree order."""
    out = subprocess.run(
        ["git", "-C", repo, "ls-tree", "-r", "-z", "HEAD"],
        check=True, env=env, capture_output=True, timeout=SETUP_TIMEOUT_S,
    ).stdout
    paths = []
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        if meta.split()[0] in (b"100644", b"100755") and re.fullmatch(rb"[\x21-\x7e]+", path):
            paths.append(path.decode())
    return paths


def make_real_side_commits(repo: str, base: str, env) -> dict[int, str]:
    """Commits on top of `base` that append a line to k regular files
    spread evenly over the tree, k = 1 and min(100, files)."""
    paths = real_files(repo, env)
    # Dated after their parent, as a pushed commit is: a commit older than
    # its parent makes git's walk of `base..tip` go on into the history
    # (clock skew), about 10 ms on vitejs/vite, a cost no real push causes.
    when = max(COMMIT_TIME, int(git_out(repo, env, "show", "-s", "--format=%ct", base))) + 60
    heads = {}
    for k in sorted({1, min(100, len(paths))}):
        chosen = [paths[(j * len(paths)) // k + len(paths) // (2 * k)] for j in range(k)]
        ident = f"Bench <bench@example.invalid> {when} +0000"
        msg = f"change {k} files\n".encode()
        parts = [
            f"commit refs/heads/change{k}\nauthor {ident}\ncommitter {ident}\n".encode(),
            b"data %d\n%s\n" % (len(msg), msg),
            f"from {base}\n".encode(),
        ]
        for path in chosen:
            old = subprocess.run(
                ["git", "-C", repo, "cat-file", "blob", f"{base}:{path}"],
                check=True, env=env, capture_output=True, timeout=SETUP_TIMEOUT_S,
            ).stdout
            body = old + b"\n// changed by the benchmark\n"
            parts.append(b"M 100644 inline %s\ndata %d\n%s\n" % (path.encode(), len(body), body))
        parts.append(b"done\n")
        subprocess.run(
            ["git", "-C", repo, "fast-import", "--quiet", "--done"],
            input=b"".join(parts), check=True, env=env, timeout=SETUP_TIMEOUT_S,
        )
        heads[k] = git_out(repo, env, "rev-parse", f"refs/heads/change{k}")
    return heads


def git_out(repo, env, *args) -> str:
    return subprocess.run(
        ["git", "-C", repo, *args],
        check=True, env=env, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S,
    ).stdout.strip()


def move_main(repo, env, commit):
    git_out(repo, env, "update-ref", "refs/heads/main", commit)


_DIGESTS: dict[tuple[int, int, int, int], str] = {}


def dir_snapshot(path: str) -> dict[str, tuple[int, int, str]]:
    """Every file under `path`: (inode, size, sha256). A file whose inode,
    size, change and modification times are those of one hashed before is
    not read again (the shards are never changed in place)."""
    snap = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            st = os.stat(full)
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if key not in _DIGESTS:
                _DIGESTS[key] = file_digest(full)[0]
            snap[os.path.relpath(full, path)] = (st.st_ino, st.st_size, _DIGESTS[key])
    return snap


def bytes_written(before, after) -> int:
    """What a tick wrote to the state directory: a new or replaced file
    (atomic saves rename a new inode into place) counts whole, a file
    appended to in place counts its growth, any other change counts whole."""
    total = 0
    for name, (ino, size, digest) in after.items():
        old = before.get(name)
        if old is None or old[0] != ino:
            total += size
        elif old[2] != digest:
            total += size - old[1] if size > old[1] else size
    return total


def restore_state(saved: str, state_dir: str):
    """Make `state_dir` a copy of `saved` again, touching only what the last
    tick changed: the files it added go, the ones it replaced or removed are
    copied back. Removing and copying the whole state (512 shards at 100,000
    files) before every round would leave thousands of inodes deleted within
    the last minute, and ext4 without a journal skips each of those, one
    inode-table lookup at a time, whenever the next tick creates a file: a
    cost a tick minutes after the previous one never pays."""
    if not os.path.isdir(state_dir):
        shutil.copytree(saved, state_dir)
        return
    for dirpath, dirs, files in os.walk(state_dir, topdown=False):
        rel = os.path.relpath(dirpath, state_dir)
        for name in files:
            if not os.path.isfile(os.path.join(saved, rel, name)):
                os.remove(os.path.join(dirpath, name))
        for name in dirs:
            if not os.path.isdir(os.path.join(saved, rel, name)):
                shutil.rmtree(os.path.join(dirpath, name))
    for dirpath, dirs, files in os.walk(saved):
        rel = os.path.relpath(dirpath, saved)
        for name in dirs:
            os.makedirs(os.path.join(state_dir, rel, name), exist_ok=True)
        for name in files:
            src, dst = os.path.join(dirpath, name), os.path.join(state_dir, rel, name)
            a = os.stat(src)
            try:
                b = os.stat(dst)
                if (a.st_size, a.st_mtime_ns, a.st_mode) == (b.st_size, b.st_mtime_ns, b.st_mode):
                    continue
            except FileNotFoundError:
                pass
            # A new inode, as the tick's own saves make: `bytes_written`
            # tells a replaced file by its inode.
            tmp = dst + ".bench-restore"
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)


def path_args(watched):
    """`--path DIR`, or nothing when the whole repository is watched."""
    return ["--path", watched] if watched else []


def first_run_argv(bin_path, repo, state, watched=WATCHED):
    return [
        bin_path, "tick", "--repo", repo, *path_args(watched), "--state", state,
        "--batch", "0", "--now", FIRST_NOW.strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]


def floor_argv(git_bin, repo, watched=WATCHED):
    """`git ls-tree -r` and one `git cat-file --batch` over all its blobs,
    ids in and answers out through pipes, as sentinel runs its children."""
    spec = f" -- {watched}" if watched else ""
    script = (
        f'"$0" -C "$1" ls-tree -r --object-only HEAD{spec} '
        '| "$0" -C "$1" cat-file --batch | cat >/dev/null'
    )
    return ["/bin/sh", "-c", script, git_bin, repo]


def bench_first_runs(n, first_reps, bin_path, repo, work, env, git_bin, watched=WATCHED):
    """First runs alternated with the floor; returns the samples and the
    state directory the last first run left."""
    state_dir = os.path.join(work, "state")
    state = os.path.join(state_dir, "state.json")
    samples = {"first": [], "floor": [], "first_cpu": [], "floor_cpu": []}
    line = ""
    for i in range(first_reps):
        for kind in (("first", "floor") if i % 2 == 0 else ("floor", "first")):
            if kind == "floor":
                ms, code, _, cpu = spawn_wait(floor_argv(git_bin, repo, watched), env, FIRST_RUN_TIMEOUT_S)
                if code != 0:
                    raise RuntimeError(f"the floor pipeline exited {code}")
            else:
                # A directory of its own, removed with the size's work
                # directory once its wakes are measured: removing the last
                # run's 512 shards first would make this run's creates skip
                # them (see `restore_state`).
                fresh = os.path.join(work, f"first-{i}")
                os.makedirs(fresh)
                err = os.path.join(work, "first_run.stderr")
                ms, code, _, cpu = spawn_wait(
                    first_run_argv(bin_path, repo, os.path.join(fresh, "state.json"), watched),
                    env, FIRST_RUN_TIMEOUT_S, stderr=err,
                )
                line = open(err, encoding="utf-8", errors="replace").read().strip()
                if code != 10:
                    raise RuntimeError(f"first tick exited {code}, expected 10 (first_run): {line}")
            samples[kind].append(ms / 1000)
            samples[f"{kind}_cpu"].append(cpu / 1000)
    # One more, untimed, for the peak RSS and what it writes.
    os.makedirs(state_dir)
    _, code, rss_kib, how, line = run_with_rss(
        first_run_argv(bin_path, repo, state, watched), env, FIRST_RUN_TIMEOUT_S, work, "first_run"
    )
    if code != 10:
        raise RuntimeError(f"first tick exited {code}, expected 10 (first_run): {line}")
    written = bytes_written({}, dir_snapshot(state_dir))
    return samples, rss_kib, how, line, written


def git_log(git_bin, repo, env, watched=WATCHED):
    """Exactly the head lookup the git fallback makes, with the environment
    it sets: what a no-op stands against. Returns (environment, argv)."""
    git_env = dict(env, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    argv = [
        git_bin, "-C", repo, "--literal-pathspecs", "log", "-1", "--format=%H",
        "--no-show-signature", "--no-follow", "--end-of-options", "HEAD", "--",
    ] + ([watched] if watched else [])
    return git_env, argv


def tick_argv(bin_path, repo, state, minutes, watched=WATCHED):
    now = FIRST_NOW + dt.timedelta(minutes=minutes)
    return [
        bin_path, "tick", "--repo", repo, *path_args(watched), "--state", state,
        "--now", now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    ]


def bench_wakes(n, reps, bin_path, repo, work, env, heads, base, watched=WATCHED):
    """Rounds of a no-op, a 1-file and a 100-file wake, each from the same
    saved state, the order rotated; then one run of each for RSS."""
    state_dir = os.path.join(work, "state")
    saved = os.path.join(work, "state-after-first-run")
    shutil.copytree(state_dir, saved)
    kinds = [("noop", base, 0)] + [(f"wake{k}", head, 12) for k, head in sorted(heads.items())]
    samples = {k[0]: [] for k in kinds}
    cpu = {k[0]: [] for k in kinds}
    written = {k[0]: [] for k in kinds}
    rss = {}

    rounds = os.path.join(work, "rounds")
    os.makedirs(rounds)

    def fresh_copy(i):
        """The saved state in a directory of its own: the shards and the
        manifest hard-linked (sentinel replaces them, never writes into
        them), the rest copied. A restore in place must delete what the
        last tick added, and ext4 without a journal then skips each
        recently deleted inode whenever the next tick creates a file: 100
        of them after a 100-file wake, a cost a tick minutes after the
        last one never pays. The copies are removed after the rounds."""
        d = os.path.join(rounds, str(i))
        for dirpath, _dirs, files in os.walk(saved):
            rel = os.path.relpath(dirpath, saved)
            os.makedirs(os.path.join(d, rel), exist_ok=True)
            for name in files:
                src, dst = os.path.join(dirpath, name), os.path.join(d, rel, name)
                if name == "state.json" or rel.endswith("state.json.d"):
                    os.link(src, dst)
                else:
                    shutil.copy2(src, dst)
        return d

    def one(kind, head, expected, minutes, timed=True):
        d = fresh_copy(len(os.listdir(rounds)))
        move_main(repo, env, head)
        # Nothing dirty left for the tick's fsyncs to wait behind.
        os.sync()
        argv = tick_argv(bin_path, repo, os.path.join(d, "state.json"), minutes, watched)
        if kind == "noop":
            # The first no-op after a wake starts the journal (a file
            # create); the one timed is the next, as between two wakes.
            _, code, _, _ = spawn_wait(argv, env, FIRST_RUN_TIMEOUT_S)
            if code != expected:
                raise RuntimeError(f"untimed no-op tick exited {code}, expected {expected}")
        before = dir_snapshot(d)
        if timed:
            ms, code, _, c = spawn_wait(argv, env, FIRST_RUN_TIMEOUT_S)
        else:
            _, code, kib, _, line = run_with_rss(argv, env, FIRST_RUN_TIMEOUT_S, work, kind)
            rss[kind] = kib
        if code != expected:
            raise RuntimeError(f"{kind} tick exited {code}, expected {expected}")
        written[kind].append(bytes_written(before, dir_snapshot(d)))
        if timed:
            samples[kind].append(ms)
            cpu[kind].append(c)

    log(f"{n} files: {reps} rounds of a no-op, a 1-file and a 100-file wake")
    for i in range(reps):
        for kind, head, expected in kinds[i % len(kinds):] + kinds[: i % len(kinds)]:
            one(kind, head, expected, i + 1)
    for kind, head, expected in kinds:
        one(kind, head, expected, reps + 1, timed=False)
    shutil.rmtree(rounds)
    move_main(repo, env, base)
    return samples, written, rss, cpu


def bench_size(n, reps, warmup, bin_path, tmp, env, true_bin, git_bin, first_reps, wake_reps,
               tree="plain", real=None):
    work = os.path.join(tmp, f"{tree}-n{n}")
    os.makedirs(work)
    repo = os.path.join(work, "repo")
    state = os.path.join(work, "state", "state.json")
    t = time.perf_counter()
    if tree == "real":
        log(f"real repository: cloning {real}")
        watched = ""
        head, n = clone_real(real, repo, env)
        log(f"real repository at commit {head}: {n} regular files")
        side = make_real_side_commits(repo, head, env)
    else:
        log(f"{tree} tree, {n} files: building the repository")
        watched = WATCHED
        head = make_repo(repo, n, env, tree)
        side = make_side_commits(repo, n, head, env, tree)
    repo_s = time.perf_counter() - t

    log(f"{n} files: {first_reps} first ticks (--batch 0) alternated with the floor")
    t = time.perf_counter()
    first, fr_rss, rss_via, fr_line, first_written = bench_first_runs(
        n, first_reps, bin_path, repo, work, env, git_bin, watched
    )
    first_s = time.perf_counter() - t
    with open(state, "rb") as f:
        doc = json.load(f)
    # Schema 1 holds the records; the sharded layout's manifest counts them
    # per shard.
    if "files" in doc:
        tracked = len(doc["files"])
    else:
        tracked = sum(shard["n"] for shard in doc.get("shards", []) if shard)
    backlog = len(doc.get("backlog", []))
    if tree == "real":
        # Links, submodules and odd names are not edited by the benchmark:
        # the files tracked are what sentinel itself counts.
        n = tracked
    elif tracked != n or backlog:
        raise RuntimeError(f"state tracks {tracked} files with a backlog of {backlog}; expected {n} and 0")
    del doc

    t = time.perf_counter()
    wakes, wake_written, wake_rss, wake_cpu = bench_wakes(
        n, wake_reps, bin_path, repo, work, env, side, head, watched
    )
    wakes_s = time.perf_counter() - t
    state_before = file_digest(state)

    git_env, git_argv = git_log(git_bin, repo, env, watched)
    out = subprocess.run(git_argv, env=git_env, capture_output=True, text=True,
                         timeout=NOOP_TIMEOUT_S).stdout.strip()
    if out != head:
        raise RuntimeError(f"git log alone answered {out!r}, expected {head}")

    kinds = ("tick", "git", "version", "true")
    samples = {k: [] for k in kinds}
    log(f"{n} files: {warmup} warm-up + {reps} measured no-op rounds")
    t = time.perf_counter()
    for i in range(warmup + reps):
        order = kinds[i % 4:] + kinds[: i % 4]
        for kind in order:
            if kind == "tick":
                ms, code, _, _ = spawn_wait(
                    tick_argv(bin_path, repo, state, i + 1, watched), env, NOOP_TIMEOUT_S
                )
                if code != 0:
                    raise RuntimeError(f"no-op tick {i} exited {code}, expected 0 (none)")
            elif kind == "git":
                ms, code, _, _ = spawn_wait(git_argv, git_env, NOOP_TIMEOUT_S)
            elif kind == "version":
                ms, code, _, _ = spawn_wait([bin_path, "--version"], env, NOOP_TIMEOUT_S)
            else:
                ms, code, _, _ = spawn_wait([true_bin], env, NOOP_TIMEOUT_S)
            if code != 0:
                raise RuntimeError(f"{kind} exited {code}")
            if i >= warmup:
                samples[kind].append(ms)
    noops_s = time.perf_counter() - t

    state_after = file_digest(state)
    journal = state + ".noops"
    with open(journal, "rb") as f:
        jbytes = f.read()
    jlines = jbytes.count(b"\n")
    noops = warmup + reps
    overhead = [a - b for a, b in zip(samples["tick"], samples["git"])]
    # The tick's own work beyond starting the binary at all, which is what
    # `sentinel --version` costs from the same harness.
    rest = [t - v for t, v in zip(samples["tick"], samples["version"])]
    big = max(side)
    return {
        "tree": tree,
        "head": head,
        "n": n,
        "reps": reps,
        "warmup": warmup,
        "first_reps": first_reps,
        "wake_reps": wake_reps,
        "big": big,
        "repo_s": repo_s,
        "phase_s": (first_s, wakes_s, noops_s),
        "first": first["first"],
        "floor": first["floor"],
        "first_cpu": first["first_cpu"],
        "floor_cpu": first["floor_cpu"],
        "first_written": first_written,
        "first_rss_mib": mib(fr_rss),
        "rss_via": rss_via,
        "first_line": fr_line,
        "state_bytes": state_before[1] + tree_bytes(state + ".d"),
        "state_untouched": state_before == state_after,
        "journal_bytes": len(jbytes),
        "journal_lines": jlines,
        "journal_expected_lines": noops + 1,  # + the epoch line
        "wakes": wakes,
        "wake_written": wake_written,
        "wake_rss": {k: mib(v) for k, v in wake_rss.items()},
        "tick": samples["tick"],
        "wake_cpu": wake_cpu,
        "git": samples["git"],
        "version": samples["version"],
        "true": samples["true"],
        "overhead": overhead,
        "rest": rest,
    }


def mib(kib):
    return kib / 1024 if kib is not None else None


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


def ratio(a, b):
    return None if not b else a / b


def verdict(value, limit, unit=""):
    if value is None:
        return "n/a"
    return f"{'met' if value <= limit else 'MISSED'} (≤ {limit:g}{unit})"


TREE_NAMES = {
    "plain": "import-free",
    "imports": "5% unresolved imports",
    "interleaved": "import-free, directories interleaved",
    "real": "real repository",
}


def targets(p, last):
    p(f"Targets, {TREE_NAMES[last['tree']]} at {last['n']:,} files (docs/benchmark.md; printed, never enforced):")
    noop_git = ratio(median(last["tick"]), median(last["git"]))
    # The no-op of the wake rounds: steady (its journal started) and
    # measured in the same rotation, so that the machine's drift over the
    # minutes between the phases stays out of the ratio.
    w1 = ratio(median(last["wakes"]["wake1"]), median(last["wakes"]["noop"]))
    p(f"- no-op ÷ `git log -1`: {fmt(noop_git)}× — {verdict(noop_git, 1.5, '×')}")
    p(f"- 1-file wake ÷ no-op of its rounds: {fmt(w1, 1)}× — {verdict(w1, 5, '×')}")
    w1s = ratio(median(last["wakes"]["wake1"]), median(last["tick"]))
    p(f"- 1-file wake ÷ steady no-op (the no-op rounds'): {fmt(w1s, 1)}× — {verdict(w1s, 5, '×')}")
    w1c = ratio(median(last["wake_cpu"]["wake1"]), median(last["wake_cpu"]["noop"]))
    p(f"- the same in CPU time (user + system, git children included): {fmt(w1c, 1)}× "
      f"({fmt(median(last['wake_cpu']['wake1']), 1)} ms against {fmt(median(last['wake_cpu']['noop']))} ms)")
    written = median(last["wake_written"]["wake1"])
    p(f"- 1-file wake writes {written:,.0f} bytes — {verdict(written / 1e6, 1, ' MB')}")
    rss = last["wake_rss"]["wake1"]
    p(f"- 1-file wake peaks at {fmt(rss, 1)} MiB — {verdict(rss, 40, ' MiB')}")
    fr = ratio(median(last["first"]), median(last["floor"]))
    p(f"- first run (`--batch 0`, no model) ÷ floor: {fmt(fr, 1)}× — {verdict(fr, 2, '×')}")
    cpu = ratio(median(last["first_cpu"]), median(last["floor_cpu"]))
    p(f"- the same in CPU time (user + system, git children included): {fmt(cpu, 1)}× "
      f"({fmt(median(last['first_cpu']))} s against {fmt(median(last['floor_cpu']))} s)")
    p("")


def report(results, args, elapsed_s):
    out = []
    p = out.append
    p("")
    p(f"### Tick costs (build `{args.build}`)")
    p("")
    p(
        "| tree | tracked files | no-op (ms) | `git log -1` (ms) | no-op ÷ git log "
        "| 1-file wake (ms) | ÷ its rounds' no-op | ÷ steady no-op | 100-file wake (ms) | ÷ its rounds' no-op "
        "| first run (s) | floor (s) | first run ÷ floor | first run ÷ floor, CPU |"
    )
    p("|:--|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        noop, git = median(r["tick"]), median(r["git"])
        wnoop = median(r["wakes"]["noop"])
        w1 = median(r["wakes"]["wake1"])
        wb = median(r["wakes"][f"wake{r['big']}"])
        first, floor = median(r["first"]), median(r["floor"])
        cpu = ratio(median(r["first_cpu"]), median(r["floor_cpu"]))
        p(
            f"| {TREE_NAMES[r['tree']]} | {r['n']:,} | {fmt(noop)} | {fmt(git)} | {fmt(ratio(noop, git))}× "
            f"| {fmt(w1, 1)} | {fmt(ratio(w1, wnoop), 1)}× | {fmt(ratio(w1, noop), 1)}× "
            f"| {fmt(wb, 1)} | {fmt(ratio(wb, wnoop), 1)}× "
            f"| {fmt(first)} | {fmt(floor)} | {fmt(ratio(first, floor), 1)}× | {fmt(cpu, 1)}× |"
        )
    p("")
    p(
        "| tree | tracked files | bytes written: first run | no-op | 1-file wake | 100-file wake "
        "| peak RSS (MiB): first run | no-op | 1-file wake | 100-file wake |"
    )
    p("|:--|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        ww, wr = r["wake_written"], r["wake_rss"]
        big = f"wake{r['big']}"
        p(
            f"| {TREE_NAMES[r['tree']]} | {r['n']:,} | {r['first_written']:,} | {median(ww['noop']):,.0f} "
            f"| {median(ww['wake1']):,.0f} | {median(ww[big]):,.0f} "
            f"| {fmt(r['first_rss_mib'], 1)} | {fmt(wr['noop'], 1)} | {fmt(wr['wake1'], 1)} "
            f"| {fmt(wr[big], 1)} |"
        )
    p("")
    for tree in TREE_NAMES:
        mine = [r for r in results if r["tree"] == tree]
        if mine:
            targets(p, mine[-1])
    p(f"Machine: {machine_line()}.")
    p(
        f"Command: `{args.command}` (release build `{args.build}`; medians; the no-op and "
        f"`git log -1` over {'/'.join(str(r['reps']) for r in results)} interleaved rounds after "
        f"{results[0]['warmup']} warm-up; wakes and their no-op over "
        f"{'/'.join(str(r['wake_reps']) for r in results)} rotated rounds; first run and floor "
        f"alternated {'/'.join(str(r['first_reps']) for r in results)} times; generated "
        f"repositories: one commit, files under `{WATCHED}/`, `--path {WATCHED}`; a real one "
        f"watched whole). The floor is "
        f"`git ls-tree -r --object-only HEAD -- {WATCHED} | git cat-file --batch | cat >/dev/null` "
        f"(over the whole tree for a real repository)."
    )
    p("")
    p("Details:")
    p("")
    p(
        "| tree | tracked files | repo setup (s) | state, shards included (MiB) | journal after runs (bytes, lines) "
        "| spawn floor `/bin/true` (ms) | `sentinel --version` (ms) | no-op p95 (ms) "
        "| git log p95 (ms) | overhead: no-op − git log (ms) | no-op − `sentinel --version` (ms) "
        "| no-op of the wake rounds (ms) "
        "| time per phase: first runs / wakes / no-ops (s) |"
    )
    p("|:--|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        fs, ws, ns = r["phase_s"]
        p(
            f"| {TREE_NAMES[r['tree']]} | {r['n']:,} | {fmt(r['repo_s'])} | {fmt(r['state_bytes'] / 2**20)} "
            f"| {r['journal_bytes']:,} B, {r['journal_lines']} lines "
            f"| {fmt(median(r['true']))} | {fmt(median(r['version']))} "
            f"| {fmt(percentile(r['tick'], 95))} | {fmt(percentile(r['git'], 95))} "
            f"| {fmt(median(r['overhead']))} | {fmt(median(r['rest']))} "
            f"| {fmt(median(r['wakes']['noop']))} "
            f"| {fs:.1f} / {ws:.1f} / {ns:.1f} |"
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
        what = f"{TREE_NAMES[r['tree']]}" + (f" (commit {r['head'][:12]})" if r["tree"] == "real" else "")
        p(f"- {what}, {r['n']:,}: first run `{r['first_line']}` (peak RSS via {r['rss_via']}; includes the git children sentinel waited for); {'; '.join(checks)}.")
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    p(f"- {git_version}. Bytes written: the state directory before and after one tick; a file "
      "replaced counts whole, a file appended to counts its growth.")
    p(
        f"- load average (1 min) at the start {args.load_start:.2f}, at the end "
        f"{os.getloadavg()[0]:.2f}: other work on the machine shows in the p95s, "
        "and in git log alone as much as in the tick."
    )
    p(f"- measuring run time: {elapsed_s:.1f} s")
    print("\n".join(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="the sentinel binary")
    ap.add_argument("--tmp", required=True, help="an empty scratch directory (removed by the caller)")
    ap.add_argument("--sizes", required=True, help="comma-separated tracked-file counts")
    ap.add_argument("--reps", required=True, help="comma-separated rounds, one per size")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--first-reps", required=True, help="comma-separated first runs, one per size")
    ap.add_argument("--wake-reps", required=True, help="comma-separated wake rounds, one per size")
    ap.add_argument("--trees", default="plain,imports,interleaved",
                    help="generated trees: plain, imports, interleaved")
    ap.add_argument("--real", default="", help="a clone of a real repository, measured once, watched whole")
    ap.add_argument("--real-reps", default="100,5,15", help="no-op rounds, first runs, wake rounds for --real")
    ap.add_argument("--command", default="scripts/bench")
    ap.add_argument("--build", default="unknown")
    args = ap.parse_args()
    args.load_start = os.getloadavg()[0]

    sizes = [int(s) for s in args.sizes.split(",")]
    reps = [int(s) for s in args.reps.split(",")]
    first_reps = [int(s) for s in args.first_reps.split(",")]
    wake_reps = [int(s) for s in args.wake_reps.split(",")]
    counts = {len(sizes), len(reps), len(first_reps), len(wake_reps)}
    if len(counts) != 1 or min(sizes + reps + first_reps + wake_reps) < 1 or args.warmup < 0:
        ap.error("--sizes, --reps, --first-reps and --wake-reps need the same number of positive values")
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
    tmp = os.path.abspath(args.tmp)
    results = [
        bench_size(n, r, args.warmup, bin_path, tmp, env, true_bin, git_bin, f, w, tree)
        for tree in args.trees.split(",")
        for n, r, f, w in zip(sizes, reps, first_reps, wake_reps)
    ]
    if args.real:
        r, f, w = (int(x) for x in args.real_reps.split(","))
        results.append(
            bench_size(0, r, args.warmup, bin_path, tmp, env, true_bin, git_bin, f, w, "real", args.real)
        )
    report(results, args, time.perf_counter() - t0)


if __name__ == "__main__":
    main()
