//! The agent contained by the kernel where it really runs: sentinel started
//! by a job shell that holds every secret, as root. One attack per test,
//! each a real script as `--agent`; what it saw goes to `seen/`, the one
//! directory outside its run it is let to write (`--agent-writable`).
//! Where the kernel has no Landlock the tests that need it say so and end.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::expect_code;
use crate::util::{Sandbox, WATCHED, at, sidecar};

const SKIP: &str = r#"{"action":"SKIP","reason":"fine as it is","findings":[]}"#;

/// What a CI job's shell holds: the provider's key and four more.
const JOB_SECRETS: [(&str, &str); 5] = [
    ("OPENAI_API_KEY", "sk-job-shell-openai-0123456789"),
    ("SENTINEL_GITLAB_TOKEN", "glpat-job-shell-gitlab-0123456789"),
    ("AWS_SECRET_ACCESS_KEY", "aws-job-shell-secret-0123456789"),
    ("CI_REGISTRY_PASSWORD", "registry-job-shell-0123456789"),
    ("DEPLOY_TOKEN", "deploy-job-shell-token-0123456789"),
];

/// The kernel's Landlock ABI, or `None` (and why, on stderr).
fn landlock() -> Option<i64> {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION reads no argument.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    if v < 1 {
        eprintln!("skipped: this kernel has no Landlock (the CI machine has it)");
        return None;
    }
    Some(v)
}

