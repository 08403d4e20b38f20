//! A hostile agent against the worktree sentinel keeps for it: one test per
//! attack (its `.git` replaced or made a link, a planted hook, the worktree
//! made a link to the clone, a link or a huge file left at the file it was
//! handed, the watched branch moved), each a real shell script as `--agent`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at};

const SKIP: &str = r#"{"action":"SKIP","reason":"fine as it is","findings":[]}"#;
const EVOLVE: &str = r#"{"action":"EVOLVE","reason":"rewrote it","findings":[]}"#;

/// An agent script that logs its run, reads its input, runs `body` in its
/// worktree and answers `answer`; returns the command.
fn agent(sb: &Sandbox, body: &str, answer: &str) -> String {
    let path = sb.root().join("agent.sh");
    let log = sb.root().join("runs.log");
    fs::write(
        &path,
        format!(
            "#!/bin/sh\necho \"$SENTINEL_FILE\" >> '{}'\ncat > /dev/null\n{body}\nprintf '%s' '{answer}'\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn runs(sb: &Sandbox) -> usize {
    fs::read_to_string(sb.root().join("runs.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[track_caller]
fn tick(sb: &Sandbox, minute: i64, cmd: &str, code: i32) -> Value {
    let out = sb
        .tick_cmd(&at(minute))
        .args(["--agent", cmd, "--fake-sleep"])
        // Enough for sentinel and git, far less than an unbounded read.
        .memory_limit(1 << 30)
        .output();
    expect_code(&out, code);
    out.json()
}

fn outcome<'a>(r: &'a Value, name: &str) -> &'a Value {
    let path = format!("{WATCHED}/{name}");
    r["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path.as_str())
        .unwrap_or_else(|| panic!("{path} not in {r}"))
}

/// Every name under `dir` with its bytes, sorted.
fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            for (n, b) in listing(&e.path()) {
                out.push((format!("{name}/{n}"), b));
            }
        } else {
            out.push((name, fs::read(e.path()).unwrap()));
        }
    }
    out.sort();
    out
}

/// Every patch text of every ref in the clone, as git shows it.
fn all_history(sb: &Sandbox) -> String {
    sb.repo.git(&["log", "--all", "-p", "--format=%H %s"])
}

/// A person's work in progress in the clone: a staged edit, an unstaged
/// edit, an untracked file, an ignored `.env` and a file under `.sentinel/`.
fn work_in_progress(sb: &Sandbox) {
    sb.repo.write("docs/staged.md", "staged\n");
    sb.repo.git(&["add", "docs/staged.md"]);
    sb.repo.write("docs/readme.md", "# edited, not staged\n");
    sb.repo.write("scratch.txt", "untracked\n");
    sb.repo.write(".gitignore", ".env\n");
    sb.repo.write(".env", "TOKEN=mine\n");
    sb.repo.write(".sentinel/keep.txt", "mine\n");
}

#[track_caller]
fn work_in_progress_survived(sb: &Sandbox) {
    let g = |args: &[&str]| sb.repo.git(args);
    assert_eq!(
        g(&["symbolic-ref", "HEAD"]),
        "refs/heads/main",
        "HEAD detached"
    );
    assert_eq!(g(&["diff", "--cached", "--name-only"]), "docs/staged.md");
    assert_eq!(
        g(&["diff", "--name-only"]),
        "docs/readme.md",
        "unstaged edit lost"
    );
    let read = |rel: &str| fs::read_to_string(sb.repo.root.join(rel)).unwrap_or_default();
    assert_eq!(read("docs/readme.md"), "# edited, not staged\n");
    assert_eq!(read("scratch.txt"), "untracked\n");
    assert_eq!(read(".env"), "TOKEN=mine\n");
    assert_eq!(read(".sentinel/keep.txt"), "mine\n");
}

/// Two watched files (so the worktree is prepared again in the same tick)
/// and a committed doc the person then edits.
fn two_files() -> Sandbox {
    let sb = Sandbox::new();
    for name in ["a.js", "b.js"] {
        sb.repo
            .write(&format!("{WATCHED}/{name}"), crate::util::plain_js(name));
    }
    sb.repo.write("docs/readme.md", "# readme\n");
    sb.repo.commit("initial files");
    sb
}

#[test]
fn a_worktree_git_replaced_by_a_repository_pointing_elsewhere_never_moves_sentinels_git() {
    let sb = two_files();
    let victim = sb.root().join("victim");
    fs::create_dir_all(&victim).unwrap();
    fs::write(victim.join("precious.txt"), "keep me\n").unwrap();
    let once = sb.root().join("replaced");
    let seen = sb.root().join("second-run.txt");
    // The first run replaces its `.git`; the second says what it was handed.
    let body = format!(
        "if [ ! -e '{once}' ]; then\n  touch '{once}'\n  rm -rf .git\n  git init -q --bare .git\n  \
         git --git-dir=.git config core.bare false\n  git --git-dir=.git config core.worktree '{victim}'\n  \
         echo '{objects}' > .git/objects/info/alternates\n\
         else\n  [ -d .git ] && git rev-parse HEAD > '{seen}'\n  cat \"$SENTINEL_FILE\" >> '{seen}'\nfi",
        once = once.display(),
        seen = seen.display(),
        victim = victim.display(),
        objects = sb.repo.root.join(".git/objects").display()
    );
    let cmd = agent(&sb, &body, SKIP);
    let r = tick(&sb, 0, &cmd, 10);
    assert!(once.exists(), "the agent did not run its attack");
    assert_eq!(runs(&sb), 2);
    assert_eq!(outcome(&r, "b.js")["outcome"], "llm_skip", "{r}");
    assert_eq!(
        listing(&victim),
        [("precious.txt".to_string(), b"keep me\n".to_vec())]
    );
    // The second run had a git of its own again, at the head, and the file.
    let head = sb.repo.git(&["rev-parse", "HEAD"]);
    assert_eq!(
        fs::read_to_string(&seen).unwrap(),
        format!("{head}\n{}", crate::util::plain_js("b.js"))
    );
}

#[test]
fn invariant_19_a_hook_the_agent_plants_never_runs_in_sentinels_git() {
    let sb = two_files();
    let ran = sb.root().join("hook-ran");
    // Hooks for a checkout and a ref update (the patch's), in its own git
    // and, with no kernel sandbox to stop it, in the clone's.
    let body = format!(
        "for git_dir in \"$(git rev-parse --path-format=absolute --git-dir)\" '{clone}'; do\n\
         hooks=\"$git_dir/hooks\"\nmkdir -p \"$hooks\"\n\
         for h in post-checkout reference-transaction; do\n\
           printf '#!/bin/sh\\necho %s >> {ran}\\nenv >> {ran}\\n' \"$h\" > \"$hooks/$h\"\n\
           chmod +x \"$hooks/$h\"\n\
         done\n\
         git --git-dir=\"$git_dir\" config core.hooksPath \"$hooks\"\n\
         done",
        clone = sb.repo.root.join(".git").display(),
        ran = ran.display()
    );
    let answer = r#"{"action":"EVOLVE","reason":"rewrote it","findings":[],"content":"// new\\n"}"#;
    let cmd = agent(&sb, &body, answer);
    let r = tick(&sb, 0, &cmd, 10);
    assert_eq!(runs(&sb), 2);
    assert_eq!(outcome(&r, "a.js")["outcome"], "evolve", "{r}");
    let hooks = sb.repo.root.join(".git/hooks");
    assert!(
        hooks.join("post-checkout").exists() && hooks.join("reference-transaction").exists(),
        "the agent did not plant its hooks"
    );
    let sandbox = sb
        .repo
        .git(&["log", "--format=%s", "refs/heads/sentinel-sandbox"]);
    assert!(sandbox.contains("proposed change to"), "{sandbox}");
    assert!(
        !ran.exists(),
        "a planted hook ran in sentinel's git:\n{}",
        fs::read_to_string(&ran).unwrap_or_default()
    );
}

#[test]
fn a_worktree_git_made_a_link_to_the_clone_leaves_the_persons_work_alone() {
    let sb = two_files();
    work_in_progress(&sb);
    let body = format!(
        "rm -f .git\nln -s '{}' .git",
        sb.repo.root.join(".git").display()
    );
    let cmd = agent(&sb, &body, SKIP);
    let r = tick(&sb, 0, &cmd, 10);
    assert_eq!(runs(&sb), 2);
    assert_eq!(outcome(&r, "b.js")["outcome"], "llm_skip", "{r}");
    work_in_progress_survived(&sb);
}

#[test]
fn a_worktree_made_a_link_to_the_clone_leaves_the_persons_work_alone() {
    let sb = two_files();
    work_in_progress(&sb);
    let copies = sb.root().join("copies.txt");
    let body = format!(
        "wt=\"$SENTINEL_WORKTREE\"\necho \"$wt\" >> '{copies}'\ncd /\nrm -rf \"$wt\"\nln -s '{repo}' \"$wt\"",
        copies = copies.display(),
        repo = sb.repo.root.display()
    );
    let cmd = agent(&sb, &body, SKIP);
    let r = tick(&sb, 0, &cmd, 10);
    assert_eq!(runs(&sb), 2);
    assert_eq!(outcome(&r, "b.js")["outcome"], "llm_skip", "{r}");
    work_in_progress_survived(&sb);
    // The second prepare removed the first run's link (never what it points
    // to), and the end of the tick the second's, with the copy's directory.
    let copies = fs::read_to_string(&copies).unwrap();
    let copy = PathBuf::from(copies.lines().next().unwrap());
    assert!(!copy.starts_with(&sb.repo.root), "{copies}");
    assert!(!copy.parent().unwrap().exists(), "{copies}");
    assert_eq!(sb.repo.git(&["status", "--porcelain", "--", ".git"]), "");
}

#[test]
fn a_link_to_a_secret_left_at_the_file_is_a_bad_response_and_never_committed() {
    let sb = Sandbox::with_files(&["a.js"]);
    let secret = sb.root().join("secret.txt");
    fs::write(&secret, "the-password-is-swordfish\n").unwrap();
    let body = format!("ln -sf '{}' \"$SENTINEL_FILE\"", secret.display());
    let cmd = agent(&sb, &body, EVOLVE);
    let r = tick(&sb, 0, &cmd, 10);
    let a = outcome(&r, "a.js");
    assert_eq!(a["outcome"], "bad_response", "{r}");
    assert!(
        a["reason"].as_str().unwrap().contains("is a symbolic link"),
        "{a}"
    );
    assert!(!all_history(&sb).contains("swordfish"));
}

#[test]
fn a_link_to_dev_zero_left_at_the_file_is_a_bad_response_in_bounded_memory() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, "ln -sf /dev/zero \"$SENTINEL_FILE\"", EVOLVE);
    let r = tick(&sb, 0, &cmd, 10);
    let a = outcome(&r, "a.js");
    assert_eq!(a["outcome"], "bad_response", "{r}");
    assert!(
        a["reason"].as_str().unwrap().contains("is a symbolic link"),
        "{a}"
    );
}

