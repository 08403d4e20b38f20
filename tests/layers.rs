//! Checks that the arrows between the layers run one way: `src/state/` keeps
//! the records and knows nothing of the gates, the tick, the advisor, the
//! sources or the commands that use it (ARCHITECTURE.md, the code map).

use std::fs;
use std::path::{Path, PathBuf};

/// The modules above the state layer: it stores what they decide and is
/// handed what it needs, so naming any of them from `src/state/` is a cycle.
const ABOVE_STATE: &[&str] = &[
    "app",
    "cli",
    "command",
    "gate",
    "llm",
    "mr_report",
    "patch",
    "publish",
    "record",
    "report",
    "reset",
    "simulate",
    "source",
    "tick",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list `{}`: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The text without `//` comments, so that prose naming a layer is not a use
/// of it.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The top-level modules named after each `crate::`, including the members of
/// a group such as `crate::{gate::retry, state}`.
fn crate_modules(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // Only the group's own members: nested groups belong to them.
            let mut depth = 0;
            let mut member_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => member_start = true,
                    c if member_start && depth == 0 && is_ident(c) => {
                        let name: String =
                            group[i..].chars().take_while(|&c| is_ident(c)).collect();
                        names.push(name);
                        member_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(rest.chars().take_while(|&c| is_ident(c)).collect());
        }
    }
    names
}

#[test]
fn the_state_layer_names_no_layer_above_it() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src/state"), &mut files);
    assert!(files.len() > 5, "found too few files under `src/state`");
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for name in crate_modules(&code(&text)) {
            if ABOVE_STATE.contains(&name.as_str()) {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                found.push(format!("{shown}: crate::{name}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the state layer names layers above it; move the type below (src/state/records/) \
         or hand the logic in from the caller:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_grouped_or_nested_use_of_a_layer_is_found() {
    let names = crate_modules(
        "use crate::{\n    gate::retry::Retry,\n    state::{a, b},\n};\nlet x = crate::tick::run();\n\
         use crate::state::x; // crate::llm in a comment is kept by `crate_modules` alone\n",
    );
    assert_eq!(names, ["gate", "state", "tick", "state", "llm"]);
    assert_eq!(
        crate_modules(&code("// crate::gate\nuse crate::state;")),
        ["state"]
    );
    assert!(crate_modules("use mycrate::gate;").is_empty());
}
