//! A fleet tick of a GitLab group (`--group`): the `sentinel` binary against
//! the fake GitLab serving a group whose every project is the sandbox's
//! repository under its own id. Discovery follows every page; each project
//! gets exactly a single-project tick and a state of its own.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::gitlab::{Endpoint, FakeGitLab, Reply, TOKEN};
use crate::util::openai::{FakeOpenAi, KEY, Reply as AiReply};
use crate::util::{Output, Sandbox, at};

/// `n` projects of group `acme`, half under `acme/libs`, half under
/// `acme/apps` (a subgroup each), ids from 1001.
fn group(n: u64) -> Vec<Value> {
    (1..=n)
        .map(|i| {
            let sub = if i % 2 == 0 { "libs" } else { "apps" };
            json!({
                "id": 1000 + i,
                "path_with_namespace": format!("acme/{sub}/p{i}"),
                "default_branch": "main",
                "archived": false,
            })
        })
        .collect()
}

fn fleet(sb: &Sandbox, gl: &FakeGitLab, dir: &Path, now: &str, extra: &[&str]) -> Output {
    sb.sentinel(["tick", "--now", now, "--source", "gitlab"])
        .args(["--gitlab-url", &gl.url(), "--group", "acme", "--state-dir"])
        .arg(dir)
        .args(extra)
        .env("SENTINEL_GITLAB_TOKEN", TOKEN)
        .output()
}

/// A fleet tick with the advisor on, asking `ai`.
fn fleet_advised(
    sb: &Sandbox,
    gl: &FakeGitLab,
    ai: &FakeOpenAi,
    dir: &Path,
    now: &str,
    extra: &[&str],
) -> Output {
    sb.sentinel(["tick", "--now", now, "--source", "gitlab", "--fake-sleep"])
        .args(["--gitlab-url", &gl.url(), "--group", "acme", "--state-dir"])
        .arg(dir)
        .args(["--llm-url", &ai.base_url()])
        .args(extra)
        .env("SENTINEL_GITLAB_TOKEN", TOKEN)
        .env("OPENAI_API_KEY", KEY)
        .output()
}

/// The project ids that have a state under `dir`.
fn with_state(dir: &Path) -> BTreeSet<u64> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("state.json").is_file())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

fn states(sb: &Sandbox, name: &str) -> PathBuf {
    sb.root().join(name)
}

#[test]
fn a_fleet_ticks_every_listed_project_and_a_quiet_fleet_writes_nothing() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let gl = sb.gitlab();
    let mut projects = group(25);
    projects.push(json!({"id": 2000, "path_with_namespace": "acme/old", "default_branch": "main", "archived": true}));
    // Ten a page: three pages to follow.
    gl.serve_group(projects, 10, &[]);
    let dir = states(&sb, "fleet");
    let first = fleet(&sb, &gl, &dir, &at(0), &[]);
    assert_eq!(first.code, 10, "{}", first.stderr);
    let ids: BTreeSet<u64> = (1001..=1025).collect();
    assert_eq!(with_state(&dir), ids, "the archived project has no state");
    assert_eq!(gl.requests_to(Endpoint::GroupProjects).len(), 3);
    assert!(
        first
            .stderr
            .contains("25 project(s) listed in 3 page(s), 25 ticked: 0 no-op, 25 woke"),
        "{}",
        first.stderr
    );

    let before: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| std::fs::read(dir.join(id.to_string()).join("state.json")).unwrap())
        .collect();
    gl.clear_requests();
    let quiet = fleet(&sb, &gl, &dir, &at(10), &[]);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    // The listing's pages and one head lookup a project, nothing else.
    let requests = gl.requests();
    let heads = gl.requests_to(Endpoint::Commits).len();
    assert_eq!((requests.len(), heads), (3 + 25, 25), "{requests:?}");
    let after: Vec<Vec<u8>> = ids
        .iter()
        .map(|id| std::fs::read(dir.join(id.to_string()).join("state.json")).unwrap())
        .collect();
    assert!(before == after, "a quiet fleet wrote a state");
}