/// The directory the agent reports to.
fn seen(sb: &Sandbox) -> PathBuf {
    let dir = sb.root().join("seen");
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// An executable script in the sandbox (its `#!` line included in `body`).
fn script(sb: &Sandbox, name: &str, body: &str) -> String {
    let path = sb.root().join(name);
    fs::write(&path, body).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// A tick with `agent`, free to write `seen/` only.
fn agent_tick(sb: &Sandbox, minute: i64, agent: &str) -> crate::util::Run {
    sb.tick_cmd(&at(minute))
        .args(["--agent", agent, "--agent-sandbox", "require"])
        .arg("--agent-writable")
        .arg(seen(sb))
}

#[test]
fn invariant_26_the_kernel_contains_the_agent_no_secret_from_the_job_shell_or_sentinels_memory() {
    let Some(_) = landlock() else { return };
    let sb = Sandbox::with_files(&["a.js"]);
    let seen = seen(&sb);
    let secrets: Vec<String> = JOB_SECRETS
        .iter()
        .map(|(k, v)| format!("{k:?}: {v:?}"))
        .collect();
    // Every process's environ (the job shell's among them), then every
    // readable mapping of the process whose command line names this state.
    let body = format!(
        r#"#!/usr/bin/env python3
import os
secrets = {{{s}}}
state = {st:?}
out = open({o:?}, "w")
def look(where, data):
    for k, v in secrets.items():
        if v.encode() in data:
            out.write("found %s in %s\n" % (k, where))
def memory(pid):
    mem = open("/proc/%s/mem" % pid, "rb", buffering=0)
    for line in open("/proc/%s/maps" % pid).read().splitlines():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if perms[0] != "r" or hi - lo > (256 << 20):
            continue
        try:
            mem.seek(lo)
            look("memory of %s" % pid, mem.read(hi - lo))
        except OSError:
            pass
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        look("environ of %s" % pid, open("/proc/%s/environ" % pid, "rb").read())
        out.write("read environ of %s\n" % pid)
    except OSError:
        out.write("denied environ of %s\n" % pid)
    try:
        if state.encode() in open("/proc/%s/cmdline" % pid, "rb").read():
            memory(pid)
            out.write("read memory of %s\n" % pid)
    except OSError:
        out.write("denied memory of %s\n" % pid)
out.close()
print({SKIP:?})
"#,
        s = secrets.join(", "),
        st = sb.state.display().to_string(),
        o = seen.join("hunt.txt").display().to_string(),
    );
    let hunt = script(&sb, "hunt.py", &body);
    let mut run = agent_tick(&sb, 0, &hunt).under_bash();
    for (k, v) in JOB_SECRETS {
        run = run.env(k, v);
    }
    let out = run.output();
    expect_code(&out, 10);
    let report = read(&seen.join("hunt.txt"));
    // It tried every process, the job shell and sentinel among them, and
    // found nothing.
    assert!(report.matches("denied environ of").count() >= 2, "{report}");
    assert!(!report.contains("found"), "{report}");
}

#[test]
fn the_agent_is_given_no_secret_named_variable_of_the_job_and_gets_the_one_named() {
    let sb = Sandbox::with_files(&["a.js"]);
    let dump = seen(&sb).join("env.txt");
    let agent = script(
        &sb,
        "env.sh",
        &format!(
            "#!/bin/sh\nenv > '{}'\nprintf '%s' '{SKIP}'\n",
            dump.display()
        ),
    );
    let job = [
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-0123456789"),
        ("CI_REGISTRY_PASSWORD", "registry-password-0123456789"),
        ("DEPLOY_TOKEN", "deploy-token-0123456789"),
        ("GITHUB_PAT", "github-pat-0123456789"),
        ("NPM_AUTH", "npm-auth-0123456789"),
        ("DB_PASSWD", "db-passwd-0123456789"),
        ("GOOGLE_CREDENTIALS", "google-credentials-0123456789"),
        ("OPENAI_API_KEY", "sk-openai-0123456789"),
        ("CI_JOB_TOKEN", "ci-job-token-0123456789"),
    ];
    let mut run = sb
        .tick_cmd(&at(0))
        .args(["--agent", &agent, "--agent-env", "ANTHROPIC_API_KEY"])
        .arg("--agent-writable")
        .arg(seen(&sb))
        .env("ANTHROPIC_API_KEY", "sk-ant-named-0123456789")
        .env("CI_COMMIT_SHA", "0123abcd")
        // A job's git variable that would point the agent's git at the clone.
        .env("GIT_DIR", sb.repo.root.join(".git"));
    for (k, v) in job {
        run = run.env(k, v);
    }
    expect_code(&run.output(), 10);
    let env = read(&dump);
    for (k, v) in job {
        assert!(!env.contains(v), "{k} reached the agent:\n{env}");
    }
    assert!(
        env.contains("ANTHROPIC_API_KEY=sk-ant-named-0123456789"),
        "{env}"
    );
    assert!(env.contains("CI_COMMIT_SHA=0123abcd"), "{env}");
    assert!(!env.contains("GIT_DIR="), "{env}");
}

#[test]
fn writes_to_the_state_the_clones_git_its_work_tree_and_home_all_fail() {
    let Some(_) = landlock() else { return };
    let sb = Sandbox::with_files(&["a.js"]);
    let good = script(
        &sb,
        "good.sh",
        &format!("#!/bin/sh\nprintf '%s' '{SKIP}'\n"),
    );
    expect_code(&agent_tick(&sb, 0, &good).output(), 10);
    fs::create_dir_all(sb.home().join(".ssh")).unwrap();
    let git = sb.repo.root.join(".git");
    let targets: Vec<PathBuf> = vec![
        sb.state.with_file_name("planted"),
        sb.state.clone(),
        sidecar(&sb.state, ".decisions"),
        sb.lock(),
        git.join("config"),
        git.join("hooks/post-checkout"),
        git.join("refs/heads/planted"),
        git.join("objects/planted"),
        git.join("packed-refs"),
        sb.repo.root.join(format!("{WATCHED}/a.js")),
        sb.home().join(".ssh/authorized_keys"),
        // As root, only the kernel stops this one.
        PathBuf::from(format!("/etc/sentinel-planted-{}", std::process::id())),
    ];
    let report = seen(&sb).join("writes.txt");
    let list: Vec<String> = targets
        .iter()
        .map(|t| format!("'{}'", t.display()))
        .collect();
    let body = format!(
        "#!/bin/sh\nfor t in {}; do\n  if ( printf 'planted\\n' >> \"$t\" ) 2>/dev/null; then echo \"wrote $t\"; else echo \"denied $t\"; fi\ndone > '{}'\nprintf '%s' '{SKIP}'\n",
        list.join(" "),
        report.display()
    );
    let hostile = script(&sb, "plant.sh", &body);
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo.commit("edit a");
    let before: Vec<Option<Vec<u8>>> = targets.iter().map(|t| fs::read(t).ok()).collect();
    let out = agent_tick(&sb, 1, &hostile).output();
    expect_code(&out, 12);
    let sandbox = &out.json()["agent_sandbox"];
    assert_eq!(sandbox["sandbox"], "landlock", "{sandbox}");
    let said = read(&report);
    assert_eq!(said.matches("denied").count(), targets.len(), "{said}");
    // What sentinel does not rewrite itself is as it was.
    for (t, b) in targets.iter().zip(before).skip(4) {
        assert_eq!(fs::read(t).ok(), b, "{} changed", t.display());
    }
    let stats = sb.stats();
    assert_eq!(stats["novelty"]["tracked_files"], 1, "{stats}");
}

/// `git -C <dir> args`, its status and its stdout.
fn git(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success(), text)
}

#[test]
fn git_status_diff_and_commit_work_in_the_agents_copy_and_its_objects_stay_there() {
    let Some(_) = landlock() else { return };
    let sb = Sandbox::with_files(&["a.js"]);
    let report = seen(&sb).join("git.txt");
    let body = format!(
        "#!/bin/sh\nexec 3>&1 >> '{r}' 2>&1\nprintf '// edited\\n' >> \"$SENTINEL_FILE\"\n\
         git status --porcelain >/dev/null && echo 'status ok'\n\
         git diff --quiet || echo 'diff ok'\n\
         git add -A && git -c user.name=agent -c user.email=agent@example.invalid commit -qm agent && echo 'commit ok'\n\
         echo \"id $(git rev-parse HEAD)\"\nprintf '%s' '{SKIP}' >&3\n",
        r = report.display()
    );
    // The answer goes to the saved stdout (3); everything else to the report.
    let wrapped = script(&sb, "commit.sh", &body);
    expect_code(&agent_tick(&sb, 0, &wrapped).output(), 10);
    let said = read(&report);
    for step in ["status ok", "diff ok", "commit ok"] {
        assert!(said.contains(step), "{step}:\n{said}");
    }
    let id = said
        .lines()
        .find_map(|l| l.strip_prefix("id "))
        .unwrap()
        .to_string();
    // The agent's commit is its own: the clone's object store never got it.
    let (found, _) = git(&sb.repo.root, &["cat-file", "-e", &id]);
    assert!(
        !found,
        "the agent's commit {id} was written to the clone's objects"
    );
    // And its copy is made ready again for the next run.
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, again\n");
    sb.repo.commit("edit a");
    let out = agent_tick(&sb, 1, &wrapped).output();
    expect_code(&out, 12);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "llm_skip",
        "{}",
        out.stdout
    );
}

