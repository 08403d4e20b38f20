//! The sharded state layout seen from outside: what a wake writes, and the
//! migration of a state of schema 1 (one document) on its next wake.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::layout::{shard_dir, shard_paths, state_doc, write_single};
use crate::util::{Sandbox, WATCHED, at, plain_js};

/// A repository of `n` files, each importing nothing.
fn many(n: usize) -> Sandbox {
    let sb = Sandbox::new();
    for i in 0..n {
        sb.repo
            .write(&format!("{WATCHED}/f{i}.js"), plain_js(&format!("f{i}")));
    }
    sb.repo.commit("many files");
    sb
}

/// The bytes the report says the state save wrote.
fn state_bytes(r: &Value) -> u64 {
    let w = r["writes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["kind"] == "state")
        .expect("a state write");
    w["detail"]
        .as_str()
        .unwrap()
        .trim_end_matches(" bytes")
        .parse()
        .unwrap()
}

#[test]
fn a_one_file_wake_rewrites_one_shard_and_the_manifest() {
    let sb = many(2000);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let before: Vec<_> = shard_paths(&sb.state);
    assert!(before.len() >= 8, "{} shards", before.len());
    let total: u64 = before.iter().map(|p| fs::metadata(p).unwrap().len()).sum();

    sb.repo
        .write(&format!("{WATCHED}/f7.js"), "// f7, edited\n");
    sb.repo.commit("edit f7");
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    let after = shard_paths(&sb.state);
    let new: Vec<_> = after.iter().filter(|p| !before.contains(p)).collect();
    assert_eq!(new.len(), 1, "one shard rewritten: {new:?}");
    // What was written: that shard and the manifest, nothing else.
    let manifest = fs::metadata(&sb.state).unwrap().len();
    let shard = fs::metadata(new[0]).unwrap().len();
    assert_eq!(state_bytes(&out.json()), manifest + shard);
    assert!(shard * 4 < total, "a shard of {shard} bytes out of {total}");
    // The replaced shard is gone; nothing else is in the directory.
    let on_disk = fs::read_dir(shard_dir(&sb.state)).unwrap().count();
    assert_eq!(on_disk, after.len());
    assert_eq!(
        state_doc(&sb.state)["files"].as_object().unwrap().len(),
        2000
    );
}

/// `ms` milliseconds since the epoch as the RFC 3339 string schema 1 wrote.
fn rfc3339(ms: i64) -> Value {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    Value::from(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
}

#[test]
fn a_state_of_schema_1_migrates_on_its_next_wake_with_the_same_records() {
    let sb = many(600);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let doc = state_doc(&sb.state);
    let records = doc["files"].clone();
    let f0 = &records[format!("{WATCHED}/f0.js")];
    assert!(
        f0["last_ts"].is_i64(),
        "a record's times are integers: {f0}"
    );
    assert!(f0["decision"]["ts"].is_i64(), "{f0}");
    // What an older build wrote: one document, times as RFC 3339 strings.
    let mut old = doc.clone();
    for r in old["files"].as_object_mut().unwrap().values_mut() {
        for key in ["last_ts", "changed_ts", "first_ts"] {
            if let Some(ms) = r[key].as_i64() {
                r[key] = rfc3339(ms);
            }
        }
        if let Some(ms) = r["decision"]["ts"].as_i64() {
            r["decision"]["ts"] = rfc3339(ms);
        }
    }
    write_single(&sb.state, &old);
    assert!(!shard_dir(&sb.state).exists());
    assert_eq!(sb.stats()["novelty"]["tracked_files"], 600);

    // A wake about one file: every other record comes through as it was.
    sb.repo
        .write(&format!("{WATCHED}/f7.js"), "// f7, edited\n");
    sb.repo.commit("edit f7");
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 12);
    let migrated = state_doc(&sb.state);
    assert_eq!(migrated["schema"], 2);
    assert!(migrated["layout"]["buckets"].as_u64().unwrap() > 1);
    let mut same = migrated["files"].clone();
    let mut expected = records.clone();
    let f7 = format!("{WATCHED}/f7.js");
    assert_ne!(same[&f7], expected[&f7], "the edited file was judged again");
    same.as_object_mut().unwrap().remove(&f7);
    expected.as_object_mut().unwrap().remove(&f7);
    assert_eq!(same, expected, "the same records");
    // The manifest stays small: no record is in it.
    let manifest: Value = serde_json::from_slice(&fs::read(&sb.state).unwrap()).unwrap();
    assert!(manifest.get("files").is_none());
}
