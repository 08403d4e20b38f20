//! Redaction that never corrupts data, and local files that cannot hang,
//! lock out or flood sentinel: a secret is masked in words and refused in
//! content, never edited out of code or a path; a FIFO, a foreign lock, a
//! huge sidecar or a manifest that lies about its size ends a tick with
//! exit 1 naming the file, never a hang or an abort.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::expect_code;
use crate::util::openai::{FakeOpenAi, KEY, Reply, completion};
use crate::util::{Output, Sandbox, WATCHED, at};

/// Human code that a header rule applied to content used to rewrite.
const HUMAN_CODE: &str = "const h = {\n    Authorization: `Bearer ${token}`,\n};\nconst c = \"PRIVATE-TOKEN: $GITLAB_TOKEN\";\nAuthorization: `Bearer ${token}`\n";

fn evolve_with(content: &str) -> Reply {
    let answer = json!({
        "action": "EVOLVE",
        "reason": "add a comment",
        "findings": [],
        "content": content,
    });
    Reply::json(200, &completion(&answer.to_string(), None))
}

fn patch_tick(sb: &Sandbox, ai: &FakeOpenAi, minute: i64, key: &str) -> Output {
    sb.tick_cmd(&at(minute))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches"])
        .env("OPENAI_API_KEY", key)
        .output()
}

#[test]
fn the_patch_keeps_an_authorization_template_line_byte_for_byte() {
    let sb = Sandbox::new();
    let file = format!("{WATCHED}/client.js");
    sb.repo.write(&file, HUMAN_CODE);
    sb.repo.commit("client");
    let ai = FakeOpenAi::start();
    let proposed = format!("{HUMAN_CODE}// reviewed\n");
    ai.answer_always(evolve_with(&proposed));
    let out = patch_tick(&sb, &ai, 0, KEY);
    expect_code(&out, 10);
    let committed = sb
        .repo
        .git(&["cat-file", "blob", &format!("sentinel-sandbox:{file}")]);
    assert_eq!(format!("{committed}\n"), proposed);
}

#[test]
fn a_content_carrying_a_secret_is_refused_with_a_note_not_altered() {
    let sb = Sandbox::with_files(&["a.js"]);
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with(&format!("// a\nconst key = '{KEY}';\n")));
    let out = patch_tick(&sb, &ai, 0, KEY);
    expect_code(&out, 10);
    let r = out.json();
    let notes = r["notes"].to_string();
    assert!(
        notes.contains("carries the value of a secret sentinel holds"),
        "{notes}"
    );
    assert!(!out.stdout.contains(KEY), "{}", out.stdout);
    let branch = sb.repo.git(&["branch", "--list", "sentinel-sandbox"]);
    assert_eq!(branch, "", "nothing was committed");
    for f in [
        sb.state.clone(),
        crate::util::sidecar(&sb.state, ".decisions"),
    ] {
        if let Ok(text) = fs::read_to_string(&f) {
            assert!(!text.contains(KEY), "{}: {text}", f.display());
        }
    }
}

#[test]
fn explain_finds_a_path_spelled_like_a_placeholder_key() {
    let sb = Sandbox::new();
    let file = format!("{WATCHED}/lm-studio/client.js");
    sb.repo.write(&file, "// client\nmodule.exports = 1;\n");
    sb.repo.commit("client");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::skip("fine as it is"));
    let tick = |minute: i64| {
        sb.tick_cmd(&at(minute))
            .args(["--fake-sleep", "--llm-url", &ai.base_url()])
            .env("OPENAI_API_KEY", "lm-studio")
            .output()
    };
    let first = tick(0);
    expect_code(&first, 10);
    assert!(first.stdout.contains(&file), "{}", first.stdout);
    let explained = sb
        .sentinel(["explain", &file, "--json", "--path", WATCHED])
        .arg("--repo")
        .arg(&sb.repo.root)
        .arg("--state")
        .arg(&sb.state)
        .env("OPENAI_API_KEY", "lm-studio")
        .output();
    expect_code(&explained, 0);
    let e = explained.json();
    assert_eq!(e["path"], file.as_str(), "{e}");
    assert_eq!(e["last_decision"]["outcome"], "llm_skip", "{e}");
    assert!(e["remembered_fingerprint"].is_string(), "{e}");
}

