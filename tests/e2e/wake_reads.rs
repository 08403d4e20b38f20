//! What a wake reads of the sharded state on a repository whose imports do
//! not all resolve: the shards of what changed, never every shard whose
//! summary counts a trigger. A shard the wake must not read is damaged
//! first, so reading it fails the tick.

use std::fs;
use std::path::PathBuf;

use crate::expect_code;
use crate::util::layout::shard_paths;
use crate::util::{Sandbox, WATCHED, at, plain_js};

/// `n` files; every tenth imports a sibling that does not exist.
fn with_unresolved_imports(n: usize) -> Sandbox {
    let sb = Sandbox::new();
    for i in 0..n {
        let body = if i % 10 == 3 {
            format!("import x from './missing{i}';\nexport default x;\n")
        } else {
            plain_js(&format!("f{i}"))
        };
        sb.repo.write(&format!("{WATCHED}/f{i}.js"), body);
    }
    sb.repo.commit("files, some importing what is not there");
    sb
}

/// Damage every shard but the one holding `path`; returns how many.
fn damage_all_but(sb: &Sandbox, path: &str) -> usize {
    let key = format!("\"{WATCHED}/{path}\":");
    let others: Vec<PathBuf> = shard_paths(&sb.state)
        .into_iter()
        .filter(|p| !fs::read_to_string(p).unwrap().contains(&key))
        .collect();
    for p in &others {
        let mut bytes = fs::read(p).unwrap();
        bytes.push(b'\n');
        fs::write(p, bytes).unwrap();
    }
    others.len()
}

fn one_file_wake_reads_one_shard(extra: &[&str]) {
    let sb = with_unresolved_imports(2000);
    expect_code(&sb.tick(&at(0), extra), 10);
    let shards = shard_paths(&sb.state);
    assert!(shards.len() >= 8, "{} shards", shards.len());
    // Every shard counts a trigger: 200 files with unresolved imports.
    let manifest = fs::read_to_string(&sb.state).unwrap();
    assert_eq!(
        manifest.matches("\"triggers\":").count(),
        shards.len(),
        "{manifest}"
    );
    sb.repo
        .write(&format!("{WATCHED}/f7.js"), "// f7, edited\n");
    sb.repo.commit("edit f7");
    let damaged = damage_all_but(&sb, "f7.js");
    assert_eq!(damaged, shards.len() - 1);
    let out = sb.tick(&at(2), extra);
    expect_code(&out, 12);
    assert_eq!(judged(&out), [format!("{WATCHED}/f7.js")]);
}

#[test]
fn a_one_file_wake_reads_one_shard_whatever_unresolved_imports_the_others_hold() {
    one_file_wake_reads_one_shard(&[]);
}

#[test]
fn a_one_file_wake_with_autonomy_on_reads_no_shard_for_a_full_trigger_list() {
    one_file_wake_reads_one_shard(&["--autonomy", "controlled"]);
}

#[test]
fn invariant_22_a_one_file_wake_looks_up_no_shard_it_does_not_read() {
    // Every shard but the edited file's is removed: a wake that looked each
    // one up (512 at 100,000 files) would fail naming one, a wake that costs
    // what changed never notices; the commands that read them all still do.
    let sb = with_unresolved_imports(2000);
    expect_code(&sb.tick(&at(0), &[]), 10);
    sb.repo
        .write(&format!("{WATCHED}/f7.js"), "// f7, edited\n");
    sb.repo.commit("edit f7");
    let key = format!("\"{WATCHED}/f7.js\":");
    let mut removed = 0;
    for p in shard_paths(&sb.state) {
        if !fs::read_to_string(&p).unwrap().contains(&key) {
            fs::remove_file(&p).unwrap();
            removed += 1;
        }
    }
    assert!(removed >= 7, "{removed} shards removed");
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    assert_eq!(judged(&out), [format!("{WATCHED}/f7.js")]);
    let stats = sb
        .sentinel(["stats", "--json", "--state"])
        .arg(&sb.state)
        .output();
    expect_code(&stats, 1);
    assert!(stats.stderr.contains("is missing"), "{}", stats.stderr);
}

