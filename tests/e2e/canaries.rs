//! Canary secrets in every variable sentinel reads, echoed back by every
//! peer (GitLab's read and write endpoints, the model, the agent, git): none
//! may reach stdout, stderr, the state and its sidecars, the reports, the
//! dashboard GitLab receives, `stats` or `explain`; and no git process
//! sentinel starts, itself or inside the agent's worktree, sees one.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::gitlab::{Api, Endpoint, PROJECT, Reply};
use crate::util::openai::{self, FakeOpenAi, completion};
use crate::util::{Output, Run, Sandbox, WATCHED, at};

/// Each secret a distinct canary; every one holds `MARK`, so a piece of one
/// cut short is still found.
const MARK: &str = "CANARY";
const GL: &str = "glpat-CANARY-gitlab-7777";
const OA: &str = "sk-CANARY-openai-8888";
const ADMIN: &str = "sk-admin-CANARY-9999";
const JOB: &str = "CANARY-ci-job-token-5555";

/// Every secret variable set to its canary.
fn with_secrets(run: Run) -> Run {
    run.env("SENTINEL_GITLAB_TOKEN", GL)
        .env("GITLAB_TOKEN", GL)
        .env("OPENAI_API_KEY", OA)
        .env("OPENAI_ADMIN_KEY", ADMIN)
        .env("CI_JOB_TOKEN", JOB)
}

#[track_caller]
fn no_canary_in(out: &Output, what: &str) {
    assert!(
        !out.stderr.contains("panicked"),
        "{what}: sentinel panicked:\n{}",
        out.stderr
    );
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !text.contains(MARK),
            "{what}: the {stream} holds a secret:\n{text}"
        );
    }
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Every file sentinel may have written (the state, its sidecars and
/// journals, the reports): all of the sandbox but the repository and the
/// test's own scripts. Returns how many were looked at.
#[track_caller]
fn no_canary_in_files(sb: &Sandbox, skip: &[&Path], what: &str) -> usize {
    let mut all = Vec::new();
    files_under(sb.root(), &mut all);
    let mut seen = 0;
    for file in all {
        if file.starts_with(&sb.repo.root) || skip.iter().any(|s| file.starts_with(s)) {
            continue;
        }
        let text = String::from_utf8_lossy(&fs::read(&file).unwrap()).into_owned();
        assert!(
            !text.contains(MARK),
            "{what}: {} holds a secret:\n{text}",
            file.display()
        );
        seen += 1;
    }
    seen
}

/// GitLab's error shape (`{"message": ...}`) with the token in its words.
fn echo_gitlab(status: u16) -> Reply {
    Reply::json(
        status,
        &json!({"message": format!("{status} Bad request - PRIVATE-TOKEN {GL} is not valid here")}),
    )
}

/// An EVOLVE whose reason and finding carry every secret (a content that
/// carries one is refused, never committed: `hostile_local.rs`).
fn evolve_echoing_secrets() -> openai::Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": format!("rotate {OA} and {GL} ({JOB});\nAuthorization: Bearer {OA}"),
        "findings": [{"line": 1, "severity": "major", "message": format!("hard-coded {ADMIN}")}],
        "content": "// auth\nmodule.exports = 'rotated';\n",
    });
    openai::Reply::json(200, &completion(&answer.to_string(), None))
}

