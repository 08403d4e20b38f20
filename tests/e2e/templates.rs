//! The scheduler templates in `ci-templates/` and the CI/CD component in
//! `templates/` against the binary they run:
//! every YAML template parses, every list of exit codes in them equals the
//! table that `sentinel tick --help` prints, the systemd units parse as INI
//! with their hardening in place, and no template carries a secret. Every
//! sentinel job stands alone in a project's pipeline (no inherited
//! `default:`, no hard-coded stage, a timeout, the prebuilt binary, the
//! sentinel schedule only), and the install, state and tick steps are the
//! same text in every template. scripts/ci-local-check runs them for real.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

const GITLAB: &str = "ci-templates/gitlab-ci.yml";
const COMPONENT: &str = "templates/sentinel/template.yml";
const FLEET_COMPONENT: &str = "templates/fleet/template.yml";
const FLEET: &str = "ci-templates/fleet.gitlab-ci.yml";
const RELEASE: &str = "ci-templates/release.gitlab-ci.yml";
const CRONTAB: &str = "ci-templates/crontab";
const SERVICE: &str = "ci-templates/systemd/sentinel.service";
const TIMER: &str = "ci-templates/systemd/sentinel.timer";
const ENV_EXAMPLE: &str = "ci-templates/systemd/sentinel.env.example";
const CODEQUALITY: &str = "gl-code-quality-report.json";

/// Top-level keys of a GitLab CI file that are not jobs.
const GLOBAL_KEYS: [&str; 8] = [
    "variables",
    "stages",
    "include",
    "default",
    "workflow",
    "image",
    "cache",
    "spec",
];

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read `{}`: {e}", path.display()))
}

fn load(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel)).unwrap_or_else(|e| panic!("`{rel}` is not YAML: {e}"))
}

/// Codes named in `text`: numbers and ranges such as `10..17`, expanded.
/// Words are ignored, so `0 none, 10..17 woke, 20 busy` gives 0, 10..=17, 20.
fn expand_codes(text: &str) -> BTreeSet<i32> {
    let mut codes = BTreeSet::new();
    for token in text.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
        let token = token.trim_matches('.');
        if token.is_empty() {
            continue;
        }
        match token.split_once("..") {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().unwrap(), b.parse().unwrap());
                assert!(a <= b, "range `{token}` runs backwards");
                codes.extend(a..=b);
            }
            None => {
                codes.insert(token.parse().unwrap());
            }
        }
    }
    codes
}

/// The binary's own table: the "Exit codes:" section of `sentinel tick
/// --help`. Whatever codes it lists are the truth the templates must match.
fn binary_exit_codes() -> BTreeMap<i32, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_sentinel"))
        .args(["tick", "--help"])
        .env_clear()
        .output()
        .expect("run sentinel tick --help");
    assert!(out.status.success(), "sentinel tick --help failed: {out:?}");
    let help = String::from_utf8(out.stdout).expect("help is UTF-8");
    let table = parse_exit_table(&help);
    assert!(
        [0, 1, 2].iter().all(|c| table.contains_key(c)),
        "the parsed table {table:?} lacks 0, 1 or 2; has the help text changed shape?\n{help}"
    );
    table
}

/// The "Exit codes:" section of a help text, as code -> the first word of
/// its meaning (`none`, `woke`, `busy`, `error`, ...). A row is a line
/// indented by exactly two spaces that starts with a code or a range such as
/// `10..17`; deeper lines continue the row above.
fn parse_exit_table(help: &str) -> BTreeMap<i32, String> {
    let section = help
        .split_once("Exit codes:\n")
        .unwrap_or_else(|| panic!("no \"Exit codes:\" section in\n{help}"))
        .1;
    let mut table = BTreeMap::new();
    for line in section.lines().take_while(|l| !l.trim().is_empty()) {
        let Some(row) = line.strip_prefix("  ") else {
            continue;
        };
        if !row.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let (code, meaning) = row
            .split_once(char::is_whitespace)
            .expect("a code and a meaning");
        let label = meaning
            .split_whitespace()
            .next()
            .expect("a meaning")
            .trim_end_matches([':', ',']);
        for c in expand_codes(code) {
            assert!(
                table.insert(c, label.to_string()).is_none(),
                "code {c} listed twice"
            );
        }
    }
    table
}

/// What a scheduler must do with each code, from the binary's table.
struct Expected {
    /// Every code that ends a run as a success (0, the wakes, busy, ...).
    success: BTreeSet<i32>,
    /// The codes of a waking tick: the only ones that changed the state.
    woke: BTreeSet<i32>,
    /// Error and usage error.
    failure: BTreeSet<i32>,
}

fn expected() -> Expected {
    let table = binary_exit_codes();
    let pick = |f: &dyn Fn(&str) -> bool| -> BTreeSet<i32> {
        table
            .iter()
            .filter(|(_, label)| f(label))
            .map(|(c, _)| *c)
            .collect()
    };
    let is_failure = |l: &str| l == "error" || l == "usage";
    Expected {
        success: pick(&|l| !is_failure(l)),
        woke: pick(&|l| l == "woke"),
        failure: pick(&is_failure),
    }
}

fn str_of<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, is {y:?}"))
}

/// The jobs of a GitLab CI document, hidden ones included.
fn jobs(doc: &Yaml) -> Vec<(String, &Yaml)> {
    doc.as_hash()
        .expect("a GitLab CI document is a mapping")
        .iter()
        .map(|(k, v)| (str_of(k, "a top-level key").to_string(), v))
        .filter(|(k, _)| !GLOBAL_KEYS.contains(&k.as_str()))
        .collect()
}