#[test]
fn a_project_gitlab_refuses_is_named_and_the_rest_of_the_fleet_goes_on() {
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(4), 100, &[1003]);
    let dir = states(&sb, "fleet");
    let out = fleet(&sb, &gl, &dir, &at(0), &[]);
    assert_eq!(out.code, 10, "{}", out.stderr);
    assert!(out.stderr.contains("403"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("3 woke, 0 busy, 0 skipped, 1 failed (acme/apps/p3 (#1003))"),
        "{}",
        out.stderr
    );
    assert_eq!(with_state(&dir), [1001, 1002, 1004].into());
    let strict = fleet(&sb, &gl, &dir, &at(10), &["--strict"]);
    assert_eq!(strict.code, 1, "{}", strict.stderr);
}

#[test]
fn the_shards_of_a_fleet_together_tick_every_project_exactly_once() {
    let sb = Sandbox::with_files(&["a.js"]);
    sb.repo.git(&["branch", "moved"]);
    let gl = sb.gitlab();
    gl.serve_group(thousand(), 100, &[]);
    let mut seen: Vec<u64> = Vec::new();
    for k in 1..=4 {
        let dir = states(&sb, &format!("shard-{k}"));
        let out = fleet(&sb, &gl, &dir, &at(0), &["--shard", &format!("{k}/4")]);
        assert_eq!(
            out.code,
            10,
            "{}",
            out.stderr.lines().last().unwrap_or_default()
        );
        seen.extend(with_state(&dir));
    }
    seen.sort_unstable();
    assert_eq!(seen, (1001..=2000).collect::<Vec<u64>>());
}

#[test]
fn include_and_exclude_choose_projects_by_their_path_with_namespace() {
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(6), 100, &[]);
    let dir = states(&sb, "libs");
    let out = fleet(
        &sb,
        &gl,
        &dir,
        &at(0),
        &["--include", "acme/libs/*", "--exclude", "acme/libs/p6"],
    );
    assert_eq!(out.code, 10, "{}", out.stderr);
    assert_eq!(with_state(&dir), [1002, 1004].into());
}

#[test]
fn a_group_gitlab_does_not_know_stops_the_fleet_and_names_it() {
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    gl.push(
        Endpoint::GroupProjects,
        Reply::json(404, &json!({"message": "404 Group Not Found"})),
    );
    let dir = states(&sb, "fleet");
    let out = fleet(&sb, &gl, &dir, &at(0), &[]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("group `acme`"), "{}", out.stderr);
    assert!(with_state(&dir).is_empty());
}

#[test]
fn a_quota_wall_seen_by_one_project_holds_the_provider_for_the_whole_fleet() {
    // A risky file (`auth`): every project asks the model about it.
    let sb = Sandbox::with_files(&["auth.js"]);
    sb.repo.git(&["branch", "moved"]);
    let gl = sb.gitlab();
    gl.serve_group(thousand(), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::quota());
    let dir = states(&sb, "fleet");
    let out = fleet_advised(&sb, &gl, &ai, &dir, &at(600), &["--json"]);
    assert_eq!(out.code, 10, "{}", out.stderr);
    assert_eq!(ai.posts(), 1, "one call in all: {}", out.stderr);
    // One JSON object a project, a line each: the other five were held.
    let reports: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(reports.len(), 1000);
    let held = reports
        .iter()
        .filter(|r| {
            r["files"][0]["outcome"] == "held"
                && r["files"][0]["reason"]
                    .as_str()
                    .is_some_and(|w| w.starts_with("provider held by the fleet until"))
        })
        .count();
    assert_eq!(
        held,
        999,
        "{}",
        out.stderr.lines().last().unwrap_or_default()
    );
    let ledger: Value =
        serde_json::from_slice(&std::fs::read(dir.join("fleet.json")).unwrap()).unwrap();
    assert_eq!(ledger["circuit"]["class"], "quota", "{ledger}");
    assert_eq!(
        ledger["circuit"]["until"], "2026-06-17T00:00:00Z",
        "{ledger}"
    );
}