#[test]
fn no_gitlab_or_model_echo_of_a_secret_reaches_any_output_file_or_request() {
    let auth = format!("{WATCHED}/auth.js");
    let sb = Sandbox::new();
    sb.repo.write(&auth, "// auth\nmodule.exports = 1;\n");
    sb.repo.write(
        &format!("{WATCHED}/session.js"),
        "// session\nmodule.exports = 2;\n",
    );
    sb.repo.commit("two files");
    let gl = sb.gitlab();
    gl.require_token(Some(GL));
    let api = Api {
        token: Some(GL.into()),
        ..Api::new(&gl)
    };
    let ai = FakeOpenAi::start();
    let report = sb.root().join("run").join("gl-code-quality-report.json");
    let tick = |minute: i64| {
        with_secrets(sb.api_tick_cmd(&api, &at(minute)))
            .args(["--fake-sleep", "--llm-url", &ai.base_url()])
            .args(["--propose", "patches", "--dashboard", "--codequality"])
            .arg(&report)
            .output()
    };
    let mut version = 1;
    let mut change = || {
        version += 1;
        sb.repo
            .write(&auth, format!("// auth\nmodule.exports = {version};\n"));
        sb.repo.commit(&format!("auth v{version}"));
    };
    let mut outputs = Vec::new();

    // The listing answers 500 echoing the token: the first run lists nothing.
    gl.push(Endpoint::Tree, echo_gitlab(500));
    outputs.push(("a listing that echoes the token", tick(0)));
    // A full first run: the model answers with every secret in its reason,
    // findings and content; the first patch commit is refused with a 400
    // that echoes the token, the second goes through, the dashboard is created.
    ai.answer_always(evolve_echoing_secrets());
    gl.push(Endpoint::CreateCommit, echo_gitlab(400));
    let first = tick(2);
    let writes = first.json()["writes"].to_string();
    assert!(writes.contains("GitLab refused the patch (400"), "{writes}");
    assert!(
        writes.contains("***"),
        "the echo is there, redacted: {writes}"
    );
    outputs.push(("a patch commit refused with the token echoed", first));
    // The head lookup answers 500 echoing the token.
    gl.push(Endpoint::Commits, echo_gitlab(500));
    outputs.push(("a head lookup that echoes the token", tick(4)));
    // A change: the compare, a blob read and the dashboard update each
    // answer with the token echoed, and the model with its key.
    change();
    gl.push(Endpoint::Compare, echo_gitlab(500));
    gl.push(Endpoint::Issue, echo_gitlab(400));
    outputs.push((
        "a compare and a dashboard update echoing the token",
        tick(6),
    ));
    // A change whose read answers 500 echoing the token.
    change();
    gl.push(Endpoint::BlobRaw, echo_gitlab(500));
    outputs.push(("a blob read echoing the token", tick(8)));
    // The model refuses the key, echoing it (and the admin key).
    let bad_key =
        openai::fixture_text("bad-key.json").replace("sk-VKMI***wjh3", &format!("{OA} ({ADMIN})"));
    ai.answer_always(openai::Reply::Fixed {
        status: 401,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: bad_key.into_bytes(),
    });
    let refused = tick(10);
    assert!(refused.stdout.contains("auth"), "{}", refused.stdout);
    outputs.push(("a model error echoing the keys", refused));
    assert_eq!(gl.queued(), 0, "every echoing reply was asked for");

    for format in ["table", "json", "prometheus"] {
        let out = with_secrets(sb.sentinel(["stats", "--format", format, "--state"]))
            .arg(&sb.state)
            .output();
        expect_code(&out, 0);
        outputs.push(("stats", out));
    }
    for json in [false, true] {
        let mut run = with_secrets(sb.sentinel(["explain", &auth, "--source", "gitlab"]))
            .args(["--gitlab-url", &api.url, "--project", PROJECT])
            .args(["--branch", "main", "--path", WATCHED])
            .arg("--state")
            .arg(&sb.state);
        if json {
            run = run.arg("--json");
        }
        let out = run.output();
        expect_code(&out, 0);
        outputs.push(("explain", out));
    }
    for (what, out) in &outputs {
        no_canary_in(out, what);
    }
    assert!(no_canary_in_files(&sb, &[], "the GitLab day") >= 2);
    assert!(
        fs::read_to_string(&report)
            .unwrap()
            .contains("hard-coded ***")
    );

    // What GitLab received: patch commits, dashboard writes.
    let writes: Vec<_> = gl
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(
        writes.iter().any(|r| r.endpoint == Endpoint::Commits)
            && writes.iter().any(|r| r.endpoint == Endpoint::Issues),
        "a patch and a dashboard were sent"
    );
    for r in &writes {
        let body = String::from_utf8_lossy(&r.body);
        assert!(!body.contains(MARK), "{} {}: {body}", r.method, r.target);
    }
    let issues = Value::Array(gl.issues()).to_string();
    assert!(issues.contains("sentinel"), "{issues}");
    assert!(!issues.contains(MARK), "{issues}");
    // The key did travel where it belongs: in the header of the model's requests.
    assert!(
        ai.requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {OA}")))
    );
}