// ---------------------------------------------------------------------------
// Local files that cannot hang, lock out or flood a tick
// ---------------------------------------------------------------------------

/// How long a tick may take before the watchdog calls it hung: far more
/// than any tick of these tests needs, far less than forever.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Wait for `child` on another thread; a child still running after
/// `WATCHDOG` is killed and the test fails naming `what`.
pub(crate) fn within_watchdog(child: Child, what: &str) -> Output {
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(out) => Output::from(out.expect("wait for sentinel")),
        Err(_) => {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what}: sentinel still runs after {WATCHDOG:?}: it hangs");
        }
    }
}

fn mkfifo(path: &Path) {
    let _ = fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
}

#[track_caller]
fn fails_naming(out: &Output, path: &Path, what: &str) {
    assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
    expect_code(out, 1);
    let named = format!("`{}`", path.display());
    assert!(out.stderr.contains(&named), "{what}: {}", out.stderr);
}

#[test]
fn a_fifo_at_the_lock_fails_the_tick_within_seconds() {
    let sb = Sandbox::with_files(&["a.js"]);
    fs::create_dir_all(sb.state.parent().unwrap()).unwrap();
    mkfifo(&sb.lock());
    let out = within_watchdog(sb.tick_cmd(&at(0)).spawn(), "a FIFO at the lock");
    fails_naming(&out, &sb.lock(), "a FIFO at the lock");
    assert!(out.stderr.contains("FIFO"), "{}", out.stderr);
    assert!(!sb.state.exists(), "nothing was written");
}

/// git and gix open a clone's config and refs without `O_NONBLOCK`: a FIFO
/// planted at one of them would hold every tick (the scope's own read of
/// the config, then gix, then git). Each one fails the tick within seconds,
/// naming the file, and the clone works again once it is restored.
#[test]
fn a_fifo_in_the_clones_git_directory_fails_the_tick_within_seconds_naming_it() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let git = sb.repo.root.join(".git");
    let branch = sb.repo.git(&["symbolic-ref", "--short", "HEAD"]);
    let planted = [
        git.join("config"),
        git.join("refs/heads").join(branch.trim()),
        git.join("packed-refs"),
    ];
    for (i, path) in planted.iter().enumerate() {
        let kept = fs::read(path).ok();
        mkfifo(path);
        let out = within_watchdog(
            sb.tick_cmd(&at(60 * (i as i64 + 1))).spawn(),
            "a FIFO in .git",
        );
        fails_naming(&out, path, "a FIFO in the clone's git directory");
        fs::remove_file(path).unwrap();
        if let Some(bytes) = kept {
            fs::write(path, bytes).unwrap();
        }
    }
    expect_code(&sb.tick(&at(600), &[]), 0);
}

#[test]
fn a_fifo_at_a_sidecar_or_a_shard_fails_within_seconds_naming_it() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let noops = sb.journal();
    let start = crate::util::sidecar(&sb.state, ".start");
    let shard = crate::util::layout::shard_paths(&sb.state).pop().unwrap();
    let stats = || {
        sb.sentinel(["stats", "--json", "--state"])
            .arg(&sb.state)
            .spawn()
    };
    mkfifo(&noops);
    let out = within_watchdog(sb.tick_cmd(&at(2)).spawn(), "a no-op appending to a FIFO");
    fails_naming(&out, &noops, "a no-op appending to a FIFO journal");
    let out = within_watchdog(stats(), "stats reading a FIFO journal");
    fails_naming(&out, &noops, "stats reading a FIFO journal");
    fs::remove_file(&noops).unwrap();
    mkfifo(&start);
    let triggered = sb.tick_cmd(&at(4)).args(["--trigger", "push"]).spawn();
    let out = within_watchdog(triggered, "a triggered tick reading a FIFO start");
    fails_naming(&out, &start, "a triggered tick reading a FIFO start");
    let _ = fs::remove_file(&start);
    mkfifo(&shard);
    let out = within_watchdog(stats(), "stats reading a FIFO shard");
    fails_naming(&out, &shard, "stats reading a FIFO shard");
    mkfifo(&sb.state);
    let out = within_watchdog(sb.tick_cmd(&at(6)).spawn(), "a FIFO at the state");
    fails_naming(&out, &sb.state, "a tick reading a FIFO state");
}