#[test]
fn a_commit_outside_the_watched_path_stays_a_no_op_whatever_the_early_load_found() {
    // A moved tip makes the tick load its state while git walks the new
    // commits; when they touch nothing watched, that load and its errors are
    // dropped: the tick is the no-op it always was. A wake then says it all.
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let text = fs::read_to_string(&sb.state).unwrap();
    assert!(text.contains("\"records\":2"), "{text}");
    fs::write(&sb.state, text.replace("\"records\":2", "\"records\":3")).unwrap();
    sb.repo.write("elsewhere/readme.md", "not watched\n");
    sb.repo.commit("outside the watched path");
    let (bytes, mtime) = (
        fs::read(&sb.state).unwrap(),
        fs::metadata(&sb.state).unwrap().modified().unwrap(),
    );
    let noop = sb.tick(&at(1), &[]);
    expect_code(&noop, 0);
    // Invariant 2 holds for it: one request, no file read, the state as it was.
    assert_eq!(noop.json()["requests"], 1, "{}", noop.stdout);
    assert_eq!(noop.json()["file_reads"], 0, "{}", noop.stdout);
    assert_eq!(fs::read(&sb.state).unwrap(), bytes);
    assert_eq!(fs::metadata(&sb.state).unwrap().modified().unwrap(), mtime);
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo.commit("inside");
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 1);
    assert!(out.stderr.contains("claims 3 records"), "{}", out.stderr);
}

/// `n` files in directories of 100; every tenth imports a sibling that
/// does not exist.
fn in_directories(n: usize) -> Sandbox {
    let sb = Sandbox::new();
    for i in 0..n {
        let body = if i % 10 == 3 {
            format!("import x from './missing{i}';\nexport default x;\n")
        } else {
            plain_js(&format!("f{i}"))
        };
        sb.repo
            .write(&format!("{WATCHED}/d{}/f{i}.js", i / 100), body);
    }
    sb.repo
        .commit("files in directories, some importing what is not there");
    sb
}

/// The shard files in bucket order; `None` for an empty bucket.
fn shards_by_bucket(sb: &Sandbox) -> Vec<Option<PathBuf>> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&sb.state).unwrap()).unwrap();
    let dir = crate::util::layout::shard_dir(&sb.state);
    manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().map(|id| dir.join(format!("{id}.json"))))
        .collect()
}

fn judged(out: &crate::util::Output) -> Vec<String> {
    out.json()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_file_added_elsewhere_reads_no_shard_of_the_unresolved_imports() {
    let sb = in_directories(2000);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let shards = shards_by_bucket(&sb);
    assert!(shards.len() >= 8, "{} buckets", shards.len());
    let added = format!("{WATCHED}/fresh/new.js");
    sb.repo.write(&added, plain_js("new"));
    sb.repo.commit("add a file in a new directory");
    // Only the bucket the new file goes to may be read.
    let home = sentinel::state::files::bucket_of(&added, shards.len());
    for (i, p) in shards.iter().enumerate() {
        if let Some(p) = p.as_ref().filter(|_| i != home) {
            let mut bytes = fs::read(p).unwrap();
            bytes.push(b'\n');
            fs::write(p, bytes).unwrap();
        }
    }
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    assert_eq!(judged(&out), [added]);
}

#[test]
fn a_file_added_where_an_unresolved_import_points_resolves_it() {
    let sb = in_directories(2000);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let added = format!("{WATCHED}/d0/missing3.js");
    sb.repo.write(&added, plain_js("missing3"));
    sb.repo.commit("add the file f3 imports");
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    // The importer is judged again, and no other file with an unresolved
    // import (f13 imports ./missing13, which is still not there).
    assert_eq!(judged(&out), [added, format!("{WATCHED}/d0/f3.js")]);
}

/// The autonomy triggers the manifest's header keeps, as (path, kind).
fn header_triggers(sb: &Sandbox) -> Vec<(String, String)> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&sb.state).unwrap()).unwrap();
    manifest["autonomy_triggers"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    let s = |k: &str| t[k].as_str().unwrap().to_string();
                    (s("path"), s("kind"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_trigger_fixed_by_a_wake_leaves_the_header_and_the_list_is_filled_again() {
    let sb = with_unresolved_imports(2000);
    let on = ["--autonomy", "controlled"];
    expect_code(&sb.tick(&at(0), &on), 10);
    let before = header_triggers(&sb);
    assert_eq!(before.len(), 50, "{before:?}");
    // Fix the first file the list names: its import goes.
    let (fixed, kind) = before[0].clone();
    assert_eq!(kind, "dependency_drift");
    sb.repo.write(&fixed, "// fixed\n");
    sb.repo.commit("fix one import");
    expect_code(&sb.tick(&at(2), &on), 12);
    let after = header_triggers(&sb);
    assert!(!after.iter().any(|(p, _)| *p == fixed), "{after:?}");
    assert_eq!(after.len(), 50, "filled again: {after:?}");
    assert_eq!(
        after[..49],
        before[1..],
        "the others are kept, in path order"
    );
}