#[test]
fn one_fleet_budget_of_a_dollar_at_ten_cents_a_call_makes_at_most_ten_calls_a_day() {
    let sb = Sandbox::with_files(&["auth.js"]);
    sb.repo.git(&["branch", "moved"]);
    let gl = sb.gitlab();
    gl.serve_group(thousand(), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::completion());
    let dir = states(&sb, "fleet");
    // A model without a price, counted at $0.10 a call.
    let cap = [
        "--daily-budget",
        "1",
        "--model",
        "unpriced",
        "--cost-per-call",
        "0.10",
    ];
    let out = fleet_advised(&sb, &gl, &ai, &dir, &at(600), &cap);
    assert_eq!(out.code, 10, "{}", out.stderr);
    assert_eq!(ai.posts(), 10, "{}", out.stderr);
    // Later the same day, with every project's file changed: still 10.
    sb.repo.write("libs/shared/auth.js", "// auth v2\n");
    sb.repo.commit("v2");
    fleet_advised(&sb, &gl, &ai, &dir, &at(700), &cap);
    assert_eq!(ai.posts(), 10);
    let ledger: Value =
        serde_json::from_slice(&std::fs::read(dir.join("fleet.json")).unwrap()).unwrap();
    let spent: f64 = ledger["spent"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((spent - 1.0).abs() < 1e-9, "{ledger}");
}

/// The fleet: 1,000 projects of group `acme` under two subgroups
/// (`acme/libs`, `acme/apps`), ids 1001..=2000, plus one archived project
/// the listing leaves out. The ten projects `MOVED` follow branch `moved`
/// of the backing repository, the others `main`, so a commit on `moved`
/// moves those ten alone.
fn thousand() -> Vec<Value> {
    let mut projects = group(1000);
    for p in &mut projects {
        if MOVED.contains(&p["id"].as_u64().unwrap()) {
            p["default_branch"] = json!("moved");
        }
    }
    projects.push(json!({"id": 3000, "path_with_namespace": "acme/old", "default_branch": "main", "archived": true}));
    projects
}

const MOVED: [u64; 10] = [1010, 1111, 1212, 1313, 1414, 1515, 1616, 1717, 1818, 1919];
/// Answers 403 to everything but the listing.
const REFUSED: u64 = 1500;
/// Has a state that is not JSON.
const DAMAGED: u64 = 1600;

/// Every state file under `dir`, by path, with its bytes.
fn state_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = with_state(dir)
        .into_iter()
        .map(|id| dir.join(id.to_string()).join("state.json"))
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

/// The project id a recorded request is about, if any.
fn project_of(r: &crate::util::gitlab::Recorded) -> Option<u64> {
    match &r.segments[..] {
        [_, _, projects, id, ..] if projects == "projects" => id.parse().ok(),
        _ => None,
    }
}

#[test]
fn a_quiet_thousand_project_fleet_costs_a_head_lookup_each_and_ten_moved_read_only_theirs() {
    let sb = Sandbox::with_files(&["a.js"]);
    sb.repo.git(&["branch", "moved"]);
    let gl = sb.gitlab();
    gl.serve_group(thousand(), 100, &[REFUSED]);
    let dir = states(&sb, "fleet");
    std::fs::create_dir_all(dir.join(DAMAGED.to_string())).unwrap();
    std::fs::write(
        dir.join(DAMAGED.to_string()).join("state.json"),
        b"{damaged",
    )
    .unwrap();
    let first = fleet(&sb, &gl, &dir, &at(0), &[]);
    assert_eq!(
        first.code,
        10,
        "{}",
        first.stderr.lines().last().unwrap_or_default()
    );
    assert_eq!(with_state(&dir).len(), 999, "all but the refused one");

    // Quiet: the listing's ten pages and one head lookup a project.
    gl.clear_requests();
    let before = state_bytes(&dir);
    let quiet = fleet(&sb, &gl, &dir, &at(10), &[]);
    assert_eq!(
        quiet.code,
        0,
        "{}",
        quiet.stderr.lines().last().unwrap_or_default()
    );
    let requests = gl.requests();
    assert!(requests.len() <= 1100, "{} requests", requests.len());
    assert_eq!(gl.requests_to(Endpoint::GroupProjects).len(), 10);
    assert!(state_bytes(&dir) == before, "a quiet fleet wrote a state");

    // Ten moved: only they are read past their head lookup; the refused
    // project and the damaged state are named, and the fleet exits 12.
    sb.repo.git(&["checkout", "-q", "moved"]);
    sb.repo.write("libs/shared/a.js", "// a v2\n");
    sb.repo.commit("moved");
    gl.clear_requests();
    let moved = fleet(&sb, &gl, &dir, &at(20), &[]);
    assert_eq!(moved.code, 12, "{}", moved.stderr);
    let read: BTreeSet<u64> = gl
        .requests()
        .iter()
        .filter(|r| r.endpoint != Endpoint::Commits && r.endpoint != Endpoint::GroupProjects)
        .filter_map(project_of)
        .collect();
    assert_eq!(read, MOVED.into(), "only the moved projects are read");
    let summary = moved.stderr.lines().last().unwrap_or_default();
    assert!(
        summary.contains(&format!("(#{REFUSED})")) && summary.contains(&format!("(#{DAMAGED})")),
        "{summary}"
    );
    assert!(summary.contains("10 woke"), "{summary}");
}

#[test]
fn four_shards_each_spending_the_whole_daily_budget_would_spend_it_four_times() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(40), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::completion());
    let cap = [
        "--daily-budget",
        "1",
        "--model",
        "unpriced",
        "--cost-per-call",
        "0.10",
    ];
    for k in 1..=4 {
        let before = ai.posts();
        let dir = states(&sb, &format!("shard-{k}"));
        let shard = format!("{k}/4");
        let out = fleet_advised(
            &sb,
            &gl,
            &ai,
            &dir,
            &at(600),
            &[&cap[..], &["--shard", &shard]].concat(),
        );
        assert_eq!(out.code, 10, "{}", out.stderr);
        // A quarter of $1.00 at $0.10 a call: two calls a shard.
        assert_eq!(ai.posts() - before, 2, "{}", out.stderr);
        let summary = out.stderr.lines().last().unwrap_or_default();
        assert!(
            summary.contains(&format!(
                "shard {k}/4 with $0.25 of the $1.00 --daily-budget"
            )),
            "{summary}"
        );
        let ledger: Value =
            serde_json::from_slice(&std::fs::read(dir.join("fleet.json")).unwrap()).unwrap();
        assert_eq!(ledger["budget"]["share"], 0.25, "{ledger}");
    }
}

