//! Pins which layer crate may use which (ARCHITECTURE.md, the code map). The
//! compiler refuses an import a crate's manifest does not allow; this test
//! keeps the manifests themselves from allowing an arrow upward or between
//! siblings (the store, the sources and the advisor know nothing of each
//! other).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// Each layer crate and the sentinel crates its manifest may name.
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("io", &["sentinel-core"]),
    ("store", &["sentinel-core", "sentinel-io"]),
    ("source", &["sentinel-core", "sentinel-io"]),
    ("advisor", &["sentinel-core", "sentinel-io"]),
];

/// The `sentinel-*` names a manifest depends on, in any dependency table.
fn sentinel_deps(manifest: &str) -> Vec<String> {
    let mut names: Vec<String> = manifest
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
        .filter(|k| k.starts_with("sentinel-"))
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_layer_names_only_the_layers_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = BTreeMap::new();
    for entry in fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        found.insert(name, sentinel_deps(&manifest));
    }
    let expected: BTreeMap<String, Vec<String>> = ALLOWED
        .iter()
        .map(|(c, deps)| (c.to_string(), deps.iter().map(|d| d.to_string()).collect()))
        .collect();
    assert_eq!(
        found, expected,
        "a layer crate names a crate beside or above it (or a crate is new): \
         move the shared part down, or update ARCHITECTURE.md and this table"
    );
}

#[test]
fn the_binary_is_the_one_crate_that_names_every_layer() {
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap();
    for (layer, _) in ALLOWED {
        assert!(
            deps.contains(&format!("sentinel-{layer} = ")),
            "the binary does not depend on sentinel-{layer}"
        );
    }
}

/// The functional core opens no file, starts no process and reaches no
/// peer: its manifest names none of the crates that would let it.
#[test]
fn the_core_depends_on_no_io_crate() {
    let manifest =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/core/Cargo.toml"))
            .unwrap();
    for io in [
        "ureq",
        "gix",
        "tempfile",
        "rustix",
        "landlock",
        "libc",
        "signal-hook",
        "flate2",
        "tar",
    ] {
        assert!(
            !manifest.lines().any(|l| l.starts_with(&format!("{io} "))),
            "sentinel-core depends on `{io}`: the I/O belongs in sentinel-io or a layer above"
        );
    }
}
