//! Hostile peers that lie about sizes or answer without measure: sizes are
//! counted, never taken from a header; reads stop at their limit and say
//! so; findings, reports and the dashboard stay within their bounds; and
//! patches keep a file's mode, refuse links and names that are not UTF-8,
//! and bound the commit message.

use std::fs;

use serde_json::Value;

use crate::expect_code;
use crate::util::gitlab::{Api, Endpoint, Reply};
use crate::util::{Sandbox, WATCHED, at};

/// The state file as JSON.
fn state_of(sb: &Sandbox) -> Value {
    serde_json::from_slice(&fs::read(&sb.state).expect("a saved state")).expect("state JSON")
}

/// The notes of a `--json` report, one per line.
fn notes(report: &Value) -> String {
    report["notes"]
        .as_array()
        .map(|n| {
            n.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn a_blob_read_announcing_2_gb_with_18_bytes_records_18_bytes() {
    let sb = Sandbox::new();
    let rel = format!("{WATCHED}/a.js");
    let content = b"module.exports=1;\n";
    assert_eq!(content.len(), 18);
    sb.repo.write(&rel, content);
    sb.repo.commit("one small file");
    let gl = sb.gitlab();
    // The whole file, under a length that claims 2 GB; then the connection
    // closes. The bytes hash to the content id asked for: they are the file.
    gl.push(
        Endpoint::BlobRaw,
        Reply::Truncated {
            status: 200,
            declared: 2_147_483_648,
            body: content.to_vec(),
        },
    );
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(0)).output();
    expect_code(&out, 10);
    let report = out.json();
    let file = &state_of(&sb)["files"][&rel];
    assert_eq!(file["content"]["chars"], 18, "{file}");
    let judged = &report["files"][0];
    assert_ne!(judged["outcome"], "too_large", "{report}");

    // A reuse counts the tokens of 18 bytes, not of 2 GB.
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(2)).output();
    let saved = state_of(&sb)["files"][&rel]["tokens_saved"].as_u64();
    assert!(saved.unwrap_or(0) < 1_000, "{saved:?}; {}", out.stdout);
}

#[test]
fn a_blob_read_stops_at_the_limit_and_says_so() {
    let sb = Sandbox::new();
    let rel = format!("{WATCHED}/big.js");
    sb.repo.write(&rel, "// x\n".repeat(20_000));
    sb.repo.commit("one 100 kB file");
    let gl = sb.gitlab();
    let out = sb.api_tick_cmd(&Api::new(&gl), &at(0)).output();
    expect_code(&out, 10);
    let report = out.json();
    assert!(
        notes(&report).contains(&format!(
            "`{rel}`: the read stopped at the limit of 65536 bytes (--max-file-bytes)"
        )),
        "{report}"
    );
    let file = &state_of(&sb)["files"][&rel];
    assert_eq!(file["content"]["chars"], 65_537, "the most counted: {file}");
}