/// Run `sh -c script` as `nobody`: its first stdout line tells whether it
/// got as far as `echo`; it then waits on its stdin until dropped.
fn as_nobody(script: &str) -> Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["sh", "-c", script])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run setpriv (util-linux); install it to run this test as root")
}

fn first_line(child: &mut Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    let out = child.stdout.as_mut().unwrap();
    let _ = std::io::BufReader::new(out).read_line(&mut line);
    line.trim().to_string()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn nobody_cannot_make_a_tick_exit_20() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!(
            "skipped: becoming `nobody` needs root; the lock's mode is checked by the unit tests"
        );
        return;
    }
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let run = sb.state.parent().unwrap().to_path_buf();
    // A shared directory: everyone may look, as in a group's state directory.
    set_mode(sb.root(), 0o755);
    set_mode(&run, 0o755);
    let lock = sb.lock().display().to_string();
    let hold = format!("exec flock -x -n '{lock}' sh -c 'echo held; exec cat'");
    let mut holder = as_nobody(&hold);
    let held = first_line(&mut holder);
    let out = sb.tick(&at(2), &[]);
    drop(holder.stdin.take());
    let _ = holder.wait();
    assert_ne!(held, "held", "nobody took the owner's lock");
    expect_code(&out, 0);
    // A lock planted by nobody in a directory anyone may write to.
    set_mode(&run, 0o1777);
    fs::remove_file(sb.lock()).unwrap();
    let mut holder = as_nobody(&hold);
    assert_eq!(first_line(&mut holder), "held");
    let before = fs::read(&sb.state).unwrap();
    let out = sb.tick(&at(4), &[]);
    drop(holder.stdin.take());
    let _ = holder.wait();
    fails_naming(&out, &sb.lock(), "a lock planted by nobody");
    assert!(
        out.stderr.contains("belongs to user 65534"),
        "{}",
        out.stderr
    );
    assert_eq!(fs::read(&sb.state).unwrap(), before);
}

#[test]
fn a_lock_others_may_write_is_refused() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(sb.lock()).unwrap().permissions().mode() & 0o777,
        0o600
    );
    set_mode(&sb.lock(), 0o666);
    let out = sb.tick(&at(2), &[]);
    fails_naming(&out, &sb.lock(), "a lock writable by others");
    assert!(out.stderr.contains("chmod 600"), "{}", out.stderr);
}

/// The manifest with its layout's record count set to `records`.
fn claim_records(state: &Path, records: u64) {
    let text = fs::read_to_string(state).unwrap();
    let at = text.find("\"records\":").expect("a layout") + "\"records\":".len();
    let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
    fs::write(state, format!("{}{records}{}", &text[..at], &text[end..])).unwrap();
}

#[test]
fn a_manifest_claiming_ten_to_the_fifteen_records_is_exit_1_damaged_state() {
    for records in [1_000_000_000_000_000, 1_000_000_000] {
        let sb = Sandbox::with_files(&["a.js", "b.js"]);
        expect_code(&sb.tick(&at(0), &[]), 10);
        claim_records(&sb.state, records);
        let before = fs::read(&sb.state).unwrap();
        sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
        sb.repo.commit("edit");
        let wake = sb.tick(&at(2), &[]);
        let stats = sb
            .sentinel(["stats", "--json", "--state"])
            .arg(&sb.state)
            .output();
        for (out, what) in [(wake, "a wake"), (stats, "stats")] {
            fails_naming(&out, &sb.state, what);
            assert!(
                out.stderr.contains("damaged state: "),
                "{what}: {}",
                out.stderr
            );
            assert!(out.stderr.contains(&records.to_string()), "{}", out.stderr);
        }
        assert_eq!(
            fs::read(&sb.state).unwrap(),
            before,
            "the state is untouched"
        );
    }
}

/// `path` made a sparse file of `len` bytes: large, yet nothing on disk.
fn sparse(path: &Path, len: u64) {
    let _ = fs::remove_file(path);
    fs::File::create(path).unwrap().set_len(len).unwrap();
}