/// An executable script in the sandbox, outside the repository.
fn script(sb: &Sandbox, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = sb.root().join("scripts").join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// An agent handed secrets with `--agent-env` that prints its environment
/// and echoes them everywhere: an EVOLVE for `a.js` whose reason, findings
/// and edit carry them, and a failure for `b.js` with its environment on
/// stdout and the key on stderr.
const LEAKY_AGENT: &str = r#"cat > /dev/null
env >&2
case "$SENTINEL_FILE" in
*a.js)
  printf '// a %s\n' "$SENTINEL_GITLAB_TOKEN" > "$SENTINEL_FILE"
  printf '{"action":"EVOLVE","reason":"saw %s and %s","findings":[{"line":1,"severity":"major","message":"token %s"}]}' \
    "$OPENAI_ADMIN_KEY" "$SENTINEL_GITLAB_TOKEN" "$SENTINEL_GITLAB_TOKEN"
  ;;
*)
  env
  echo "Authorization: Bearer $OPENAI_ADMIN_KEY" >&2
  exit 3
  ;;
esac
"#;

#[test]
fn an_agent_that_prints_the_secrets_it_was_given_leaks_none_of_them() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let agent = script(&sb, "agent.sh", LEAKY_AGENT);
    let page = sb.root().join("run").join("dashboard.md");
    let report = sb.root().join("run").join("gl-code-quality-report.json");
    let tick = |minute: i64| {
        with_secrets(sb.tick_cmd(&at(minute)))
            .args(["--agent", agent.to_str().unwrap()])
            .args(["--agent-env", "OPENAI_ADMIN_KEY,SENTINEL_GITLAB_TOKEN"])
            .arg("--dashboard-file")
            .arg(&page)
            .arg("--codequality")
            .arg(&report)
            .output()
    };
    let out = tick(0);
    expect_code(&out, 10);
    let json = out.json();
    assert!(json["writes"].to_string().contains("\"patch\""), "{json}");
    no_canary_in(&out, "an agent echoing its secrets");
    let mut outputs = vec![sb.explain(&format!("{WATCHED}/a.js"), false)];
    outputs.push(sb.explain(&format!("{WATCHED}/a.js"), true));
    for format in ["table", "json", "prometheus"] {
        outputs.push(
            with_secrets(sb.sentinel(["stats", "--format", format, "--state"]))
                .arg(&sb.state)
                .output(),
        );
    }
    for out in &outputs {
        expect_code(out, 0);
        no_canary_in(out, "stats and explain after the agent");
    }
    let scripts = sb.root().join("scripts");
    assert!(no_canary_in_files(&sb, &[&scripts], "the agent's tick") >= 3);
    assert!(fs::read_to_string(&page).unwrap().contains("***"));
    // Its edit carries a secret: refused, never committed with the secret
    // edited out.
    assert!(
        json["notes"]
            .to_string()
            .contains("carries the value of a secret sentinel holds"),
        "{json}"
    );
    let sandbox = sb.repo.git(&["branch", "--list", "sentinel-sandbox"]);
    assert_eq!(sandbox, "", "nothing was committed");
}

#[test]
fn a_git_error_that_echoes_a_token_is_redacted() {
    let mut sb = Sandbox::with_files(&["a.js"]);
    // A credential in a remote URL, as a failing git prints it.
    sb.fake_git_log(&format!(
        "echo \"fatal: unable to access 'https://gitlab-ci-token:{JOB}@gitlab.example/g/p.git/': token {GL}\" >&2; exit 128"
    ));
    let out = with_secrets(sb.tick_cmd(&at(0)))
        .args(["--llm", "off"])
        .output();
    assert!(out.stderr.contains("***"), "{}", out.stderr);
    no_canary_in(&out, "a git error echoing the token");
    let fakebin = sb.root().join("fakebin");
    no_canary_in_files(&sb, &[&fakebin], "a git error echoing the token");
}