#[test]
fn a_two_gigabyte_sparse_file_left_at_the_file_is_a_bad_response_in_bounded_memory() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, "truncate -s 2G \"$SENTINEL_FILE\"", EVOLVE);
    let r = tick(&sb, 0, &cmd, 10);
    let a = outcome(&r, "a.js");
    assert_eq!(a["outcome"], "bad_response", "{r}");
    assert!(
        a["reason"]
            .as_str()
            .unwrap()
            .contains("over --max-file-bytes"),
        "{a}"
    );
}

/// An agent that commits in its copy and, with no kernel sandbox to stop
/// it, moves the clone's checked-out branch to its commit.
fn moves_the_clones_branch(sb: &Sandbox) -> String {
    format!(
        "printf '// the agent was here\\n' >> \"$SENTINEL_FILE\"\n\
         git -c user.name=agent -c user.email=agent@example.invalid commit -qam agent\n\
         git -C '{repo}' fetch -q \"$PWD\" HEAD\n\
         git -C '{repo}' update-ref refs/heads/main FETCH_HEAD",
        repo = sb.repo.root.display()
    )
}

#[test]
fn an_agent_that_moves_the_watched_branch_is_noted_and_its_commit_costs_no_call() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, &moves_the_clones_branch(&sb), SKIP);
    let before = sb.repo.head();
    let r = tick(&sb, 0, &cmd, 10);
    assert_eq!(runs(&sb), 1);
    assert_ne!(sb.repo.head(), before, "the agent did not move the branch");
    let notes = r["notes"].to_string();
    assert!(notes.contains("the agent moved `HEAD`"), "{notes}");
    // The next tick sees the agent's commit, and pays for nothing.
    let out = sb
        .tick_cmd(&at(2))
        .args(["--agent", &cmd, "--fake-sleep"])
        .output();
    expect_code(&out, 12);
    assert_eq!(runs(&sb), 1, "the agent was asked about its own commit");
    let a = outcome(&out.json(), "a.js").clone();
    assert!(
        a["reason"].as_str().unwrap().starts_with("own output"),
        "{a}"
    );
}

#[test]
fn a_watched_branch_and_head_moved_together_count_one_rewrite() {
    let sb = Sandbox::with_files(&["a.js"]);
    let cmd = agent(&sb, &moves_the_clones_branch(&sb), SKIP);
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &cmd, "--branch", "main"])
        .output();
    expect_code(&out, 10);
    let notes = out.json()["notes"].to_string();
    assert!(
        notes.contains("the agent moved `HEAD`") && notes.contains("the agent moved `main`"),
        "{notes}"
    );
    let e = sb
        .sentinel([
            "explain",
            &format!("{WATCHED}/a.js"),
            "--json",
            "--path",
            WATCHED,
        ])
        .args(["--branch", "main", "--now", &at(1), "--agent", &cmd])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .output();
    expect_code(&e, 0);
    assert_eq!(e.json()["rewrites"]["in_window"], 1, "{}", e.stdout);
}
