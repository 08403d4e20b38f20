//! docs/agents.md runs as written: the Way-2 cron recipe (an outer agent
//! that runs sentinel, acts on what it hands over and records it) taken
//! from the page itself and run against a real upstream, a person's clone
//! and the agent's clone, across three human changes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{Sandbox, at, plain_js};

const FILES: [&str; 3] = ["a.js", "b.js", "c.js"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The first fenced block of docs/agents.md whose text starts with `start`
/// and holds `holds`.
fn doc_block(start: &str, holds: &str) -> String {
    let page = fs::read_to_string(root().join("docs/agents.md")).unwrap();
    page.split("```")
        .skip(1)
        .step_by(2)
        .filter_map(|b| b.split_once('\n').map(|(_, body)| body.to_string()))
        .find(|body| body.starts_with(start) && body.contains(holds))
        .unwrap_or_else(|| panic!("docs/agents.md has no block starting with {start:?}"))
}

/// The Way-2 world: an upstream, a person's clone, the agent's clone (with
/// the documented outer-agent.sh in it) and a `my-agent` on PATH.
struct World {
    sb: Sandbox,
    upstream: PathBuf,
    person: PathBuf,
    clone: PathBuf,
    bin: PathBuf,
}

impl World {
    fn new() -> World {
        let sb = Sandbox::new();
        for name in FILES {
            sb.repo.write(&format!("libs/{name}"), plain_js(name));
        }
        sb.repo.commit("initial files");
        let upstream = sb.root().join("upstream.git");
        let person = sb.root().join("person");
        let clone = sb.root().join("agent-clone");
        let bin = sb.root().join("bin");
        let w = World {
            sb,
            upstream,
            person,
            clone,
            bin,
        };
        let (up, src) = (
            w.upstream.display().to_string(),
            w.sb.repo.root.display().to_string(),
        );
        w.git(w.sb.root(), &["clone", "-q", "--bare", &src, &up]);
        w.git(
            w.sb.root(),
            &["clone", "-q", &up, &w.person.display().to_string()],
        );
        w.git(
            w.sb.root(),
            &["clone", "-q", &up, &w.clone.display().to_string()],
        );
        fs::create_dir_all(&w.bin).unwrap();
        let sentinel = PathBuf::from(env!("CARGO_BIN_EXE_sentinel"));
        std::os::unix::fs::symlink(&sentinel, w.bin.join("sentinel")).unwrap();
        // The agent appends a line and commits; on its first run at
        // `race-armed`, a person pushes a change before the agent can.
        let log = w.sb.root().join("agent-runs.log");
        let armed = w.sb.root().join("race-armed");
        let race = format!(
            "cd '{p}' && git pull -q && printf '// b, by a person racing the agent\\n' >> libs/b.js && git commit -qam 'a person races' && git push -q",
            p = w.person.display()
        );
        w.script(
            "my-agent",
            &format!(
                "echo \"$1\" >> '{log}'\nprintf '// touched by the agent\\n' >> \"$1\"\ngit commit -qm \"agent: $1\" -- \"$1\" || exit 1\n\
                 if [ -e '{armed}' ]; then rm '{armed}'; ( {race} ) || exit 1; fi\n",
                log = log.display(),
                armed = armed.display()
            ),
        );
        let script = doc_block("#!/bin/sh\n# outer-agent.sh", "");
        let example = fs::read_to_string(root().join("examples/agents/outer-agent.sh")).unwrap();
        assert_eq!(
            script, example,
            "docs/agents.md and examples/agents/outer-agent.sh differ"
        );
        let at_clone = w.clone.join("outer-agent.sh");
        fs::write(&at_clone, script).unwrap();
        fs::set_permissions(&at_clone, fs::Permissions::from_mode(0o755)).unwrap();
        w
    }

    fn script(&self, name: &str, body: &str) {
        let path = self.bin.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A command with the recipe's environment: PATH with sentinel and
    /// my-agent, a git identity, a fixed time.
    fn command(&self, program: &str, minute: i64) -> Command {
        let mut cmd = Command::new(program);
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env_clear()
            .env("PATH", path)
            .env("HOME", self.sb.home())
            .env("TMPDIR", self.sb.root())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "agent")
            .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
            .env("GIT_COMMITTER_NAME", "agent")
            .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
            .env("SENTINEL_NOW", at(minute))
            .stdin(Stdio::null());
        cmd
    }

    #[track_caller]
    fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self
            .command("git", 0)
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    }

    /// A person pulls, edits `name` and pushes.
    fn person_edits(&self, name: &str) {
        self.git(&self.person, &["pull", "-q"]);
        let file = self.person.join("libs").join(name);
        let mut text = fs::read_to_string(&file).unwrap();
        text.push_str("// a person's edit\n");
        fs::write(&file, text).unwrap();
        self.git(
            &self.person,
            &["commit", "-qam", &format!("a person edits {name}")],
        );
        self.git(&self.person, &["push", "-q"]);
    }

    /// The documented crontab line, with this world's paths; its exit code
    /// and what it logged.
    fn cron(&self, minute: i64) -> (i32, String) {
        let line = doc_block("*/10 * * * * cd /srv/agent-clone", "./outer-agent.sh");
        let command: String = line
            .lines()
            .next()
            .unwrap()
            .splitn(6, ' ')
            .nth(5)
            .unwrap()
            .into();
        let log = self.sb.root().join("agent.log");
        let command = command
            .replace("/srv/agent-clone", &self.clone.display().to_string())
            .replace("/var/log/agent.log", &log.display().to_string());
        let status = self
            .command("sh", minute)
            .current_dir(self.sb.root())
            .args(["-c", &command])
            .status()
            .unwrap();
        (
            status.code().unwrap_or(-1),
            fs::read_to_string(&log).unwrap_or_default(),
        )
    }

    fn agent_runs(&self) -> Vec<String> {
        fs::read_to_string(self.sb.root().join("agent-runs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn the_way_two_cron_recipe_runs_across_three_human_changes_without_a_deadlock() {
    let w = World::new();
    // First run: every file is handed over once.
    let (code, log) = w.cron(0);
    assert_eq!(code, 0, "{log}");
    assert_eq!(w.agent_runs().len(), 3, "{log}");
    // Human change 1, and change 2 pushed while the agent works on a.js,
    // so the agent's push loses the race.
    w.person_edits("a.js");
    fs::write(w.sb.root().join("race-armed"), "").unwrap();
    let (code, log) = w.cron(10);
    assert_eq!(code, 0, "{log}");
    assert_eq!(w.agent_runs()[3..], ["libs/a.js"], "{log}");
    assert!(log.contains("the push failed"), "no race: {log}");
    // The next run rebases the agent's commit and is handed b.js only.
    let (code, log) = w.cron(20);
    assert_eq!(code, 0, "{log}");
    assert_eq!(w.agent_runs()[4..], ["libs/b.js"], "{log}");
    // Human change 3.
    w.person_edits("c.js");
    let (code, log) = w.cron(30);
    assert_eq!(code, 0, "{log}");
    assert_eq!(w.agent_runs()[5..], ["libs/c.js"], "{log}");
    // Nothing new: the agent's own commits hand nothing over.
    let (code, log) = w.cron(40);
    assert_eq!(code, 0, "{log}");
    assert_eq!(w.agent_runs().len(), 6, "{log}");
    // Upstream holds every commit of both, the agent's work included.
    let subjects = w.git(&w.upstream, &["log", "--format=%s", "HEAD"]);
    for s in [
        "agent: libs/a.js",
        "a person races",
        "agent: libs/b.js",
        "a person edits c.js",
    ] {
        assert!(
            subjects.lines().any(|l| l == s),
            "{s} not upstream:\n{subjects}"
        );
    }
    assert_eq!(
        w.git(&w.clone, &["status", "--porcelain", "--untracked-files=no"]),
        ""
    );
}
