//! Reading the state the way `jq` users do: the manifest with the records of
//! its shards put back under `files`, and writing a state of schema 1 (one
//! document) for the migration tests.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// `<state>.d`, where the shards live.
pub fn shard_dir(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap().to_os_string();
    name.push(".d");
    state.with_file_name(name)
}

/// The shard files the manifest names, in its order.
pub fn shard_paths(state: &Path) -> Vec<PathBuf> {
    let manifest: Value = serde_json::from_slice(&fs::read(state).unwrap()).unwrap();
    manifest["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["id"].as_str())
        .map(|id| shard_dir(state).join(format!("{id}.json")))
        .collect()
}

/// The whole state as one JSON value: a manifest's shards merged into `files`.
pub fn state_doc(state: &Path) -> Value {
    let mut doc: Value = serde_json::from_slice(&fs::read(state).unwrap()).expect("JSON");
    if doc.get("layout").is_none() {
        return doc;
    }
    let mut files = Map::new();
    for path in shard_paths(state) {
        let shard: Value = serde_json::from_slice(&fs::read(&path).unwrap()).expect("JSON");
        for (p, r) in shard["files"].as_object().unwrap() {
            files.insert(p.clone(), r.clone());
        }
    }
    doc["files"] = Value::Object(files);
    doc
}

/// Write `doc` (from `state_doc`) as a state of schema 1: one document,
/// no shards.
pub fn write_single(state: &Path, doc: &Value) {
    let mut doc = doc.clone();
    let o = doc.as_object_mut().unwrap();
    o.remove("layout");
    o.remove("shards");
    o.insert("schema".into(), Value::from(1));
    fs::write(state, serde_json::to_vec(&doc).unwrap()).unwrap();
    let _ = fs::remove_dir_all(shard_dir(state));
}