#[test]
fn a_sigterm_from_the_agent_never_reaches_sentinel() {
    let Some(abi) = landlock() else { return };
    if abi < 6 {
        eprintln!("skipped: Landlock ABI {abi} does not scope signals (6 does)");
        return;
    }
    let sb = Sandbox::with_files(&["a.js"]);
    let report = seen(&sb).join("kill.txt");
    let pid_file = sb.root().join("sentinel.pid");
    let body = format!(
        "#!/bin/sh\np=$(cat '{}')\n\
         if kill -TERM \"$p\" 2>/dev/null; then echo \"signalled $p\"; else echo \"refused $p\"; fi > '{}'\nprintf '%s' '{SKIP}'\n",
        pid_file.display(),
        report.display()
    );
    let agent = script(&sb, "kill.sh", &body);
    // The gate execs sentinel under its own pid: the agent is told it.
    let mut child = agent_tick(&sb, 0, &agent).spawn_gated();
    fs::write(&pid_file, child.id().to_string()).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = crate::util::Output::wait(child);
    expect_code(&out, 10);
    assert!(read(&report).starts_with("refused"), "{}", read(&report));
}

#[test]
fn require_on_a_kernel_made_to_lack_landlock_exits_1_and_spends_nothing() {
    let sb = Sandbox::with_files(&["a.js"]);
    let ran = sb.root().join("ran");
    let agent = script(
        &sb,
        "agent.sh",
        &format!(
            "#!/bin/sh\ntouch '{}'\nprintf '%s' '{SKIP}'\n",
            ran.display()
        ),
    );
    let no_landlock = |run: crate::util::Run| run.env("SENTINEL_LANDLOCK_ABI_MAX", "0");
    let out = no_landlock(agent_tick(&sb, 0, &agent)).output();
    expect_code(&out, 1);
    assert!(
        out.stderr.contains("--agent-sandbox require") && out.stderr.contains("no Landlock"),
        "{}",
        out.stderr
    );
    assert!(
        !ran.exists() && !sb.state.exists(),
        "the agent ran or a state was written"
    );
    // `auto` runs it as before, and says so once.
    let auto = sb
        .tick_cmd(&at(1))
        .args(["--agent", &agent, "--agent-sandbox", "auto"]);
    let out = no_landlock(auto).output();
    expect_code(&out, 10);
    assert_eq!(
        out.stderr.matches("agent sandbox: off").count(),
        1,
        "{}",
        out.stderr
    );
    assert_eq!(out.json()["agent_sandbox"]["sandbox"], "off");
    assert!(ran.exists());
    // And `stats`, read later, says the agent ran without one, and why.
    let kept = &sb.stats()["llm"]["agent_sandbox"];
    assert_eq!(kept["sandbox"], "off", "{kept}");
    assert!(
        kept["why"].as_str().unwrap().contains("no Landlock"),
        "{kept}"
    );
    let text = sb
        .sentinel(["stats", "--state"])
        .arg(&sb.state)
        .output()
        .stdout;
    assert!(
        text.contains("agent sandbox") && text.contains("off ("),
        "{text}"
    );
}

