//! Checks that the README and the pages in `docs/` hold together: every relative link resolves,
//! the README stays a short front door, and the wake reasons are tabled in exactly one place.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

use sentinel::gate::wake::Reason;

/// Pages that are generated from `sentinel --help` rather than written by hand. A link to one
/// of them may dangle on a checkout where the page has not been generated yet; once the page
/// exists, its anchors are checked like any other.
const GENERATED: &[&str] = &["docs/usage.md"];

/// The README's limit, in lines as `wc -l` counts them.
const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `docs/*.md`, as paths relative to the repository root.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    if let Ok(entries) = fs::read_dir(root().join("docs")) {
        let mut docs: Vec<PathBuf> = entries
            .map(|e| e.expect("a readable docs/ entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .map(|p| PathBuf::from("docs").join(p.file_name().unwrap()))
            .collect();
        docs.sort();
        pages.extend(docs);
    }
    pages
}

fn read(page: &Path) -> String {
    fs::read_to_string(root().join(page)).unwrap_or_else(|e| panic!("{}: {e}", page.display()))
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The line with its inline code spans removed: a `[x](y)` inside backticks is not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                out.push_str(&rest[start..]);
                return out;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links `[text](target)` and images `![alt](target)` of a line. A
/// title (`[x](y "title")`) and angle brackets (`[x](<y>)`) are stripped.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = i;
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let inner = after[..end].trim();
        let target = match inner.strip_prefix('<') {
            Some(angled) => angled.split('>').next().unwrap_or(""),
            None => inner.split_whitespace().next().unwrap_or(""),
        };
        out.push(target.to_string());
        rest = &after[end.min(after.len())..];
    }
    out
}

/// GitHub's anchor for a heading: lowercase; letters, digits, `_`, `-` and spaces kept, every
/// other character dropped; each space becomes `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings. A repeated heading gets `-1`, `-2`, ... as on
/// GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `a/b/../c` as `a/c`, without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with one link of `page`, if anything.
fn check_link(page: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://") || target.starts_with("https://") {
        return None;
    }
    if target.starts_with("mailto:") {
        return None;
    }
    if target.is_empty() {
        return Some("empty target".into());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    if path.starts_with('/') {
        return Some("absolute path: links must be relative to the page".into());
    }
    let resolved = if path.is_empty() {
        page.to_path_buf()
    } else {
        normalize(&page.parent().unwrap_or(Path::new("")).join(path))
    };
    let on_disk = root().join(&resolved);
    if !on_disk.exists() {
        let generated = GENERATED.iter().any(|g| Path::new(g) == resolved);
        return (!generated).then(|| format!("{} does not exist", resolved.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if resolved.extension().is_none_or(|e| e != "md") || on_disk.is_dir() {
        return None;
    }
    let known = anchors(&read(&resolved));
    (!known.contains(anchor)).then(|| {
        format!(
            "{} has no heading with the anchor #{anchor} (it has: {})",
            resolved.display(),
            known.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = read(&page);
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                checked += 1;
                if let Some(why) = check_link(&page, &target) {
                    broken.push(format!("{}:{n}: ({target}): {why}", page.display()));
                }
            }
        }
    }
    assert!(checked > 0, "no links found at all: the scanner is broken");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_is_at_most_250_lines() {
    let readme = read(Path::new("README.md"));
    let lines = readme.bytes().filter(|b| *b == b'\n').count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; the front door holds at most {README_MAX_LINES}: \
         move the rest to a page in docs/ and link to it"
    );
}

/// A Markdown table: its header cells and its rows' cells.
struct Table {
    page: PathBuf,
    line: usize,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

/// The cells of a table row, split on the `|` that are not escaped as `\|`.
fn cells(line: &str) -> Vec<String> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    let mut out = vec![String::new()];
    let mut escaped = false;
    for c in t.chars() {
        match c {
            '|' if !escaped => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
        escaped = c == '\\';
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

fn is_separator(line: &str) -> bool {
    let t = line.trim();
    t.starts_with('|') && t.contains('-') && t.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
}

/// The tables of a page: a `|` row directly followed by a separator row, then the `|` rows
/// under it.
fn tables(page: &Path, text: &str) -> Vec<Table> {
    let lines = prose(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < lines.len() {
        let (n, head) = lines[i];
        let (n2, sep) = lines[i + 1];
        if head.trim().starts_with('|') && n2 == n + 1 && is_separator(sep) {
            let mut rows = Vec::new();
            let mut j = i + 2;
            while j < lines.len() && lines[j].0 == n + (j - i) && lines[j].1.trim().starts_with('|')
            {
                rows.push(cells(lines[j].1));
                j += 1;
            }
            out.push(Table {
                page: page.to_path_buf(),
                line: n,
                header: cells(head),
                rows,
            });
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// The wake reasons a cell names, as whole words (`first_run`, `` `sha_unavailable` ``).
fn reasons_named(cell: &str) -> BTreeSet<&'static str> {
    let words: BTreeSet<&str> = cell
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| words.contains(r))
        .collect()
}

/// A table is a wake-reason table when the first cell of its header, without backticks and in
/// lowercase, is `reason` or `wake reason`, or when the cells of its first column name at least
/// five distinct wake reasons (so a second copy cannot hide under another header). There must
/// be exactly one in README.md and docs/*.md together, and its first column must name every
/// reason the code knows (`Reason::ALL`).
#[test]
fn there_is_one_wake_reason_table() {
    let mut found = Vec::new();
    for page in pages() {
        for table in tables(&page, &read(&page)) {
            let first = table
                .header
                .first()
                .map(|c| c.replace('`', "").to_lowercase());
            let by_header = matches!(first.as_deref(), Some("reason" | "wake reason"));
            let named: BTreeSet<&str> = table
                .rows
                .iter()
                .filter_map(|r| r.first())
                .flat_map(|c| reasons_named(c))
                .collect();
            if by_header || named.len() >= 5 {
                found.push((table, named));
            }
        }
    }
    let places: Vec<String> = found
        .iter()
        .map(|(t, _)| format!("{}:{}", t.page.display(), t.line))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one wake-reason table in README.md and docs/*.md, found {}: {}",
        found.len(),
        places.join(", ")
    );
    let (table, named) = &found[0];
    let missing: Vec<&str> = Reason::ALL
        .iter()
        .map(|r| r.as_str())
        .filter(|r| !named.contains(r))
        .collect();
    assert!(
        missing.is_empty(),
        "the wake-reason table at {}:{} does not list {}",
        table.page.display(),
        table.line,
        missing.join(", ")
    );
}
