//! The sandbox follows the watched branch (invariant 23): human commits
//! replayed between an agent's proposals, and the sandbox checked with git
//! itself: based on the current head, merging cleanly, no empty commit, and
//! nothing in it but the agent's lines.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::Value;

use crate::util::{Output, Sandbox, WATCHED, at};

const FILES: [&str; 4] = ["a.js", "b.js", "c.js", "d.js"];
const AGENT_LINE: &str = "// reviewed by the agent";

/// A real agent: appends one line to the file it is asked about, in the
/// worktree sentinel gives it, and answers EVOLVE.
fn appending_agent(sb: &Sandbox) -> String {
    let path = sb.root().join("appender.sh");
    let log = sb.root().join("runs.log");
    let body = format!(
        "#!/bin/sh\necho \"$SENTINEL_FILE\" >> '{}'\ncat > /dev/null\nprintf '{AGENT_LINE}\\n' >> \"$SENTINEL_FILE\"\n\
         printf '%s' '{{\"action\":\"EVOLVE\",\"reason\":\"mark the file reviewed\",\"findings\":[]}}'\n",
        log.display()
    );
    fs::write(&path, body).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn runs(sb: &Sandbox) -> usize {
    fs::read_to_string(sb.root().join("runs.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn tick(sb: &Sandbox, minute: i64, agent: &str) -> Output {
    let out = sb.tick_cmd(&at(minute)).args(["--agent", agent]).output();
    assert!(
        [0, 10, 12].contains(&out.code),
        "minute {minute}: {}",
        out.stderr
    );
    out
}

/// git in the clone, with its exit status (the helper on `Repo` panics).
fn git_status(sb: &Sandbox, args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn human_edit(sb: &Sandbox, name: &str, content: &str, message: &str) {
    sb.repo.write(&format!("{WATCHED}/{name}"), content);
    sb.repo.commit(message);
}

#[test]
fn invariant_23_the_sandbox_is_the_watched_head_plus_one_commit_per_open_proposal() {
    let sb = Sandbox::with_files(&FILES);
    let agent = appending_agent(&sb);
    tick(&sb, 0, &agent);
    // Three human commits, two files: each edits the line the agent's
    // line follows, where a sandbox rooted at the old head conflicts.
    human_edit(&sb, "a.js", "// a.js\nmodule.exports = 2;\n", "a: v2");
    tick(&sb, 2, &agent);
    human_edit(&sb, "b.js", "// b.js\nmodule.exports = 3;\n", "b: v3");
    tick(&sb, 4, &agent);
    human_edit(&sb, "a.js", "// a.js\nmodule.exports = 4;\n", "a: v4");
    let last = tick(&sb, 6, &agent);
    let head = sb.repo.head();

    // Based on the current head, one commit per open proposal.
    let (ancestor, _) = git_status(
        &sb,
        &["merge-base", "--is-ancestor", "main", "sentinel-sandbox"],
    );
    assert!(ancestor, "main is an ancestor of the sandbox");
    let commits = sb
        .repo
        .git(&["rev-list", "--reverse", "main..sentinel-sandbox"]);
    let commits: Vec<&str> = commits.lines().collect();
    assert_eq!(commits.len(), 4, "{commits:?}");
    assert_eq!(sb.repo.git(&["rev-parse", "sentinel-sandbox~4"]), head);
    // Merging it never conflicts.
    let (clean, tree) = git_status(
        &sb,
        &["merge-tree", "--write-tree", "main", "sentinel-sandbox"],
    );
    assert!(clean, "merge-tree reports a conflict: {tree}");
    // No empty commit; each names its file, the decision and the fingerprint.
    let mut touched = Vec::new();
    for c in &commits {
        let files = sb
            .repo
            .git(&["diff-tree", "--no-commit-id", "--name-only", "-r", c]);
        assert_eq!(files.lines().count(), 1, "commit {c}: {files:?}");
        let message = sb.repo.git(&["log", "-1", "--format=%B", c]);
        assert!(
            message.starts_with(&format!("sentinel: proposed change to {files}")),
            "{message}"
        );
        assert!(message.contains("Decision: evolve"), "{message}");
        assert!(message.contains("Fingerprint: "), "{message}");
        touched.push(files);
    }
    touched.sort();
    let expected: Vec<String> = FILES.iter().map(|f| format!("{WATCHED}/{f}")).collect();
    assert_eq!(touched, expected);
    // The diff from main is the agent's lines and nothing else.
    let diff = sb
        .repo
        .git(&["diff", "--unified=0", "main", "sentinel-sandbox"]);
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| {
            (l.starts_with('+') || l.starts_with('-'))
                && !l.starts_with("+++")
                && !l.starts_with("---")
        })
        .collect();
    assert_eq!(changed, vec![format!("+{AGENT_LINE}"); 4], "{diff}");

    // The tick says what was committed where, on its line and in --json.
    let report: Value = last.json();
    assert_eq!(report["sandbox"]["base"], head, "{}", report["sandbox"]);
    assert_eq!(report["sandbox"]["commits"].as_array().unwrap().len(), 4);
    assert_eq!(report["sandbox"]["rebuilt"], true);
    assert_eq!(
        report["sandbox"]["commits"][3]["commit"],
        sb.repo.git(&["rev-parse", "sentinel-sandbox"])
    );
    let line = last.stderr_line();
    assert!(
        line.contains(&format!("= {} + 4 proposals", &head[..7])),
        "{line}"
    );
    assert!(line.contains("`git merge sentinel-sandbox`"), "{line}");
}

#[test]
fn a_merged_sandbox_is_own_output_and_leaves_no_proposal_behind() {
    let sb = Sandbox::with_files(&FILES);
    let agent = appending_agent(&sb);
    tick(&sb, 0, &agent);
    assert_eq!(runs(&sb), 4);
    // A person takes every proposal.
    sb.repo
        .git(&["merge", "-q", "--ff-only", "sentinel-sandbox"]);
    let out = tick(&sb, 2, &agent);
    assert_eq!(
        runs(&sb),
        4,
        "no agent run for its own output: {}",
        out.stderr
    );
    let report: Value = out.json();
    assert_eq!(
        report["sandbox"]["commits"],
        serde_json::json!([]),
        "{report}"
    );
    assert_eq!(
        sb.repo.git(&["rev-parse", "sentinel-sandbox"]),
        sb.repo.head(),
        "the sandbox holds no commit once every proposal is merged"
    );
}