#[test]
fn one_busy_project_cannot_spend_the_whole_fleet_budget_past_its_project_budget() {
    let sb = Sandbox::with_files(&["auth.js", "auth_token.js", "auth_session.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(3), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::completion());
    let dir = states(&sb, "fleet");
    let cap = [
        "--daily-budget",
        "1",
        "--project-budget",
        "0.2",
        "--model",
        "unpriced",
        "--cost-per-call",
        "0.10",
    ];
    let out = fleet_advised(
        &sb,
        &gl,
        &ai,
        &dir,
        &at(600),
        &[&cap[..], &["--json"]].concat(),
    );
    assert_eq!(out.code, 10, "{}", out.stderr);
    // Three files a project, two calls each within $0.20: six in all.
    assert_eq!(ai.posts(), 6, "{}", out.stderr);
    assert!(
        out.stdout.contains("--project-budget is $0.20"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_project_list_ticks_exactly_the_projects_it_names_and_names_the_refused_ones() {
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    let mut projects = group(6);
    projects.push(json!({"id": 2000, "path_with_namespace": "acme/old", "default_branch": "main", "archived": true}));
    gl.serve_group(projects, 100, &[1003]);
    let list = sb.root().join("fleet.txt");
    std::fs::write(
        &list,
        "# the fleet\n1001\nacme/libs/p2   # by its path\n1003\n2000\nacme/libs/p4\n1001\n",
    )
    .unwrap();
    let dir = states(&sb, "fleet");
    let out = sb
        .sentinel(["tick", "--now", &at(0), "--source", "gitlab"])
        .args(["--gitlab-url", &gl.url(), "--project-list"])
        .arg(&list)
        .arg("--state-dir")
        .arg(&dir)
        .env("SENTINEL_GITLAB_TOKEN", TOKEN)
        .output();
    assert_eq!(out.code, 10, "{}", out.stderr);
    assert_eq!(with_state(&dir), [1001, 1002, 1004].into());
    assert_eq!(gl.requests_to(Endpoint::GroupProjects).len(), 0);
    let summary = out.stderr.lines().last().unwrap_or_default();
    assert!(
        summary.contains("3 project(s) listed, 3 ticked: 0 no-op, 3 woke")
            && summary.contains("2 failed (1003, 2000)"),
        "{summary}"
    );
    assert!(
        out.stderr.contains("2000: error: archived"),
        "{}",
        out.stderr
    );

    std::fs::write(&list, "1001\nacme libs\n").unwrap();
    let bad = sb
        .sentinel(["tick", "--now", &at(10), "--source", "gitlab"])
        .args(["--gitlab-url", &gl.url(), "--project-list"])
        .arg(&list)
        .arg("--state-dir")
        .arg(&dir)
        .env("SENTINEL_GITLAB_TOKEN", TOKEN)
        .output();
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(bad.stderr.contains("line 2"), "{}", bad.stderr);
}

#[test]
fn a_fleet_config_line_gives_one_project_its_own_branch_and_path() {
    let sb = Sandbox::with_files(&["a.js"]);
    sb.repo.git(&["branch", "develop"]);
    let gl = sb.gitlab();
    gl.serve_group(group(3), 100, &[]);
    let config = sb.root().join("fleet.conf");
    std::fs::write(
        &config,
        "# per-project overrides\nacme/apps/p1 branch=develop\n1002 path=libs  # by id\n",
    )
    .unwrap();
    let dir = states(&sb, "fleet");
    let run = |config: &Path| {
        sb.sentinel(["tick", "--now", &at(0), "--source", "gitlab"])
            .args(["--gitlab-url", &gl.url(), "--group", "acme", "--state-dir"])
            .arg(&dir)
            .args(["--path", "libs/shared", "--fleet-config"])
            .arg(config)
            .env("SENTINEL_GITLAB_TOKEN", TOKEN)
            .output()
    };
    let out = run(&config);
    assert_eq!(out.code, 10, "{}", out.stderr);
    let scope = |id: u64| -> (String, String) {
        let state: Value = serde_json::from_slice(
            &std::fs::read(dir.join(id.to_string()).join("state.json")).unwrap(),
        )
        .unwrap();
        let s = &state["scope"];
        (
            s["branch"].as_str().unwrap().into(),
            s["path"].as_str().unwrap().into(),
        )
    };
    assert_eq!(scope(1001), ("develop".into(), "libs/shared".into()));
    assert_eq!(scope(1002), ("main".into(), "libs".into()));
    assert_eq!(scope(1003), ("main".into(), "libs/shared".into()));

    let bad = sb.root().join("bad.conf");
    std::fs::write(
        &bad,
        "acme/apps/p1 branch=develop\nacme/apps/p3 colour=red\n",
    )
    .unwrap();
    let out = run(&bad);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("bad.conf` line 2"), "{}", out.stderr);
}

/// `sentinel stats --state-dir DIR` in `format`.
fn fleet_stats(sb: &Sandbox, dir: &Path, now: &str, format: &str) -> Output {
    sb.sentinel(["stats", "--now", now, "--format", format, "--state-dir"])
        .arg(dir)
        .output()
}

#[test]
fn fleet_stats_say_each_project_by_last_outcome_and_its_spend_in_one_narrow_table() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(4), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::completion());
    let dir = states(&sb, "fleet");
    let cap = ["--model", "unpriced", "--cost-per-call", "0.10"];
    let first = fleet_advised(&sb, &gl, &ai, &dir, &at(600), &cap);
    assert_eq!(first.code, 10, "{}", first.stderr);
    // One project has not moved since; the rest tick quiet.
    let quiet = fleet_advised(&sb, &gl, &ai, &dir, &at(610), &cap);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    std::fs::create_dir_all(dir.join("1999")).unwrap();
    std::fs::write(dir.join("1999").join("state.json"), b"{damaged").unwrap();

    let table = fleet_stats(&sb, &dir, &at(620), "table");
    assert_eq!(table.code, 0, "{}", table.stderr);
    for line in table.stdout.lines() {
        assert!(line.chars().count() <= 100, "{line:?}");
    }
    for want in ["#1001", "no_op", "$0.1000", "#1999", "damaged", "fleet: 5"] {
        assert!(table.stdout.contains(want), "{want}: {}", table.stdout);
    }

    let json: Value =
        serde_json::from_str(&fleet_stats(&sb, &dir, &at(620), "json").stdout).unwrap();
    assert_eq!(
        json["by_outcome"],
        json!({"no_op": 4, "damaged": 1}),
        "{json}"
    );
    assert!(
        (json["spent_today"].as_f64().unwrap() - 0.4).abs() < 1e-9,
        "{json}"
    );
    assert_eq!(json["budget"]["share"], 2.0, "{json}");

    let prom = fleet_stats(&sb, &dir, &at(620), "prometheus").stdout;
    assert!(
        prom.contains("sentinel_fleet_projects{outcome=\"no_op\"} 4"),
        "{prom}"
    );
    assert!(
        prom.contains("sentinel_fleet_spent_today_usd{project=\"1002\"} 0.1"),
        "{prom}"
    );
}

#[test]
fn fleet_stats_name_the_projects_a_quota_wall_holds() {
    let sb = Sandbox::with_files(&["auth.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(3), 100, &[]);
    let ai = FakeOpenAi::start();
    ai.answer_always(AiReply::quota());
    let dir = states(&sb, "fleet");
    let out = fleet_advised(&sb, &gl, &ai, &dir, &at(600), &["--shard", "1/1"]);
    assert_eq!(out.code, 10, "{}", out.stderr);
    let json: Value =
        serde_json::from_str(&fleet_stats(&sb, &dir, &at(620), "json").stdout).unwrap();
    assert_eq!(json["held"], 3, "{json}");
    assert_eq!(json["held_until"], "2026-06-17T00:00:00Z", "{json}");
    let table = fleet_stats(&sb, &dir, &at(620), "table").stdout;
    assert!(
        table.contains("3 held, fleet until 2026-06-17 00:00 UTC"),
        "{table}"
    );
}

#[test]
fn a_person_at_a_terminal_sees_a_progress_line_and_a_ci_log_does_not() {
    use std::process::Command;
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give the fleet a terminal");
        return;
    }
    let sb = Sandbox::with_files(&["a.js"]);
    let gl = sb.gitlab();
    gl.serve_group(group(3), 10, &[]);
    let dir = states(&sb, "fleet");
    let logged = fleet(&sb, &gl, &dir, &at(0), &[]);
    assert_eq!(logged.code, 10, "{}", logged.stderr);
    assert!(
        !logged.stderr.contains("project(s) ticked:") && !logged.stderr.contains('\x1b'),
        "{}",
        logged.stderr
    );
    // The same fleet under a terminal `script` gives it.
    let line = format!(
        "'{}' tick --now {} --source gitlab --gitlab-url '{}' --group acme --state-dir '{}'",
        env!("CARGO_BIN_EXE_sentinel"),
        at(10),
        gl.url(),
        dir.display()
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("SENTINEL_AGENT_SANDBOX", "off")
        .env("SENTINEL_GITLAB_TOKEN", TOKEN)
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{seen}");
    assert!(
        seen.contains("\r\x1b[Ksentinel: fleet: 3/3 project(s) ticked: 3 no-op, 0 woke, 0 failed"),
        "{seen:?}"
    );
    // Each project's own line starts on a cleared line, over the progress.
    assert_eq!(
        seen.matches("\r\x1b[Ksentinel: acme/").count(),
        3,
        "{seen:?}"
    );
}