#[test]
fn an_oversized_shard_or_noop_journal_is_refused_unread() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let noops = sb.journal();
    sparse(&noops, 200 << 20);
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo.commit("edit");
    let out = sb.tick(&at(2), &[]);
    fails_naming(&out, &noops, "a 200 MB no-op journal");
    assert!(out.stderr.contains("bytes, over the"), "{}", out.stderr);
    fs::remove_file(&noops).unwrap();
    let shard = crate::util::layout::shard_paths(&sb.state).pop().unwrap();
    sparse(&shard, 200 << 20);
    let out = sb
        .sentinel(["stats", "--json", "--state"])
        .arg(&sb.state)
        .output();
    fails_naming(&out, &shard, "a 200 MB shard");
    assert!(out.stderr.contains("bytes, over the"), "{}", out.stderr);
}

// ---------------------------------------------------------------------------
// Temporary files of patch commits
// ---------------------------------------------------------------------------

fn real_git() -> std::path::PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .expect("git on PATH")
}

fn indexes_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sentinel-index-"))
        .collect()
}

#[test]
fn a_patch_commit_killed_mid_way_leaves_nothing_in_the_temp_dir_and_its_index_is_swept() {
    use std::os::unix::process::ExitStatusExt;
    let mut sb = Sandbox::with_files(&["a.js"]);
    let tmp = sb.root().join("tmp");
    fs::create_dir_all(&tmp).unwrap();
    let ai = FakeOpenAi::start();
    ai.answer_always(evolve_with("// a, proposed\n"));
    // A git that kills sentinel once the private index exists.
    sb.stub(
        "git",
        &format!(
            "for a in \"$@\"; do [ \"$a\" = update-index ] && kill -9 $PPID && exit 1; done\nexec '{}' \"$@\"",
            real_git().display()
        ),
    );
    let killed = sb
        .tick_cmd(&at(0))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches"])
        .env("OPENAI_API_KEY", KEY)
        .env("TMPDIR", &tmp)
        .spawn()
        .wait_with_output()
        .unwrap();
    assert_eq!(killed.status.signal(), Some(9), "the commit was killed");
    assert_eq!(
        indexes_in(&tmp),
        Vec::<String>::new(),
        "left in the temp dir"
    );
    let git_dir = sb.repo.root.join(".git");
    assert_eq!(
        indexes_in(&git_dir).len(),
        1,
        "the index lived in the git dir"
    );
    sb.real_git();
    let sb = sb;
    ai.answer_always(evolve_with("// a, proposed again\n"));
    let out = sb
        .tick_cmd(&at(2))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--propose", "patches"])
        .env("OPENAI_API_KEY", KEY)
        .env("TMPDIR", &tmp)
        .output();
    assert!(out.stdout.contains("\"kind\":\"patch\""), "{}", out.stdout);
    assert_eq!(indexes_in(&git_dir), Vec::<String>::new(), "not swept");
    assert_eq!(indexes_in(&tmp), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// What GitLab names: paths, pages behind `user:password@`, TLS
// ---------------------------------------------------------------------------

const HOSTILE_PATHS: [&str; 5] = [
    "../../../../etc/x_auth.js",
    "/etc/passwd_auth.js",
    "src/auth/./x.js",
    "src/auth//y.js",
    "src/auth/\u{1b}[2Jz.js",
];

fn tree_item(path: &str, id: &str) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    json!({"id": id, "name": name, "type": "blob", "path": path, "mode": "100644"})
}

#[track_caller]
fn refused_and_named(r: &Value) {
    let listed: Vec<&str> = r["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    for bad in HOSTILE_PATHS {
        assert!(!listed.contains(&bad), "{bad} was judged: {listed:?}");
    }
    let notes = r["notes"].to_string();
    assert!(notes.contains("../../../../etc/x_auth.js"), "{notes}");
    assert!(notes.contains("src/auth//y.js"), "{notes}");
    assert!(notes.contains("has a `..` segment"), "{notes}");
    assert!(!notes.contains('\u{1b}'), "the escape is escaped: {notes}");
}

#[test]
fn gitlab_tree_and_compare_paths_that_climb_or_are_absolute_are_never_judged() {
    use crate::util::gitlab::{Api, Endpoint, Reply as GlReply};
    let sb = Sandbox::new();
    sb.repo.write("src/auth.js", "// auth\n");
    sb.repo.commit("auth");
    let gl = sb.gitlab();
    let api = Api {
        path: None,
        ..Api::new(&gl)
    };
    let fake = "0123456789abcdef0123456789abcdef01234567";
    let mut tree = vec![tree_item("src/auth.js", &sb.repo.blob("src/auth.js"))];
    tree.extend(HOSTILE_PATHS.iter().map(|p| tree_item(p, fake)));
    gl.push(Endpoint::Tree, GlReply::json(200, &Value::Array(tree)));
    let first = sb.api_tick_cmd(&api, &at(0)).output();
    expect_code(&first, 10);
    let r = first.json();
    refused_and_named(&r);
    assert!(r["files"].to_string().contains("src/auth.js"), "{r}");
    // A compare naming the same paths: the real change is judged, they are not.
    sb.repo.write("src/auth.js", "// auth v2\n");
    let to = sb.repo.commit("auth v2");
    let diffs: Vec<Value> = std::iter::once("src/auth.js")
        .chain(HOSTILE_PATHS)
        .map(|p| json!({"old_path": p, "new_path": p, "b_mode": "100644"}))
        .collect();
    gl.push(
        Endpoint::Compare,
        GlReply::json(200, &json!({"commits": [{"id": to}], "diffs": diffs})),
    );
    let second = sb.api_tick_cmd(&api, &at(2)).output();
    expect_code(&second, 12);
    let r = second.json();
    refused_and_named(&r);
    assert!(r["files"].to_string().contains("src/auth.js"), "{r}");
}

#[test]
fn a_gitlab_url_with_user_and_password_lists_every_page() {
    use crate::util::gitlab::Api;
    let sb = Sandbox::new();
    for i in 0..250 {
        sb.repo
            .write(&format!("{WATCHED}/f{i:03}.js"), format!("// f{i}\n"));
    }
    sb.repo.commit("250 files");
    let gl = sb.gitlab();
    let mut api = Api::new(&gl);
    api.url = api
        .url
        .replacen("http://", "http://sentinel:pw-s3cret-42@", 1);
    let out = sb.api_tick_cmd(&api, &at(0)).output();
    expect_code(&out, 10);
    let r = out.json();
    assert_eq!(r["requests_by_kind"]["list"], 3, "{r}");
    assert!(!r["notes"].to_string().contains("incomplete"), "{r}");
    let doc = crate::util::layout::state_doc(&sb.state);
    assert_eq!(doc["files"].as_object().unwrap().len(), 250);
    for text in [&out.stdout, &out.stderr] {
        assert!(!text.contains("pw-s3cret-42"), "{text}");
    }
    // The listing was complete and the archive brought every file: the
    // next tick is a no-op, not another first run.
    expect_code(&sb.api_tick_cmd(&api, &at(2)).output(), 0);
}

#[test]
fn a_tls_failure_names_the_host_the_reason_and_ca_file() {
    use crate::util::gitlab::Api;
    // A peer that answers a TLS handshake with plain HTTP.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    let mut api = Api::new(&gl);
    api.url = format!("https://127.0.0.1:{port}/api/v4");
    let out = sb.api_tick_cmd(&api, &at(0)).output();
    expect_code(&out, 1);
    let line = out.stderr_line();
    assert!(line.contains(&format!("`127.0.0.1:{port}`")), "{line}");
    assert!(line.contains("TLS"), "{line}");
    assert!(line.contains("--ca-file"), "{line}");
    assert!(!line.contains("(invalid data)"), "{line}");
}

// ---------------------------------------------------------------------------
// What people read: the dashboard, `--json`, bidi and separator controls
// ---------------------------------------------------------------------------

/// The HTML a real CommonMark+GFM renderer (cmarkgfm, installed by `.ci/run`
/// under `target/ci-tools/`) makes of `markdown`. `None` (said on stderr)
/// when it is not installed, so a plain `cargo test` on a fresh machine
/// passes; `.ci/run` sets `SENTINEL_REQUIRE_RENDERER`, where a missing
/// renderer fails the test instead of skipping it.
fn render_gfm(markdown: &str) -> Option<String> {
    use std::io::Write;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/ci-tools/py/bin/python");
    if !python.is_file() {
        let how = "python3 -m venv target/ci-tools/py && \
                   target/ci-tools/py/bin/pip install cmarkgfm==2025.10.22";
        if std::env::var_os("SENTINEL_REQUIRE_RENDERER").is_some() {
            panic!("the CommonMark+GFM renderer is not installed: run `{how}` (as .ci/run does)");
        }
        eprintln!("skipped: the CommonMark+GFM renderer is not installed (`{how}`)");
        return None;
    }
    let mut child = Command::new(python)
        .arg(root.join("tests/util/render_gfm.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the renderer");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(markdown.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the renderer failed");
    Some(String::from_utf8(out.stdout).unwrap())
}

/// `html` without its `<code>` elements, where nothing is linked or mentioned.
fn outside_code(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(start) = rest.find("<code>") {
        out.push_str(&rest[..start]);
        rest = match rest[start..].find("</code>") {
            Some(end) => &rest[start + end + "</code>".len()..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The text of `html`, its tags taken out.
fn without_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// Text a hostile model sends for the dashboard: links, an image, bare
/// URLs, a `www.` host, an address and mentions.
const HOSTILE_WORDS: &str = "fix [here](https://evil.example/a) ![p](https://evil.example/p.png) \
    see https://evil.example/b or www.evil.example, mail a@evil.example, @all @alice \
    <a href=\"https://evil.example/c\">c</a> `x` **y**";

#[test]
fn the_dashboard_html_has_no_link_image_or_mention_from_peer_text() {
    let sb = Sandbox::new();
    let spelled = [
        format!("{WATCHED}/a`[x](evil.example)`.js"),
        format!("{WATCHED}/b``@all``.js"),
        format!("{WATCHED}/c\\|[l](www.evil.example).js"),
    ];
    for p in &spelled {
        sb.repo.write(p, "// x\nmodule.exports = 1;\n");
    }
    sb.repo.commit("names");
    let ai = FakeOpenAi::start();
    ai.answer_always(Reply::evolve(
        HOSTILE_WORDS,
        json!([{"line": 1, "severity": "major", "message": HOSTILE_WORDS}]),
    ));
    let page = sb.root().join("run").join("dashboard.md");
    let out = sb
        .tick_cmd(&at(0))
        .args(["--fake-sleep", "--llm-url", &ai.base_url()])
        .args(["--project-url", "https://gitlab.example.com/group/project"])
        .arg("--dashboard-file")
        .arg(&page)
        .env("OPENAI_API_KEY", KEY)
        .output();
    expect_code(&out, 10);
    let markdown = fs::read_to_string(&page).unwrap();
    let Some(html) = render_gfm(&markdown) else {
        return;
    };
    let outside = outside_code(&html);
    assert!(!outside.contains("<img"), "{html}");
    let words = without_tags(&outside);
    assert!(!words.contains("evil.example"), "{words}");
    assert!(!words.contains('@'), "a mention outside code: {words}");
    // The only links are sentinel's own, to the findings' lines.
    for (i, _) in html.match_indices("<a ") {
        assert!(
            html[i..].starts_with("<a href=\"https://gitlab.example.com/group/project/-/blob/"),
            "{}",
            &html[i..html.len().min(i + 120)]
        );
    }
    // Each path is one code span, spelled as it is.
    for p in &spelled {
        let shown = p.replace('&', "&amp;").replace('<', "&lt;");
        assert!(
            html.contains(&format!("<code>{shown}</code>")),
            "{p} is not one code span: {html}"
        );
    }
}

#[test]
fn json_and_explain_carry_no_raw_bidi_or_separator_control() {
    let sb = Sandbox::new();
    let file = format!("{WATCHED}/ok\u{202e}sj.exe\u{2028}\u{200b}.js");
    sb.repo.write(&file, "// x\n");
    sb.repo.commit("bidi");
    let out = sb.tick(&at(0), &[]);
    expect_code(&out, 10);
    let explained = sb.explain(&file, false);
    expect_code(&explained, 0);
    for (what, text) in [("--json", &out.stdout), ("explain", &explained.stdout)] {
        for c in ['\u{202e}', '\u{2028}', '\u{200b}'] {
            assert!(!text.contains(c), "{what}: {c:?} raw in {text}");
        }
    }
    assert!(
        out.json()["files"].to_string().contains(&file),
        "the same path"
    );
}