/// A job's `script`, joined into one shell text.
fn script(job: &Yaml) -> String {
    job["script"]
        .as_vec()
        .map(|lines| {
            lines
                .iter()
                .map(|l| str_of(l, "a script line"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A job with its `extends:` chain merged in, parents first, as GitLab does:
/// mappings merge key by key, anything else is replaced by the child's.
fn resolved(doc: &Yaml, name: &str) -> Yaml {
    let job = &doc[name];
    let mut merged = Yaml::Hash(Default::default());
    let parents: Vec<&str> = match &job["extends"] {
        Yaml::String(s) => vec![s.as_str()],
        Yaml::Array(list) => list.iter().map(|p| str_of(p, "extends")).collect(),
        _ => vec![],
    };
    for parent in parents {
        merge(&mut merged, &resolved(doc, parent));
    }
    merge(&mut merged, job);
    if let Yaml::Hash(h) = &mut merged {
        h.remove(&Yaml::String("extends".into()));
    }
    merged
}

/// GitLab's `extends:` merge: mappings key by key, the rest replaced.
fn merge(into: &mut Yaml, from: &Yaml) {
    match (into, from) {
        (Yaml::Hash(a), Yaml::Hash(b)) => {
            for (k, v) in b {
                match a.get_mut(k) {
                    Some(existing @ Yaml::Hash(_)) if matches!(v, Yaml::Hash(_)) => {
                        merge(existing, v)
                    }
                    _ => {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (slot, value) => *slot = value.clone(),
    }
}

/// The jobs GitLab would run (not hidden), resolved.
fn concrete_jobs(doc: &Yaml) -> Vec<(String, Yaml)> {
    jobs(doc)
        .into_iter()
        .filter(|(name, _)| !name.starts_with('.'))
        .map(|(name, _)| {
            let job = resolved(doc, &name);
            (name, job)
        })
        .collect()
}

/// The concrete jobs whose script runs a tick.
fn tick_jobs(doc: &Yaml) -> Vec<(String, Yaml)> {
    let found: Vec<_> = concrete_jobs(doc)
        .into_iter()
        .filter(|(_, job)| script(job).contains("sentinel tick"))
        .collect();
    assert!(!found.is_empty(), "no job runs `sentinel tick`");
    found
}

/// The text between `# >>> NAME` and `# <<< NAME` in a template: a step
/// every template carries verbatim.
fn block(rel: &str, text: &str, name: &str) -> String {
    let start = format!("# >>> {name}");
    let end = format!("# <<< {name}");
    let from = text
        .find(&start)
        .unwrap_or_else(|| panic!("`{rel}` has no `{start}` block"));
    let to = text[from..]
        .find(&end)
        .unwrap_or_else(|| panic!("`{rel}`: `{start}` is never closed"));
    text[from..from + to].to_string()
}

/// The arms of the `case "$code"` that judges a tick: verdict -> codes.
/// An arm is a line `10|11) verdict=woke ;;`; the catch-all `*)` arm is
/// returned under its own key `*`.
fn verdict_arms(script: &str) -> BTreeMap<String, BTreeSet<i32>> {
    let mut arms: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for line in script.lines().map(str::trim) {
        let Some((pattern, body)) = line.split_once(')') else {
            continue;
        };
        let Some(verdict) = body
            .split_whitespace()
            .find_map(|w| w.strip_prefix("verdict="))
        else {
            continue;
        };
        let verdict = verdict.trim_end_matches(';').to_string();
        if pattern == "*" {
            arms.entry("*".into()).or_default().insert(-1);
            assert_eq!(
                verdict, "red",
                "the catch-all arm must fail the job: `{line}`"
            );
            continue;
        }
        assert!(
            pattern.chars().all(|c| c.is_ascii_digit() || c == '|'),
            "an arm of the verdict should list codes only: `{line}`"
        );
        let codes = arms.entry(verdict).or_default();
        for code in pattern.split('|') {
            assert!(
                codes.insert(code.parse().unwrap()),
                "code {code} twice in `{line}`"
            );
        }
    }
    arms
}

/// Every `variables:` mapping in a document (global, per job, per matrix
/// entry), as (where, name, value).
fn all_variables(doc: &Yaml) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut collect = |place: &str, vars: &Yaml| {
        if let Some(h) = vars.as_hash() {
            for (k, v) in h {
                let value = match v {
                    Yaml::Hash(_) => v["value"].as_str().unwrap_or_default().to_string(),
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    other => format!("{other:?}"),
                };
                out.push((
                    place.to_string(),
                    str_of(k, "a variable name").to_string(),
                    value,
                ));
            }
        }
    };
    collect("variables", &doc["variables"]);
    for (name, job) in jobs(doc) {
        collect(&name, &job["variables"]);
        if let Some(matrix) = job["parallel"]["matrix"].as_vec() {
            for entry in matrix {
                collect(&format!("{name} matrix"), entry);
            }
        }
    }
    out
}

/// No template writes a secret: no token or key variable is defined in it,
/// every token header takes its value from a variable, and nothing looks like
/// a GitLab or OpenAI token.
fn assert_no_secret(rel: &str, text: &str, docs: &[Yaml]) {
    for doc in docs {
        for (place, name, _) in all_variables(doc) {
            let upper = name.to_ascii_uppercase();
            assert!(
                !["TOKEN", "API_KEY", "PASSWORD", "SECRET"]
                    .iter()
                    .any(|w| upper.contains(w)),
                "`{rel}` defines the secret {name} in {place}; secrets belong in masked CI/CD variables"
            );
        }
    }
    for (i, _) in text.match_indices("TOKEN: ") {
        let value = &text[i + "TOKEN: ".len()..];
        assert!(
            value.starts_with('$'),
            "`{rel}` sends a literal token header: `{}`",
            &text[i..(i + 40).min(text.len())]
        );
    }
    for word in text.split(|c: char| c.is_whitespace() || "\"'`=:".contains(c)) {
        let looks_like_token = ["glpat-", "glptt-", "gldt-", "glcbt-", "glrt-"]
            .iter()
            .any(|p| word.starts_with(p))
            || (word.starts_with("sk-") && word.len() > 20);
        assert!(
            !looks_like_token,
            "`{rel}` contains what looks like a token: `{word}`"
        );
    }
}

/// The checks every GitLab template passes, on each job that ticks.
fn assert_gitlab_template(rel: &str, doc: &Yaml, docs: &[Yaml]) {
    let text = read(rel);
    let expected = expected();
    for (name, job) in jobs(doc) {
        assert!(
            job["allow_failure"].is_badvalue(),
            "`{rel}` {name}: allow_failure marks a successful tick orange; judge the code in the script"
        );
    }
    assert_no_secret(rel, &text, docs);
    assert_every_job_stands_alone(rel, doc);
    for (name, job) in tick_jobs(doc) {
        let vars = &job["variables"];
        let strategy = str_of(&vars["GIT_STRATEGY"], "GIT_STRATEGY");
        assert!(
            strategy == "empty" || strategy == "$[[ inputs.git_strategy ]]",
            "`{rel}` {name}: a tick clones nothing and starts from an empty directory, not `{strategy}`"
        );
        let group = str_of(&job["resource_group"], "resource_group");
        assert!(
            group.starts_with("sentinel-") && group.contains('$'),
            "`{rel}` {name}: resource_group `{group}` should be one per watched scope"
        );
        assert_eq!(
            job["artifacts"]["reports"]["codequality"].as_str(),
            Some(CODEQUALITY),
            "`{rel}` {name}: the Code Quality report"
        );
        assert_eq!(
            vars["SENTINEL_CODEQUALITY"].as_str(),
            Some(CODEQUALITY),
            "`{rel}` {name}: sentinel must write the report the artifact uploads"
        );
        assert_eq!(job["artifacts"]["when"].as_str(), Some("always"));
        let paths: Vec<&str> = job["artifacts"]["paths"]
            .as_vec()
            .map(|v| v.iter().map(|p| str_of(p, "an artifact path")).collect())
            .unwrap_or_default();
        assert_eq!(
            paths,
            ["sentinel-stats.json"],
            "`{rel}` {name}: artifact paths"
        );

        let body = script(&job);
        assert!(body.contains("sentinel stats --json > sentinel-stats.json"));
        // A tick that does not wake still leaves the last known findings.
        assert!(
            body.contains("sentinel report --codequality gl-code-quality-report.json"),
            "`{rel}` {name}: every tick job writes a report"
        );
        assert!(body.contains("state_package=\"sentinel-state-$scope\""));
        assert!(body.contains("packages/generic/$state_package/v1/state.tar.gz"));
        assert!(body.contains("--header \"JOB-TOKEN: $CI_JOB_TOKEN\""));

        // The state directory sits under a cached path; the binary has its
        // own cache, keyed by version.
        assert!(body.contains("state_dir=\".sentinel/$scope\""));
        assert!(body.contains("export SENTINEL_STATE=\"$state_dir/state.json\""));
        let caches = job["cache"].as_vec().expect("cache is a list");
        let cached = |key_prefix: &str, path: &str| {
            caches.iter().any(|c| {
                str_of(&c["key"], "cache key").starts_with(key_prefix)
                    && c["paths"][0].as_str() == Some(path)
            })
        };
        // Keyed by the version variable, or by a component's input.
        assert!(
            cached("sentinel-bin-$SENTINEL_VERSION", ".sentinel-bin/")
                || cached(
                    "sentinel-bin-$[[ inputs.sentinel_version ]]",
                    ".sentinel-bin/"
                ),
            "`{rel}` {name}: the binary's cache"
        );
        assert!(
            cached("sentinel-state-$", ".sentinel/"),
            "`{rel}` {name}: the state's cache"
        );

        // The verdict on the exit code equals the binary's table.
        let arms = verdict_arms(&body);
        let get = |v: &str| arms.get(v).cloned().unwrap_or_default();
        let green: BTreeSet<i32> = get("green").union(&get("woke")).copied().collect();
        assert_eq!(
            green, expected.success,
            "`{rel}` {name}: the codes that end the job green"
        );
        assert_eq!(
            get("woke"),
            expected.woke,
            "`{rel}` {name}: the codes of a waking tick"
        );
        assert_eq!(
            get("red"),
            expected.failure,
            "`{rel}` {name}: the codes that fail the job"
        );
        assert!(
            !expected.success.contains(&143),
            "143 is a signal's code, never a tick's success"
        );
        assert!(
            arms.contains_key("*"),
            "`{rel}` {name}: unknown codes must fail the job"
        );
        assert!(
            body.contains("exit \"$code\""),
            "`{rel}` {name}: red exits with the real code"
        );
        assert!(body.contains("echo \"sentinel tick exited $code"));
        // Only a changed state is uploaded, and never after a failed or a
        // stopped tick: both exit before the upload.
        let upload = body
            .find("if [ -s \"$SENTINEL_STATE\" ] && [ \"$before\" != \"$after\" ]; then")
            .unwrap_or_else(|| {
                panic!("`{rel}` {name}: the upload is decided by the state's digest")
            });
        for verdict in ["red", "stopped"] {
            let exit = body
                .find(&format!("if [ \"$verdict\" = {verdict} ]; then"))
                .unwrap_or_else(|| panic!("`{rel}` {name}: no exit on a {verdict} tick"));
            assert!(
                exit < upload,
                "`{rel}` {name}: a {verdict} tick reaches the upload"
            );
        }
        // SIGTERM (the binary saves a whole state, then exits 143) is its
        // own verdict, neither green nor an unknown failure.
        assert_eq!(
            get("stopped"),
            BTreeSet::from([143]),
            "`{rel}` {name}: 143 is a stopped tick"
        );
        // The scope reaches sentinel as flags; a duplicate-package answer is
        // recognised by GitLab's own message.
        assert!(body.contains("sentinel tick \"$@\" || code=$?"));
        assert!(body.contains("set -- \"$@\" --state \"$SENTINEL_STATE\""));
        assert!(body.contains("'Duplicate package is not allowed'"));
    }
}

/// What every sentinel job must say for itself, whatever the project's own
/// `.gitlab-ci.yml` holds: no `default:` of the project, no hard-coded stage,
/// a timeout, no queueing behind other jobs, never cancelled halfway, and on
/// its normal path the prebuilt binary (never a compile).
fn assert_every_job_stands_alone(rel: &str, doc: &Yaml) {
    let stages: Vec<&str> = doc["stages"]
        .as_vec()
        .map(|v| v.iter().map(|s| str_of(s, "a stage")).collect())
        .unwrap_or_default();
    let concrete = concrete_jobs(doc);
    assert!(!concrete.is_empty(), "`{rel}` has no job");
    for (name, job) in concrete {
        assert_eq!(
            job["inherit"]["default"].as_bool(),
            Some(false),
            "`{rel}` {name}: the project's default: (before_script, image...) must not run in it"
        );
        let stage = str_of(&job["stage"], "stage");
        assert!(
            stage == "$[[ inputs.stage ]]" || stages.contains(&stage),
            "`{rel}` {name}: stage `{stage}` is hard-coded; take it from inputs.stage (or declare it in the file's own stages:)"
        );
        let timeout = str_of(&job["timeout"], "timeout");
        assert!(
            timeout == "$[[ inputs.timeout ]]" || timeout.contains("minute"),
            "`{rel}` {name}: timeout `{timeout}`"
        );
        assert_eq!(
            job["needs"].as_vec().map(Vec::len),
            Some(0),
            "`{rel}` {name}: needs: []"
        );
        // Cancelling a tick leaves a whole state (143), so GitLab may cancel
        // it with a redundant pipeline.
        assert_eq!(
            job["interruptible"].as_bool(),
            Some(true),
            "`{rel}` {name}: interruptible: true"
        );
        // `inherit: default: false` drops `default: tags`; the tags come
        // from an input (the fleet, a whole pipeline, names them itself).
        assert!(
            job["tags"].as_str() == Some("$[[ inputs.tags ]]") || rel == FLEET,
            "`{rel}` {name}: tags from inputs.tags"
        );
        let body = script(&job);
        assert!(
            !body.contains("cargo install") && !body.contains("cargo build"),
            "`{rel}` {name}: compiles sentinel on its normal path"
        );
        assert!(
            body.contains("sha256sum") && body.contains("sentinel --version"),
            "`{rel}` {name}: the binary is verified and its version checked"
        );
        // The pin is checked before any candidate runs, even `--version`.
        let install = block(rel, &body, "install");
        for candidate in ["\"$found\"", "\"$bin/sentinel\""] {
            let pinned = install
                .find(&format!("sentinel_pinned {candidate}"))
                .unwrap_or_else(|| panic!("`{rel}` {name}: {candidate} is never held to the pin"));
            let ran = install
                .find(&format!("$({candidate} --version"))
                .unwrap_or_else(|| panic!("`{rel}` {name}: {candidate} never runs"));
            assert!(
                pinned < ran,
                "`{rel}` {name}: {candidate} runs before its pin is checked"
            );
        }
        let rules = job["rules"].as_vec().expect("every sentinel job has rules");
        for rule in rules {
            let cond = str_of(&rule["if"], "a rule");
            assert!(
                !cond.contains("\"schedule\"") || cond.contains("$SENTINEL_SCHEDULE == \"true\""),
                "`{rel}` {name}: `{cond}` would fire on every schedule of the project"
            );
        }
    }
}

/// The tick and merge-request jobs of a single-project template.
fn assert_tick_and_mr(rel: &str, doc: &Yaml, tick: &str, mr: &str) {
    let tick_job = resolved(doc, tick);
    let rules = tick_job["rules"].as_vec().expect("the tick job has rules");
    assert_eq!(
        str_of(&rules[0]["if"], "a rule"),
        "$CI_PIPELINE_SOURCE == \"schedule\" && $SENTINEL_SCHEDULE == \"true\"",
        "`{rel}`: the tick runs on the sentinel schedule only"
    );
    for rule in &rules[1..] {
        let cond = str_of(&rule["if"], "a rule");
        assert!(
            cond.contains("$CI_PIPELINE_SOURCE == \"push\"")
                && (cond.contains("$SENTINEL_ON_PUSH == \"true\"")
                    || cond.contains("\"$[[ inputs.on_push ]]\" == \"true\"")),
            "`{rel}`: push ticks must be opt-in and push-only: `{cond}`"
        );
        assert!(rule["when"].is_badvalue(), "`{rel}`: `{cond}` sets a when");
    }

    let mr_job = resolved(doc, mr);
    let cond = str_of(&mr_job["rules"][0]["if"], "a rule");
    assert!(
        cond.starts_with("$CI_PIPELINE_SOURCE == \"merge_request_event\""),
        "`{rel}` {mr}: `{cond}`"
    );
    let body = script(&mr_job);
    assert!(
        body.contains("--changed-since \"$CI_MERGE_REQUEST_DIFF_BASE_SHA\""),
        "`{rel}` {mr}: the report of the changed files"
    );
    // Merged results and merge trains: the merge request's own change.
    assert!(
        body.contains("--changed-since \"$CI_MERGE_REQUEST_TARGET_BRANCH_SHA\" --changed-until \"$CI_MERGE_REQUEST_SOURCE_BRANCH_SHA\""),
        "`{rel}` {mr}: a merged results pipeline's report"
    );
    // Opt-in: the rule would add merge-request pipelines to a project that
    // runs branch pipelines only.
    assert!(
        cond.ends_with("$SENTINEL_MR_REPORT == \"true\"")
            || cond.ends_with("\"$[[ inputs.mr_report ]]\" == \"true\""),
        "`{rel}` {mr}: the merge-request job is opt-in: `{cond}`"
    );
    assert!(
        !body.contains("sentinel tick") && !body.contains("--upload-file"),
        "`{rel}` {mr}: read-only"
    );
    // A job variable in the include template; set in the script of the
    // component, where no variable of that name may change it.
    assert!(
        mr_job["variables"]["SENTINEL_STATE_DOWNLOAD"].as_str() == Some("always")
            || block(rel, &body, "scope").contains("\nSENTINEL_STATE_DOWNLOAD=always\n"),
        "`{rel}` {mr}: the latest saved state"
    );
    assert_eq!(
        mr_job["artifacts"]["reports"]["codequality"].as_str(),
        Some(CODEQUALITY)
    );
}

#[test]
fn the_exit_code_parser_reads_codes_and_ranges() {
    assert_eq!(
        expand_codes("0 none, 10..12 woke, 20 busy and 21."),
        BTreeSet::from([0, 10, 11, 12, 20, 21])
    );
    assert_eq!(expand_codes("1 error, 2 usage"), BTreeSet::from([1, 2]));

    // An older help text, before 21 existed: the parser reads what is there.
    let old = "Usage: sentinel tick [OPTIONS]\n\nExit codes:\n  \
               0       none: nothing happened, nothing written\n  \
               10..17  woke: 10 first_run, 11 sha_unavailable, 12 repo_changed,\n          \
               13 evidence_changed, 14 backlog (15..17 are reserved)\n  \
               20      busy: another tick holds the lock; nothing started\n  \
               1       error (configuration, I/O); state untouched\n  \
               2       usage error\n\nExample crontab line:\n  */2 * * * * sentinel tick\n";
    let table = parse_exit_table(old);
    assert_eq!(
        table.keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 10, 11, 12, 13, 14, 15, 16, 17, 20]
    );
    assert_eq!(table[&20], "busy");

    let table = binary_exit_codes();
    assert_eq!(table[&0], "none");
    assert_eq!(table[&10], "woke");
    assert_eq!(table[&1], "error");
    assert_eq!(table[&2], "usage");
}

/// The names of a spec's inputs, and the names its jobs use: equal.
fn assert_inputs_declared_and_used(rel: &str, docs: &[Yaml]) -> BTreeSet<String> {
    let inputs = docs[0]["spec"]["inputs"]
        .as_hash()
        .expect("spec: inputs: is a mapping");
    let declared: BTreeSet<String> = inputs
        .keys()
        .map(|k| str_of(k, "an input").to_string())
        .collect();
    let text = read(rel);
    let jobs_text = text.split_once("\n---\n").expect("the `---` separator").1;
    let used: BTreeSet<String> = jobs_text
        .match_indices("$[[ inputs.")
        .map(|(i, m)| {
            let rest = &jobs_text[i + m.len()..];
            rest.split_once(" ]]")
                .expect("a closed $[[ ]]")
                .0
                .to_string()
        })
        .collect();
    assert_eq!(used, declared, "`{rel}`: inputs used vs declared");
    declared
}

#[test]
fn the_gitlab_template_parses_and_ends_only_errors_red() {
    let docs = load(GITLAB);
    assert_eq!(
        docs.len(),
        2,
        "`{GITLAB}` is a spec document (stage, timeout) and a jobs document"
    );
    let declared = assert_inputs_declared_and_used(GITLAB, &docs);
    for name in ["stage", "timeout", "git_strategy", "tags"] {
        assert!(declared.contains(name), "`{GITLAB}` lacks the input {name}");
    }
    let doc = &docs[1];
    assert_gitlab_template(GITLAB, doc, &docs);
    assert_tick_and_mr(GITLAB, doc, "sentinel:tick", "sentinel:mr");
    assert_eq!(
        str_of(
            &resolved(doc, "sentinel:tick")["resource_group"],
            "resource_group"
        ),
        "sentinel-$CI_PROJECT_ID-$CI_JOB_NAME_SLUG"
    );
    assert_eq!(
        doc["variables"]["SENTINEL_ON_PUSH"]["value"].as_str(),
        Some("false"),
        "push pipelines are opt-in"
    );
}

#[test]
fn the_component_has_a_spec_and_the_same_jobs() {
    let docs = load(COMPONENT);
    assert_eq!(
        docs.len(),
        2,
        "`{COMPONENT}` is a spec document and a jobs document"
    );
    let declared = assert_inputs_declared_and_used(COMPONENT, &docs);
    for name in [
        "name",
        "stage",
        "timeout",
        "tags",
        "watched_path",
        "branch",
        "batch",
        "model",
        "on_push",
        "sentinel_version",
        "release_project",
        "mr_report",
    ] {
        assert!(
            declared.contains(name),
            "`{COMPONENT}` lacks the input {name}"
        );
    }
    let inputs = &docs[0]["spec"]["inputs"];
    assert_eq!(inputs["on_push"]["type"].as_str(), Some("boolean"));
    assert_eq!(inputs["on_push"]["default"].as_bool(), Some(false));
    assert_eq!(inputs["mr_report"]["default"].as_bool(), Some(false));
    assert_eq!(inputs["batch"]["type"].as_str(), Some("number"));
    assert_eq!(inputs["tags"]["type"].as_str(), Some("array"));
    // The name keys the cache and the lock: required, and its own slug.
    assert!(
        inputs["name"]["default"].is_badvalue(),
        "`name` is required"
    );
    assert_eq!(
        inputs["name"]["regex"].as_str(),
        Some("^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
    );
    // The scope inputs go into single-quoted shell words: no quote, no `$`.
    for scope in ["watched_path", "branch"] {
        let regex = str_of(&inputs[scope]["regex"], "a scope input's regex");
        assert!(
            !regex.contains('\'') && !regex.contains('$') || regex.ends_with("]*$"),
            "`{COMPONENT}`: {scope} regex `{regex}`"
        );
        assert_eq!(regex, "^[A-Za-z0-9._/@+-]*$");
    }

    let doc = &docs[1];
    // No hidden job: two includes would share (and override) it. The job
    // names carry the name and the exact scope, so two includes of one
    // name with different scopes are two jobs, and the cache check sees them.
    for (name, _) in jobs(doc) {
        assert!(!name.starts_with('.'), "`{COMPONENT}`: hidden job {name}");
        assert!(
            name.contains("$[[ inputs.name ]] $[[ inputs.branch ]]/$[[ inputs.watched_path ]]"),
            "`{COMPONENT}`: the job name `{name}` must carry the name, the branch and the path"
        );
    }
    assert_gitlab_template(COMPONENT, doc, &docs);
    let tick = "sentinel:tick $[[ inputs.name ]] $[[ inputs.branch ]]/$[[ inputs.watched_path ]]";
    let mr = "sentinel:mr $[[ inputs.name ]] $[[ inputs.branch ]]/$[[ inputs.watched_path ]]";
    assert_tick_and_mr(COMPONENT, doc, tick, mr);
    let job = &doc[tick];
    // The push rules take on_push and branch as literal text.
    let rules: Vec<&str> = job["rules"]
        .as_vec()
        .expect("rules")
        .iter()
        .map(|r| str_of(&r["if"], "a rule"))
        .collect();
    assert!(rules[1].contains("$CI_COMMIT_BRANCH == \"$[[ inputs.branch ]]\""));
    assert!(
        rules[2].contains(
            "\"$[[ inputs.branch ]]\" == \"\" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH"
        )
    );
    // A cold runner cannot guess where the releases are: required.
    assert!(
        inputs["release_project"]["default"].is_badvalue(),
        "`release_project` is required"
    );
    assert_eq!(
        inputs["sha256"]["regex"].as_str(),
        Some("^([0-9a-f]{64})?$")
    );
    // Cache and lock by the name, never by CI_JOB_NAME_SLUG, which
    // `libs/other`, `libs_other` and `Libs/Other` share.
    assert_eq!(
        job["resource_group"].as_str(),
        Some("sentinel-$CI_PROJECT_ID-$[[ inputs.name ]]")
    );
    let keys: Vec<&str> = job["cache"]
        .as_vec()
        .expect("cache is a list")
        .iter()
        .map(|c| str_of(&c["key"], "cache key"))
        .collect();
    assert_eq!(
        keys,
        [
            "sentinel-bin-$[[ inputs.sentinel_version ]]",
            "sentinel-state-$[[ inputs.name ]]"
        ]
    );
    assert!(!read(COMPONENT).contains("$CI_JOB_NAME_SLUG"));
}

/// The scope of a component job reaches sentinel as flags: no job variable
/// carries it (any pipeline, schedule, project or group variable of that
/// name would outrank it), and the script unsets the names sentinel reads
/// as fallbacks before it runs.
#[test]
fn the_components_scope_reaches_sentinel_as_flags_that_no_variable_overrides() {
    let docs = load(COMPONENT);
    let doc = &docs[1];
    for (name, job) in concrete_jobs(doc) {
        for var in [
            "SENTINEL_PATH",
            "SENTINEL_BRANCH",
            "SENTINEL_PROJECT",
            "SENTINEL_STATE",
            "SENTINEL_SOURCE",
            "SENTINEL_REPO",
        ] {
            assert!(
                job["variables"][var].is_badvalue(),
                "`{COMPONENT}` {name}: {var} as a job variable is outranked by any pipeline variable"
            );
        }
        let body = script(&job);
        let scope = block(COMPONENT, &body, "scope");
        assert!(scope.contains(
            "unset SENTINEL_PATH SENTINEL_BRANCH SENTINEL_PROJECT SENTINEL_STATE SENTINEL_LOCK SENTINEL_REPO SENTINEL_SOURCE SENTINEL_GITLAB_URL SENTINEL_RESCOPE"
        ));
        assert!(scope.contains("scope_path='$[[ inputs.watched_path ]]'"));
        assert!(scope.contains("scope_branch='$[[ inputs.branch ]]'"));
        // The git source on the job's own checkout: no token.
        assert!(scope.contains("set -- --source git --repo . --branch \"origin/$scope_branch\""));
        assert!(!body.contains("SENTINEL_GITLAB_TOKEN") && !body.contains("PRIVATE-TOKEN"));
    }
    let tick = resolved(
        doc,
        "sentinel:tick $[[ inputs.name ]] $[[ inputs.branch ]]/$[[ inputs.watched_path ]]",
    );
    let body = script(&tick);
    assert!(body.contains("[ -z \"$scope_path\" ] || set -- \"$@\" --path \"$scope_path\""));
    // The checkout step fetches what the tick needs: the watched branch, and
    // the history back to the last tick's head.
    let checkout = block(COMPONENT, &body, "checkout");
    assert!(
        checkout
            .contains("git fetch --quiet --no-tags origin \"+refs/heads/$scope_branch:$watched\"")
    );
    assert!(checkout.contains("--deepen=\"$depth\"") && checkout.contains("--unshallow"));
    let strategy = str_of(&tick["variables"]["GIT_STRATEGY"], "GIT_STRATEGY");
    assert_eq!(strategy, "$[[ inputs.git_strategy ]]");
    let options: Vec<&str> = docs[0]["spec"]["inputs"]["git_strategy"]["options"]
        .as_vec()
        .expect("options")
        .iter()
        .map(|o| str_of(o, "an option"))
        .collect();
    assert_eq!(
        options,
        ["fetch", "clone"],
        "the git source needs a checkout"
    );
}

/// A component's inputs are its whole configuration: a pipeline, schedule,
/// project or group variable outranks a job's `variables:`, so no input may
/// travel through one that a user could also set (`SENTINEL_VERSION` once
/// beat `sentinel_version`). The inputs are literal text in the rules and
/// the script; the only job variables are the runner's own (GIT_*) and
/// fixed values the script sets again.
#[test]
fn every_input_of_the_components_wins_over_every_variable() {
    for rel in [COMPONENT, FLEET_COMPONENT] {
        let docs = load(rel);
        for (name, job) in concrete_jobs(&docs[1]) {
            if let Some(vars) = job["variables"].as_hash() {
                for (k, v) in vars {
                    let k = str_of(k, "a variable name");
                    let v = v.as_str().unwrap_or_default();
                    assert!(
                        k.starts_with("GIT_") || !v.contains("$[[ inputs."),
                        "`{rel}` {name}: the input in {k} would lose to any variable {k}"
                    );
                    assert!(
                        k.starts_with("GIT_") || k == "SENTINEL_CODEQUALITY",
                        "`{rel}` {name}: the job variable {k}"
                    );
                }
            }
            for rule in job["rules"].as_vec().expect("rules") {
                let cond = str_of(&rule["if"], "a rule");
                let sentinel_vars: Vec<&str> = cond
                    .match_indices("$SENTINEL_")
                    .map(|(i, _)| {
                        cond[i + 1..]
                            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                            .next()
                            .unwrap_or_default()
                    })
                    .collect();
                assert!(
                    sentinel_vars.iter().all(|v| *v == "SENTINEL_SCHEDULE"),
                    "`{rel}` {name}: `{cond}` reads {sentinel_vars:?}, which a variable sets, not an input"
                );
            }
            let body = script(&job);
            let scope = block(rel, &body, "scope");
            for (var, input) in [
                ("SENTINEL_VERSION", "sentinel_version"),
                ("SENTINEL_RELEASE_PROJECT", "release_project"),
                ("SENTINEL_SHA256", "sha256"),
                ("SENTINEL_DOWNLOAD_URL", "download_url"),
            ] {
                assert!(
                    scope.contains(&format!("\n{var}='$[[ inputs.{input} ]]'\n")),
                    "`{rel}` {name}: {var} from the input {input}, over any variable"
                );
            }
            // The errors of the install step name the inputs.
            assert!(scope.contains(
                "say_version='the input sentinel_version' say_release='the input release_project' say_pin='the input sha256'"
            ));
        }
    }
}

/// The fleet component: one job per shard (`parallel:` from an input), each
/// ticking the group through the API with its own state directory, cached
/// and stored per shard, and an even share of the fleet's budget.
#[test]
fn the_fleet_component_ticks_a_group_per_shard_with_its_own_state() {
    let docs = load(FLEET_COMPONENT);
    assert_eq!(docs.len(), 2, "`{FLEET_COMPONENT}`: a spec and the jobs");
    let declared = assert_inputs_declared_and_used(FLEET_COMPONENT, &docs);
    for name in [
        "group",
        "shards",
        "sentinel_version",
        "daily_budget",
        "tags",
        "gitlab_url",
        "release_project",
        "sha256",
        "path",
    ] {
        assert!(
            declared.contains(name),
            "`{FLEET_COMPONENT}` lacks the input {name}"
        );
    }
    let inputs = &docs[0]["spec"]["inputs"];
    for required in ["group", "sentinel_version", "release_project"] {
        assert!(
            inputs[required]["default"].is_badvalue(),
            "`{required}` is required"
        );
    }
    assert_eq!(inputs["shards"]["type"].as_str(), Some("number"));
    assert_eq!(inputs["daily_budget"]["type"].as_str(), Some("number"));
    assert_eq!(inputs["tags"]["type"].as_str(), Some("array"));
    let text = read(FLEET_COMPONENT);
    assert_no_secret(FLEET_COMPONENT, &text, &docs);
    let doc = &docs[1];
    assert_every_job_stands_alone(FLEET_COMPONENT, doc);
    let ticking = tick_jobs(doc);
    assert_eq!(ticking.len(), 1, "one fleet job");
    let (name, job) = &ticking[0];
    assert_eq!(
        job["parallel"].as_str(),
        Some("$[[ inputs.shards ]]"),
        "`{FLEET_COMPONENT}` {name}: parallel from the input"
    );
    assert_eq!(
        job["rules"][0]["if"].as_str(),
        Some("$CI_PIPELINE_SOURCE == \"schedule\" && $SENTINEL_SCHEDULE == \"true\"")
    );
    let keys: Vec<&str> = job["cache"]
        .as_vec()
        .expect("cache is a list")
        .iter()
        .map(|c| str_of(&c["key"], "cache key"))
        .collect();
    assert_eq!(
        keys,
        [
            "sentinel-bin-$[[ inputs.sentinel_version ]]",
            "sentinel-fleet-$[[ inputs.name ]]-$CI_NODE_INDEX-of-$CI_NODE_TOTAL"
        ]
    );
    assert!(str_of(&job["resource_group"], "resource_group").contains("$CI_NODE_INDEX"));
    let body = script(job);
    let scope = block(FLEET_COMPONENT, &body, "scope");
    assert!(scope.contains(
        "set -- --source gitlab --gitlab-url \"$fleet_url\" --group \"$fleet_group\" --shard \"$shard\" --daily-budget \"$budget\""
    ));
    assert!(scope.contains("unset SENTINEL_GROUP SENTINEL_STATE_DIR"));
    // The whole budget: sentinel itself splits it across the shards.
    assert!(
        scope.contains("budget='$[[ inputs.daily_budget ]]'") && !scope.contains("b / n"),
        "the fleet's budget is passed whole"
    );
    let state = block(FLEET_COMPONENT, &body, "fleet-state");
    assert!(state.contains("state_package=\"sentinel-state-$scope\""));
    assert!(state.contains("packages/generic/$state_package/v1/state.tar.gz"));
    let tick = block(FLEET_COMPONENT, &body, "fleet-tick");
    assert!(tick.contains("set -- \"$@\" --state-dir \"$state_dir\""));
    assert!(tick.contains("sentinel tick \"$@\" || code=$?"));
    // The verdicts are the single-project templates'.
    let expected = expected();
    let arms = verdict_arms(&body);
    let get = |v: &str| arms.get(v).cloned().unwrap_or_default();
    assert_eq!(get("woke"), expected.woke);
    assert_eq!(get("red"), expected.failure);
    assert_eq!(get("stopped"), BTreeSet::from([143]));
    let green: BTreeSet<i32> = get("green").union(&get("woke")).copied().collect();
    assert_eq!(green, expected.success);
    // Upload only after a tick that neither failed nor was stopped.
    let upload = tick.find("--upload-file").expect("the upload");
    for verdict in ["red", "stopped"] {
        let exit = tick
            .find(&format!("if [ \"$verdict\" = {verdict} ]; then"))
            .expect("an exit");
        assert!(exit < upload, "a {verdict} tick reaches the upload");
    }
}

/// GitLab's CI/CD Catalog finds components only at `templates/<name>.yml` or
/// `templates/<name>/template.yml`, and publishes release tags that are
/// semantic versions without a `v`. The `component:` line of the docs and of
/// the template's header must be one that resolves: the path's last part is
/// the component's directory, and its version is a tag the release
/// pipeline builds.
#[test]
fn the_component_sits_where_the_catalog_looks_and_its_version_is_a_release_tag() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(root.join("templates/sentinel/template.yml").is_file());
    assert!(
        !root.join("ci-templates/component").exists(),
        "the old component path would be a second, stale copy"
    );
    let release = load(RELEASE);
    let rule = str_of(
        &release[0][".release"]["rules"][0]["if"],
        "the release rule",
    );
    assert_eq!(rule, "$CI_COMMIT_TAG =~ /^v?[0-9]+\\.[0-9]+\\.[0-9]+$/");
    let lines: Vec<(String, String)> = [COMPONENT, FLEET_COMPONENT, "docs/ci.md", "README.md"]
        .iter()
        .flat_map(|rel| {
            read(rel)
                .lines()
                .filter_map(|l| {
                    l.trim_start_matches(['#', ' ', '-'])
                        .strip_prefix("component: ")
                })
                .map(|l| (rel.to_string(), l.trim().to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        lines.len() >= 2,
        "a component: line in the template and in the docs: {lines:?}"
    );
    for (rel, line) in &lines {
        let (path, version) = line
            .split_once('@')
            .unwrap_or_else(|| panic!("`{rel}`: `{line}` has no version"));
        assert!(path.starts_with("$CI_SERVER_FQDN/"), "`{rel}`: `{line}`");
        let name = path.rsplit('/').next().unwrap_or_default();
        assert!(
            root.join(format!("templates/{name}/template.yml"))
                .is_file(),
            "`{rel}`: `{line}` names no component in templates/"
        );
        let parts: Vec<&str> = version.split('.').collect();
        assert!(
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())),
            "`{rel}`: `{version}` is not a semantic version without a `v`, which is what the Catalog publishes"
        );
    }
    // Every include of the file by path names the new place.
    for rel in ["docs/ci.md", "README.md", GITLAB, FLEET] {
        assert!(
            !read(rel).contains("ci-templates/component"),
            "`{rel}` still points at ci-templates/component"
        );
    }
}

#[test]
fn the_fleet_ticks_each_project_with_its_own_state_and_lock() {
    let docs = load(FLEET);
    assert_eq!(docs.len(), 1);
    let doc = &docs[0];
    assert_gitlab_template(FLEET, doc, &docs);
    let ticking = tick_jobs(doc);
    assert_eq!(ticking.len(), 1, "one fleet job");
    let (name, job) = &ticking[0];
    let matrix = job["parallel"]["matrix"]
        .as_vec()
        .unwrap_or_else(|| panic!("`{FLEET}` {name} has no parallel: matrix"));
    assert!(!matrix.is_empty() && matrix.len() <= 200);
    let mut names = BTreeSet::new();
    for entry in matrix {
        let slug = str_of(&entry["SENTINEL_NAME"], "SENTINEL_NAME");
        assert!(
            !slug.is_empty()
                && slug
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
            "`{slug}` is not a slug"
        );
        assert!(names.insert(slug), "two entries are named {slug}");
        assert!(
            !entry["SENTINEL_PROJECT"].is_badvalue(),
            "{slug}: SENTINEL_PROJECT"
        );
        assert!(
            entry["SENTINEL_BRANCH"].as_str().is_some(),
            "{slug}: SENTINEL_BRANCH"
        );
    }
    // One lock and one cache per entry; the state by its scope's hash.
    assert!(str_of(&job["resource_group"], "resource_group").contains("$SENTINEL_NAME"));
    let keys: Vec<&str> = job["cache"]
        .as_vec()
        .expect("cache is a list")
        .iter()
        .map(|c| str_of(&c["key"], "cache key"))
        .collect();
    assert!(keys.contains(&"sentinel-state-$SENTINEL_NAME"), "{keys:?}");
    assert_eq!(
        job["rules"][0]["if"].as_str(),
        Some("$CI_PIPELINE_SOURCE == \"schedule\" && $SENTINEL_SCHEDULE == \"true\"")
    );
}

#[test]
fn the_install_state_and_tick_steps_are_the_same_text_in_every_template() {
    let texts: Vec<(&str, String)> = [GITLAB, COMPONENT, FLEET]
        .iter()
        .map(|rel| (*rel, read(rel)))
        .collect();
    // What differs between them is the scope step alone, before the rest.
    for (rel, text) in &texts {
        let scope = text
            .find("# >>> scope")
            .unwrap_or_else(|| panic!("`{rel}`: no scope step"));
        assert!(
            scope < text.find("# >>> install").unwrap(),
            "`{rel}`: the scope comes first"
        );
    }
    // The fleet component keeps a directory of states, not one: its state
    // and tick steps are its own, its install step the same.
    assert_eq!(
        block(FLEET_COMPONENT, &read(FLEET_COMPONENT), "install"),
        block(GITLAB, &texts[0].1, "install"),
        "the `install` step of `{FLEET_COMPONENT}` differs"
    );
    for name in ["install", "state", "tick"] {
        let (first_rel, first) = &texts[0];
        let reference = block(first_rel, first, name);
        for (rel, text) in &texts[1..] {
            assert_eq!(
                block(rel, text, name),
                reference,
                "the `{name}` step of `{rel}` differs from `{first_rel}`'s"
            );
        }
    }
    for rel in [GITLAB, COMPONENT] {
        let text = read(rel);
        assert_eq!(block(rel, &text, "mr"), block(GITLAB, &read(GITLAB), "mr"));
    }
    // The scope is the project, the branch and the path, hashed (with the
    // source's name when it is not the API).
    let state = block(GITLAB, &texts[0].1, "state");
    assert!(state.contains(
        "printf '%s\\n%s\\n%s\\n' \"$scope_project\" \"$scope_branch\" \"$scope_path\"; [ \"$scope_source\" = gitlab ] || printf"
    ));
    // Two jobs of one pipeline on one cache fail before anything changes.
    let owner = state
        .find("two jobs must never share them")
        .expect("the collision check");
    assert!(
        owner
            < state
                .find("rm -rf \"$d\"")
                .expect("the old scopes' removal")
    );
}

#[test]
fn the_release_pipeline_builds_on_tags_and_publishes_checksummed_binaries() {
    let docs = load(RELEASE);
    assert_eq!(docs.len(), 1);
    let doc = &docs[0];
    let text = read(RELEASE);
    assert_no_secret(RELEASE, &text, &docs);
    let concrete = concrete_jobs(doc);
    assert!(concrete.len() >= 3, "build, image and release jobs");
    for (name, job) in &concrete {
        let cond = str_of(&job["rules"][0]["if"], "a rule");
        assert!(
            cond.contains("$CI_COMMIT_TAG"),
            "`{RELEASE}` {name} runs on tags only: `{cond}`"
        );
    }
    assert!(text.contains("scripts/release/publish \"$RELEASE_VERSION\""));
    assert!(text.contains("scripts/release/build"));
    let build = read("scripts/release/build");
    assert!(build.contains("x86_64-unknown-linux-gnu"));
    assert!(build.contains("aarch64-unknown-linux-gnu"));
    assert!(
        concrete.iter().any(|(_, j)| !j["release"].is_badvalue()),
        "`{RELEASE}`: a job creates the GitLab release"
    );
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.matches("FROM ").count() >= 2,
        "a multi-stage build"
    );
    for need in ["git", "ca-certificates", "curl"] {
        assert!(dockerfile.contains(need), "the image needs {need}");
    }
}

/// Sections of a systemd unit: name -> (key, value) in order. Fails on any
/// line that is not blank, a comment, a `[section]` or a `key=value`.
fn parse_ini(rel: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (n, raw) in read(rel).lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        assert!(
            !line.ends_with('\\'),
            "`{rel}` line {}: no continuation lines",
            n + 1
        );
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("`{rel}` line {} is not key=value: `{raw}`", n + 1));
        let section = current
            .clone()
            .unwrap_or_else(|| panic!("`{rel}` line {}: a key before any section", n + 1));
        assert!(
            !key.trim().is_empty() && !key.contains(char::is_whitespace),
            "`{rel}` line {}: bad key `{key}`",
            n + 1
        );
        sections
            .get_mut(&section)
            .unwrap()
            .push((key.to_string(), value.trim().to_string()));
    }
    sections
}

/// The values of `key` in `section`, in order.
fn values<'a>(
    ini: &'a BTreeMap<String, Vec<(String, String)>>,
    section: &str,
    key: &str,
) -> Vec<&'a str> {
    ini.get(section)
        .map(|kv| {
            kv.iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_systemd_service_is_hardened_and_treats_every_tick_code_as_success() {
    let unit = parse_ini(SERVICE);
    let one = |key: &str| -> &str {
        match values(&unit, "Service", key)[..] {
            [v] => v,
            ref other => panic!("`{SERVICE}`: [Service] {key}= should appear once, has {other:?}"),
        }
    };
    assert_eq!(one("Type"), "oneshot");
    let exec = one("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert!(
        words.len() >= 2 && words[0].ends_with("/sentinel") && words[1] == "tick",
        "ExecStart should call `sentinel tick`: `{exec}`"
    );

    // systemd counts 0 as success already; SuccessExitStatus adds the rest.
    let expected = expected();
    let listed = expand_codes(one("SuccessExitStatus"));
    let mut success = listed.clone();
    success.insert(0);
    assert_eq!(
        success, expected.success,
        "SuccessExitStatus and `sentinel tick --help`"
    );
    assert!(listed.is_disjoint(&expected.failure));

    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("StateDirectory", "sentinel"),
    ] {
        assert_eq!(one(key), value, "`{SERVICE}`: {key}=");
    }
    assert!(
        one("DynamicUser") == "yes" || !values(&unit, "Service", "User").is_empty(),
        "a DynamicUser= or a User="
    );
    assert!(
        one("EnvironmentFile").starts_with('/'),
        "secrets come from an EnvironmentFile="
    );
    for env in values(&unit, "Service", "Environment") {
        let name = env.split_once('=').map_or(env, |(k, _)| k);
        assert!(
            !name.contains("TOKEN") && !name.contains("KEY"),
            "`{SERVICE}` inlines the secret {name}; put it in the EnvironmentFile="
        );
    }
    // The state lives in the state directory, the one place it may write.
    assert!(
        values(&unit, "Service", "Environment").contains(&"SENTINEL_STATE=%S/sentinel/state.json"),
        "SENTINEL_STATE inside StateDirectory="
    );

    // The example environment file carries no live secret.
    for line in read(ENV_EXAMPLE)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
    {
        if let Some((k, v)) = line.split_once('=') {
            assert!(
                !(k.contains("TOKEN") || k.contains("KEY")) || v.trim().is_empty(),
                "`{ENV_EXAMPLE}` sets {k}"
            );
        }
    }
}

#[test]
fn the_systemd_timer_ticks_every_two_minutes_and_catches_up() {
    let timer = parse_ini(TIMER);
    assert_eq!(values(&timer, "Timer", "OnCalendar"), ["*:0/2"]);
    assert_eq!(values(&timer, "Timer", "Persistent"), ["true"]);
    assert_eq!(values(&timer, "Timer", "Unit"), ["sentinel.service"]);
    assert_eq!(values(&timer, "Install", "WantedBy"), ["timers.target"]);
}

#[test]
fn the_crontab_lists_the_binarys_codes_and_logs_both_streams() {
    let text = read(CRONTAB);
    let expected = expected();
    let listed = |prefix: &str| -> BTreeSet<i32> {
        let line = text
            .lines()
            .find_map(|l| l.trim_start_matches('#').trim().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("`{CRONTAB}` has no `{prefix}` comment"));
        expand_codes(line)
    };
    assert_eq!(
        listed("success:"),
        expected.success,
        "the crontab's success codes"
    );
    assert_eq!(
        listed("failure:"),
        expected.failure,
        "the crontab's failure codes"
    );

    assert!(
        text.lines().any(|l| l.starts_with("PATH=")),
        "cron's PATH is minimal: set it"
    );
    // The git line is live; the GitLab line is the commented alternative.
    let schedules: Vec<&str> = text
        .lines()
        .map(|l| l.strip_prefix('#').unwrap_or(l))
        .filter(|l| l.starts_with("*/2"))
        .collect();
    assert_eq!(schedules.len(), 2, "a git-source and a GitLab-source line");
    for line in &schedules {
        assert!(line.contains("sentinel tick"), "`{line}`");
        assert!(line.contains(" cd "), "`{line}` sets its working directory");
        assert!(line.contains("--state /"), "`{line}` names its state");
        assert!(
            line.contains(">>/") && line.trim_end().ends_with("2>&1"),
            "`{line}` logs"
        );
        assert!(
            !line.contains("flock"),
            "sentinel takes its own lock: `{line}`"
        );
    }
    assert!(
        schedules[0].contains("git fetch"),
        "the git line fetches its clone first"
    );
    assert!(schedules[1].contains("--source gitlab") && !schedules[1].contains("git fetch"));
    assert_no_secret(CRONTAB, &text, &[]);
}

/// The cases gitlab-ci-local cannot show, run on the component's own job
/// script under bash (`scripts/ci-local/script-logic`): a second scope in
/// one cache in one pipeline fails before it changes anything, a tick that
/// exits 143 keeps its whole state and uploads nothing, and a shallow clone
/// is deepened back to the last tick's head.
#[test]
fn the_job_script_fails_a_shared_cache_keeps_a_stopped_tick_and_deepens_a_shallow_clone() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().expect("a temporary directory");
    let out = Command::new("bash")
        .arg(root.join("scripts/ci-local/script-logic"))
        .arg(root.join(COMPONENT))
        .arg(work.path().join("logic"))
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "script-logic failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With patches on, the API templates keep one merge request of the sandbox
/// branch (`SENTINEL_MERGE_REQUEST`), unless the project set it itself; with
/// patches off they leave it unset. The scope block runs under bash.
#[test]
fn patches_on_in_the_api_templates_open_one_merge_request_unless_told_otherwise() {
    for rel in [GITLAB, FLEET] {
        let docs = load(rel);
        // The jobs document is the last one (the include template opens
        // with its spec).
        let doc = docs.last().unwrap();
        let (name, tick) = jobs(doc)
            .into_iter()
            .map(|(name, _)| (name.clone(), resolved(doc, &name)))
            .find(|(_, job)| script(job).contains("sentinel tick"))
            .unwrap_or_else(|| panic!("`{rel}` has no tick job"));
        let scope = block(rel, &script(&tick), "scope");
        let run = |vars: &[(&str, &str)]| {
            let mut cmd = std::process::Command::new("bash");
            cmd.arg("-c")
                .arg(format!(
                    "{scope}\necho \"mr=${{SENTINEL_MERGE_REQUEST-unset}}\""
                ))
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap())
                .env("CI_PROJECT_ID", "7")
                .env("CI_DEFAULT_BRANCH", "main");
            for (k, v) in vars {
                cmd.env(k, v);
            }
            let out = cmd.output().unwrap();
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            said.lines()
                .find_map(|l| l.strip_prefix("mr="))
                .unwrap_or_else(|| panic!("`{rel}` {name}: {said}"))
                .to_string()
        };
        assert_eq!(run(&[]), "unset", "`{rel}` {name}");
        assert_eq!(
            run(&[("SENTINEL_AGENT", "./agent.sh")]),
            "true",
            "`{rel}` {name}"
        );
        assert_eq!(
            run(&[("SENTINEL_PROPOSE", "patches")]),
            "true",
            "`{rel}` {name}"
        );
        assert_eq!(
            run(&[
                ("SENTINEL_PROPOSE", "patches"),
                ("SENTINEL_MERGE_REQUEST", "false")
            ]),
            "false",
            "`{rel}` {name}"
        );
    }
}