/// A `git` first on PATH that appends its arguments and environment to
/// `log`, then runs the real git.
fn git_env_logger(sb: &mut Sandbox) -> PathBuf {
    let real = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH");
    let log = sb.root().join("git-env.log");
    sb.stub(
        "git",
        &format!(
            "{{ echo \"ARGS $*\"; env; }} >> '{}'\nexec '{}' \"$@\"",
            log.display(),
            real.display()
        ),
    );
    log
}

#[test]
fn no_git_process_sentinel_starts_sees_its_secrets() {
    let mut sb = Sandbox::with_files(&["a.js", "b.js"]);
    let log = git_env_logger(&mut sb);
    // A tick on the local clone, every secret set; a clone gix declines (a
    // partial clone's promisor remote), so that its lookups run git.
    sb.repo.git(&["config", "remote.origin.promisor", "true"]);
    let out = with_secrets(sb.tick_cmd(&at(0)))
        .args(["--llm", "off"])
        .output();
    expect_code(&out, 10);
    let seen = fs::read_to_string(&log).unwrap();
    assert!(seen.contains("ARGS "), "git was run: {seen}");
    assert!(seen.contains("HOME=") && seen.contains("PATH="), "{seen}");
    assert!(!seen.contains(MARK), "a git child saw a secret:\n{seen}");

    // An agent in its working copy, committing to the sandbox branch; it runs
    // git itself too.
    fs::remove_file(&log).unwrap();
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a v2\nmodule.exports = 2;\n");
    sb.repo.commit("a v2");
    let agent = script(
        &sb,
        "agent.sh",
        "cat > /dev/null\ngit status --short > /dev/null\nprintf '// edited\\n' > \"$SENTINEL_FILE\"\n\
         printf '{\"action\":\"EVOLVE\",\"reason\":\"edited\",\"findings\":[]}'\n",
    );
    let out = with_secrets(sb.tick_cmd(&at(2)))
        .args(["--agent", agent.to_str().unwrap()])
        .output();
    expect_code(&out, 12);
    assert!(out.json()["writes"].to_string().contains("\"patch\""));
    let seen = fs::read_to_string(&log).unwrap();
    for call in ["ARGS -C", "ARGS status --short"] {
        assert!(seen.contains(call), "{call} was logged: {seen}");
    }
    assert!(
        seen.contains("sentinel-agent-copy-"),
        "the agent's working copy: {seen}"
    );
    assert!(!seen.contains(MARK), "a git child saw a secret:\n{seen}");
}

/// The OpenAI Admin API (`sentinel costs`) refusing the admin key, and a
/// failing server, each with every secret in its words, glued to
/// punctuation so that no masking of `sk-` words catches them: no canary on
/// stdout or stderr, and none in any file.
#[test]
fn an_admin_api_echo_of_the_keys_reaches_no_output() {
    use crate::util::admin::{self, FakeAdmin};
    let sb = Sandbox::with_files(&["a.js"]);
    let out = with_secrets(sb.tick_cmd(&at(0)))
        .args(["--llm", "off"])
        .output();
    expect_code(&out, 10);
    for (status, file) in [
        (401, "admin-401.json"),
        (403, "admin-403.json"),
        (500, "server-500.json"),
    ] {
        let mut body: Value = serde_json::from_str(&admin::fixture_text(file)).unwrap();
        body["error"]["message"] = json!(format!(
            "Incorrect API key provided: ({ADMIN}), token={GL}, job {JOB}, also [{OA}]"
        ));
        let fake = FakeAdmin::start();
        fake.answer_always(admin::Reply::Fixed {
            status,
            body: serde_json::to_vec(&body).unwrap(),
        });
        let what = format!("the Admin API answering {status}");
        let out = with_secrets(sb.costs_cmd(&fake, "2026-06-16T12:00:00Z")).output();
        assert_ne!(out.code, 0, "{what}: {}", out.stderr);
        assert!(!fake.requests().is_empty(), "{what}: no request was made");
        no_canary_in(&out, &what);
        no_canary_in_files(&sb, &[], &what);
    }
}