#[test]
fn stats_says_which_landlock_abi_the_agent_ran_inside_and_how_fully() {
    let Some(abi) = landlock() else { return };
    let sb = Sandbox::with_files(&["a.js"]);
    let agent = script(
        &sb,
        "agent.sh",
        &format!("#!/bin/sh\nprintf '%s' '{SKIP}'\n"),
    );
    expect_code(&agent_tick(&sb, 0, &agent).output(), 10);
    let kept = &sb.stats()["llm"]["agent_sandbox"];
    assert_eq!(kept["sandbox"], "landlock", "{kept}");
    assert_eq!(kept["abi"], abi, "{kept}");
    let fully = if abi >= 6 { "fully" } else { "partly" };
    assert_eq!(kept["enforced"], fully, "{kept}");
    let metrics = sb
        .sentinel(["stats", "--format", "prometheus", "--state"])
        .arg(&sb.state)
        .output()
        .stdout;
    assert!(
        metrics.contains(&format!("sentinel_agent_sandbox_abi {abi}")),
        "{metrics}"
    );
}

#[test]
fn an_env_cleared_setsid_child_of_the_agent_is_gone_after_the_tick() {
    let Some(_) = landlock() else { return };
    let sb = Sandbox::with_files(&["a.js"]);
    let seen = seen(&sb);
    let spawned = seen.join("spawned");
    let c = std::ffi::CString::new(spawned.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let pid_file = seen.join("orphan.pid");
    // No marker (empty environment), no group, no session of the agent's:
    // only sentinel as the subreaper finds it.
    let body = format!(
        "#!/bin/sh\nenv -i setsid /bin/sh -c 'echo $$ > {f}; exec /bin/sleep 300' </dev/null >/dev/null 2>&1 &\n\
         read pid < '{f}'\necho $pid > '{p}'\nprintf '%s' '{SKIP}'\n",
        f = spawned.display(),
        p = pid_file.display()
    );
    let agent = script(&sb, "orphan.sh", &body);
    expect_code(&agent_tick(&sb, 0, &agent).output(), 10);
    let pid = read(&pid_file).trim().to_string();
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"));
    let running = stat.is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    });
    if running {
        // SAFETY: kill(2) on the leftover this test made, so it ends here.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    assert!(
        !running,
        "the env-cleared setsid child {pid} outlived the tick"
    );
}

#[test]
fn an_agent_user_runs_with_its_own_ids_no_groups_and_writes_only_its_copy() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: --agent-user needs root (the CI machine runs as root)");
        return;
    }
    let sb = Sandbox::with_files(&["a.js"]);
    fs::set_permissions(sb.root(), fs::Permissions::from_mode(0o755)).unwrap();
    let seen = seen(&sb);
    fs::set_permissions(&seen, fs::Permissions::from_mode(0o777)).unwrap();
    let state_dir = sb.state.parent().unwrap().to_path_buf();
    let evolve = r#"{"action":"EVOLVE","reason":"named the export","findings":[]}"#;
    let body = format!(
        "#!/bin/sh\ncat > /dev/null\nid -u > '{s}/uid'\nid -G > '{s}/groups'\n\
         grep NoNewPrivs /proc/self/status > '{s}/nnp'\necho \"$HOME\" > '{s}/home'\n\
         ( echo planted > '{st}/planted' ) 2>/dev/null && echo wrote > '{s}/state'\n\
         printf '// a, named\\n' > \"$SENTINEL_FILE\"\nprintf '%s' '{evolve}'\n",
        s = seen.display(),
        st = state_dir.display(),
    );
    let agent = script(&sb, "as-user.sh", &body);
    // No kernel sandbox: the user alone keeps it out of root's files.
    let out = sb
        .tick_cmd(&at(0))
        .args(["--agent", &agent, "--agent-user", "nobody"])
        .args(["--agent-sandbox", "off"])
        .output();
    expect_code(&out, 10);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "evolve",
        "{}",
        out.stdout
    );
    assert_eq!(read(&seen.join("uid")).trim(), "65534");
    assert_eq!(read(&seen.join("groups")).trim(), "65534", "no other group");
    assert!(read(&seen.join("nnp")).contains('1'), "no_new_privs unset");
    assert_eq!(read(&seen.join("home")).trim(), "/nonexistent");
    assert!(!seen.join("state").exists() && !state_dir.join("planted").exists());
    let kept = &sb.stats()["llm"]["agent_sandbox"];
    assert_eq!(kept["user"], "nobody", "{kept}");
    // With the kernel's walls too, where there are any.
    if landlock().is_none() {
        return;
    }
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo.commit("edit a");
    let out = agent_tick(&sb, 1, &agent)
        .args(["--agent-user", "nobody"])
        .output();
    expect_code(&out, 12);
    assert_eq!(
        out.json()["files"][0]["outcome"],
        "evolve",
        "{}",
        out.stdout
    );
    assert_eq!(sb.stats()["llm"]["agent_sandbox"]["sandbox"], "landlock");
}
