//! Local dependencies: relative imports found in a file, resolved against the tree.
//!
//! A file's fingerprint covers the files it imports locally, so that a change in a
//! helper re-opens the files that depend on it. Only relative imports count: bare
//! package names live outside the tree and are covered by lock files instead.
//!
//! Scanning is a small hand-written lexer per language rather than line matching,
//! because comments and string literals that merely *mention* an import must not
//! create a dependency, and real imports may span several lines.

use std::collections::{BTreeSet, HashSet};

/// Bytes beyond this are not scanned: imports sit at the top of a file, and a bound
/// keeps a huge generated or binary file from dominating a run.
const MAX_SCAN: usize = 1 << 20;

/// Extensions treated as JavaScript or TypeScript sources.
const JS_EXTS: [&str; 8] = ["js", "jsx", "mjs", "cjs", "ts", "tsx", "mts", "cts"];

/// Extensions a bundler or TypeScript appends to an extensionless specifier, in the
/// order they are tried.
const JS_RESOLVE_EXTS: [&str; 9] = [
    ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts", ".json",
];

/// Files whose `mod x;` children live beside them rather than in a directory named
/// after the file.
const RUST_DIR_OWNERS: [&str; 3] = ["mod.rs", "lib.rs", "main.rs"];

/// Prefix marking a Rust specifier, so it cannot be confused with a path.
const RUST_SPEC_PREFIX: &str = "mod:";

/// Relative import specifiers found in `content` of the file at `path` (repo-relative, '/' separated).
/// Returned in order of first appearance, deduplicated. Language chosen by extension.
pub fn extract(path: &str, content: &[u8]) -> Vec<String> {
    let Some(lang) = lang_of(path) else {
        return Vec::new();
    };
    let end = content.len().min(MAX_SCAN);
    let text = String::from_utf8_lossy(&content[..end]);
    let found = match lang {
        Lang::Js => extract_js(&text),
        Lang::Python => extract_python(&text),
        Lang::Rust => extract_rust(&text),
    };
    dedup_in_order(found)
}

/// The outcome of resolving a file's imports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Repo-relative paths the imports resolve to, sorted, deduplicated.
    pub paths: Vec<String>,
    /// Specifiers that resolve to no path in the tree.
    pub unresolved: Vec<String>,
}

/// The paths a specifier of the file at `path` may resolve to, in the order
/// they are tried.
pub fn candidates(path: &str, spec: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_candidate(path, spec, |c| {
        out.push(c.to_string());
        false
    });
    out
}

/// Hands `visit` each path a specifier may resolve to, in the order they are
/// tried, until it says one is found (`true`, also returned). Each
/// candidate is built in one reused buffer: a file's imports are resolved on
/// every judgement and summary, and most candidates are tried and dropped.
fn each_candidate(path: &str, spec: &str, visit: impl FnMut(&str) -> bool) -> bool {
    match lang_of(path) {
        Some(Lang::Js) => js_candidates(path, spec, visit),
        Some(Lang::Python) => python_candidates(path, spec, visit),
        Some(Lang::Rust) => rust_candidates(path, spec, visit),
        None => false,
    }
}

/// The directories holding the paths the specifiers may resolve to: a file
/// added in none of them resolves none of them.
pub fn candidate_dirs(path: &str, specs: &[String]) -> BTreeSet<String> {
    let mut dirs = BTreeSet::new();
    for spec in specs {
        each_candidate(path, spec, |c| {
            let dir = parent(c);
            if !dirs.contains(dir) {
                dirs.insert(dir.to_string());
            }
            false
        });
    }
    dirs
}

/// The directory of a repo-relative path ("" at the root).
pub fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Resolve specifiers (as returned by `extract` for the file `path`) against the tree; `exists` says whether a repo-relative path is a file in the tree.
pub fn resolve(path: &str, specs: &[String], exists: &dyn Fn(&str) -> bool) -> Resolved {
    let mut paths = BTreeSet::new();
    let mut unresolved = Vec::new();
    for spec in specs {
        let hit = each_candidate(path, spec, |c| {
            let hit = exists(c);
            if hit && !paths.contains(c) {
                paths.insert(c.to_string());
            }
            hit
        });
        if !hit {
            unresolved.push(spec.clone());
        }
    }
    Resolved {
        paths: paths.into_iter().collect(),
        unresolved: dedup_in_order(unresolved),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Js,
    Python,
    Rust,
}

fn lang_of(path: &str) -> Option<Lang> {
    let (_, ext) = file_name(path).rsplit_once('.')?;
    if JS_EXTS.iter().any(|e| ext.eq_ignore_ascii_case(e)) {
        Some(Lang::Js)
    } else if ext.eq_ignore_ascii_case("py") {
        Some(Lang::Python)
    } else if ext.eq_ignore_ascii_case("rs") {
        Some(Lang::Rust)
    } else {
        None
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn dedup_in_order(items: Vec<String>) -> Vec<String> {
    // A file has a handful of imports: comparing with those kept costs less
    // than hashing and cloning each.
    if items.len() <= 16 {
        let mut out: Vec<String> = Vec::with_capacity(items.len());
        for item in items {
            if !out.contains(&item) {
                out.push(item);
            }
        }
        return out;
    }
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// Room for the tokens of `len` bytes of source, about one per four bytes,
/// so a small file is lexed without the token list growing several times.
/// Bounded: a guess too small for a big file only means it grows.
fn token_capacity(len: usize) -> usize {
    (len / 4).clamp(8, 1 << 14)
}

/// Applies one path segment; `None` when `..` climbs above the repository root,
/// which can never name a file in the tree.
fn push_segment<'a>(parts: &mut Vec<&'a str>, seg: &'a str) -> Option<()> {
    match seg {
        "" | "." => {}
        ".." => {
            parts.pop()?;
        }
        s => parts.push(s),
    }
    Some(())
}

/// The directory of a repo-relative path, as normalised segments.
fn dir_parts(path: &str) -> Option<Vec<&str>> {
    let mut parts = Vec::new();
    if let Some((dir, _)) = path.rsplit_once('/') {
        for seg in dir.split('/') {
            push_segment(&mut parts, seg)?;
        }
    }
    Some(parts)
}

/// The segments joined by `/`, followed by a `/` unless there are none: the
/// prefix under which `tail` is `dir/tail`, or just `tail` at the root.
fn dir_prefix(parts: &[&str], extra: usize) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + extra);
    for part in parts {
        out.push_str(part);
        out.push('/');
    }
    out
}

/// `buf` cut back to `len` and extended by `tails`, handed to `visit`.
fn try_at(
    buf: &mut String,
    len: usize,
    tails: &[&str],
    visit: &mut impl FnMut(&str) -> bool,
) -> bool {
    buf.truncate(len);
    for tail in tails {
        buf.push_str(tail);
    }
    visit(buf)
}

fn is_word_byte(c: u8) -> bool {
    // Non-ASCII bytes are folded into words so identifiers in any script stay whole
    // and slicing at word boundaries always lands on a char boundary.
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

fn word_end(b: &[u8], mut i: usize, also: u8) -> usize {
    while i < b.len() && (is_word_byte(b[i]) || b[i] == also) {
        i += 1;
    }
    i
}

fn line_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

// ---------------------------------------------------------------- JS / TS

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsTok<'a> {
    Word(&'a str),
    /// Raw text between the quotes of a '…' or "…" literal.
    Str(&'a str),
    Punct(u8),
    /// A literal whose content can never be a specifier (template, regex, broken string).
    Opaque,
}

fn extract_js(text: &str) -> Vec<String> {
    let toks = lex_js(text);
    let mut out = Vec::new();
    for (k, tok) in toks.iter().enumerate() {
        let JsTok::Word(word) = *tok else { continue };
        let next = toks.get(k + 1).copied();
        let spec = match (word, next) {
            ("from" | "import", Some(JsTok::Str(s))) => Some(s),
            ("import" | "require", Some(JsTok::Punct(b'('))) => {
                match (toks.get(k + 2).copied(), toks.get(k + 3).copied()) {
                    // A string followed by anything but `)` or `,` is only the start of a
                    // computed specifier (`require('./a' + b)`), not a file.
                    (Some(JsTok::Str(s)), Some(JsTok::Punct(b')' | b','))) => Some(s),
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(raw) = spec {
            let spec = unescape_js(raw);
            if is_relative_js(&spec) {
                out.push(spec);
            }
        }
    }
    out
}

fn is_relative_js(spec: &str) -> bool {
    spec == "." || spec == ".." || spec.starts_with("./") || spec.starts_with("../")
}

fn unescape_js(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(escaped) = chars.next() {
                out.push(escaped);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a `/` after `prev` starts a regular expression rather than a division.
/// Getting this right matters because a quote inside a regex would otherwise open a
/// bogus string and swallow a real import on the same line.
fn js_regex_allowed(prev: Option<&JsTok<'_>>) -> bool {
    match prev {
        None => true,
        Some(JsTok::Punct(p)) => !matches!(p, b')' | b']' | b'}'),
        Some(JsTok::Word(w)) => matches!(
            *w,
            "return"
                | "typeof"
                | "instanceof"
                | "in"
                | "of"
                | "new"
                | "delete"
                | "void"
                | "throw"
                | "case"
                | "do"
                | "else"
                | "yield"
                | "await"
        ),
        Some(JsTok::Str(_) | JsTok::Opaque) => false,
    }
}

fn lex_js(s: &str) -> Vec<JsTok<'_>> {
    let b = s.as_bytes();
    let mut toks = Vec::with_capacity(token_capacity(b.len()));
    let mut i = 0;
    if b.starts_with(b"#!") {
        i = line_end(b, 0);
    }
    let mut depth = 0usize;
    // Brace depths at which a `}` closes a template substitution `${…}` and resumes
    // the template text, so nested templates and object literals stay balanced.
    let mut templates: Vec<usize> = Vec::new();
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'/' if next == Some(b'/') => i = line_end(b, i),
            b'/' if next == Some(b'*') => {
                i = s[i + 2..].find("*/").map_or(b.len(), |p| i + 2 + p + 2);
            }
            b'/' if js_regex_allowed(toks.last()) => {
                i = skip_js_regex(b, i + 1);
                toks.push(JsTok::Opaque);
            }
            b'\'' | b'"' => {
                let (tok, after) = scan_js_string(s, i);
                toks.push(tok);
                i = after;
            }
            b'`' => {
                i = scan_template(b, i + 1, &mut depth, &mut templates);
                toks.push(JsTok::Opaque);
            }
            b'{' => {
                depth += 1;
                toks.push(JsTok::Punct(c));
                i += 1;
            }
            b'}' if templates.last() == Some(&depth) => {
                templates.pop();
                depth -= 1;
                i = scan_template(b, i + 1, &mut depth, &mut templates);
                toks.push(JsTok::Opaque);
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                toks.push(JsTok::Punct(c));
                i += 1;
            }
            _ if is_word_byte(c) || c == b'$' => {
                let end = word_end(b, i, b'$');
                toks.push(JsTok::Word(&s[i..end]));
                i = end;
            }
            _ => {
                toks.push(JsTok::Punct(c));
                i += 1;
            }
        }
    }
    toks
}

/// A quoted string starting at `start`. JS strings cannot span lines, so an
/// unterminated one stops at the newline and cannot swallow the rest of the file.
fn scan_js_string(s: &str, start: usize) -> (JsTok<'_>, usize) {
    let b = s.as_bytes();
    let quote = b[start];
    let mut j = start + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'\n' => return (JsTok::Opaque, j),
            c if c == quote => return (JsTok::Str(&s[start + 1..j]), j + 1),
            _ => j += 1,
        }
    }
    (JsTok::Opaque, b.len())
}

/// Skips template text from `i` up to the closing backtick, or up to a `${`, in which
/// case lexing resumes in code and the matching `}` comes back here.
fn scan_template(b: &[u8], mut i: usize, depth: &mut usize, templates: &mut Vec<usize>) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'`' => return i + 1,
            b'$' if b.get(i + 1) == Some(&b'{') => {
                *depth += 1;
                templates.push(*depth);
                return i + 2;
            }
            _ => i += 1,
        }
    }
    b.len()
}

fn skip_js_regex(b: &[u8], mut i: usize) -> usize {
    let mut in_class = false;
    while i < b.len() {
        match b[i] {
            b'\n' => return i,
            b'\\' => i += 2,
            b'[' => {
                in_class = true;
                i += 1;
            }
            b']' => {
                in_class = false;
                i += 1;
            }
            b'/' if !in_class => return word_end(b, i + 1, b'$'),
            _ => i += 1,
        }
    }
    b.len()
}

fn js_candidates(path: &str, spec: &str, mut visit: impl FnMut(&str) -> bool) -> bool {
    if !is_relative_js(spec) {
        return false;
    }
    let Some(mut parts) = dir_parts(path) else {
        return false;
    };
    for seg in spec.split('/') {
        if push_segment(&mut parts, seg).is_none() {
            return false;
        }
    }
    // `./lib/`, `.` and `..` name a directory, so only its index can match.
    let dir_only = spec.ends_with('/') || spec.ends_with("/.") || spec.ends_with("/..");
    let dir_only = dir_only || spec == "." || spec == "..";
    // `base/` is the prefix of the index candidates; `base` alone is the file.
    let mut buf = dir_prefix(&parts, 12);
    let base = buf.len().saturating_sub(1);
    if !dir_only {
        if try_at(&mut buf, base, &[], &mut visit) {
            return true;
        }
        // TypeScript sources import their siblings by the name of the emitted file.
        for (js, ts) in [
            (".js", ".ts"),
            (".js", ".tsx"),
            (".jsx", ".tsx"),
            (".mjs", ".mts"),
            (".cjs", ".cts"),
        ] {
            buf.truncate(base);
            if let Some(stem) = buf.strip_suffix(js).map(str::len) {
                let hit = try_at(&mut buf, stem, &[ts], &mut visit);
                buf.truncate(stem);
                buf.push_str(js);
                if hit {
                    return true;
                }
            }
        }
        for ext in JS_RESOLVE_EXTS {
            if try_at(&mut buf, base, &[ext], &mut visit) {
                return true;
            }
        }
    }
    let dir = if parts.is_empty() {
        0
    } else {
        buf.truncate(base);
        buf.push('/');
        base + 1
    };
    JS_RESOLVE_EXTS
        .iter()
        .any(|ext| try_at(&mut buf, dir, &["index", ext], &mut visit))
}

// ---------------------------------------------------------------- Python

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PyTok<'a> {
    Word(&'a str),
    Punct(u8),
    /// End of a logical line: a statement never continues past it.
    Newline,
    Opaque,
}

fn extract_python(text: &str) -> Vec<String> {
    let toks = lex_python(text);
    let mut out = Vec::new();
    for (k, tok) in toks.iter().enumerate() {
        if *tok != PyTok::Word("from") {
            continue;
        }
        let mut j = k + 1;
        let mut dots = String::new();
        while toks.get(j) == Some(&PyTok::Punct(b'.')) {
            dots.push('.');
            j += 1;
        }
        if dots.is_empty() {
            continue;
        }
        let (module, j) = dotted_module(&toks, j);
        if toks.get(j) != Some(&PyTok::Word("import")) {
            continue;
        }
        if !module.is_empty() {
            out.push(format!("{dots}{module}"));
            continue;
        }
        // `from . import a, b`: each name may be a submodule of the package.
        imported_names(&toks, j + 1, &dots, &mut out);
    }
    out
}

/// The dotted module name at `j` (`a.b.c`; empty when `import` follows the
/// dots at once) and the index of the token after it.
fn dotted_module(toks: &[PyTok<'_>], mut j: usize) -> (String, usize) {
    let mut module = String::new();
    if let Some(PyTok::Word(w)) = toks.get(j)
        && *w != "import"
    {
        module.push_str(w);
        j += 1;
        while let (Some(PyTok::Punct(b'.')), Some(PyTok::Word(w))) = (toks.get(j), toks.get(j + 1))
        {
            module.push('.');
            module.push_str(w);
            j += 2;
        }
    }
    (module, j)
}

/// The names of `from <dots> import a, b as c, (d, e)` or `import *` from
/// the token at `j` on, each pushed to `out` as a relative spec.
fn imported_names(toks: &[PyTok<'_>], mut j: usize, dots: &str, out: &mut Vec<String>) {
    if toks.get(j) == Some(&PyTok::Punct(b'(')) {
        j += 1;
    }
    loop {
        match toks.get(j) {
            Some(PyTok::Punct(b'*')) => {
                out.push(dots.to_string());
                break;
            }
            Some(PyTok::Word(name)) => {
                out.push(format!("{dots}{name}"));
                j += 1;
                if toks.get(j) == Some(&PyTok::Word("as")) {
                    j += 2;
                }
                if toks.get(j) != Some(&PyTok::Punct(b',')) {
                    break;
                }
                j += 1;
            }
            _ => break,
        }
    }
}

fn lex_python(s: &str) -> Vec<PyTok<'_>> {
    let b = s.as_bytes();
    let mut toks = Vec::with_capacity(token_capacity(b.len()));
    // Inside brackets newlines are not statement ends, which is what makes the
    // parenthesised `from . import (\n a,\n b\n)` form one statement.
    let mut parens = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                if parens == 0 {
                    toks.push(PyTok::Newline);
                }
                i += 1;
            }
            _ if c.is_ascii_whitespace() => i += 1,
            b'#' => i = line_end(b, i),
            b'\\' => {
                // Line continuation: the newline it escapes is not a statement
                // end. Step over whole characters: a multibyte one may follow.
                i += 1;
                if b.get(i) == Some(&b'\r') {
                    i += 1;
                }
                if let Some(ch) = s.get(i..).and_then(|rest| rest.chars().next()) {
                    i += ch.len_utf8();
                }
            }
            b'\'' | b'"' => {
                i = skip_python_string(b, i);
                toks.push(PyTok::Opaque);
            }
            _ if is_word_byte(c) => {
                let end = word_end(b, i, b'_');
                toks.push(PyTok::Word(&s[i..end]));
                i = end;
            }
            _ => {
                match c {
                    b'(' | b'[' | b'{' => parens += 1,
                    b')' | b']' | b'}' => parens = parens.saturating_sub(1),
                    _ => {}
                }
                toks.push(PyTok::Punct(c));
                i += 1;
            }
        }
    }
    toks
}

/// Skips a string literal; docstrings are triple-quoted and commonly quote example
/// imports, so those must be skipped whole.
fn skip_python_string(b: &[u8], start: usize) -> usize {
    let q = b[start];
    let triple = b.get(start + 1) == Some(&q) && b.get(start + 2) == Some(&q);
    let mut i = start + if triple { 3 } else { 1 };
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\n' if !triple => return i,
            c if c == q => {
                if !triple {
                    return i + 1;
                }
                if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    return i + 3;
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    b.len()
}

fn python_candidates(path: &str, spec: &str, mut visit: impl FnMut(&str) -> bool) -> bool {
    let rest = spec.trim_start_matches('.');
    let dots = spec.len() - rest.len();
    if dots == 0 {
        return false;
    }
    let Some(mut pkg) = dir_parts(path) else {
        return false;
    };
    for _ in 1..dots {
        if pkg.pop().is_none() {
            return false;
        }
    }
    let mut buf = dir_prefix(&pkg, rest.len() + 12);
    let dir = buf.len();
    if rest.is_empty() {
        return try_at(&mut buf, dir, &["__init__.py"], &mut visit);
    }
    if rest.split('.').any(str::is_empty) {
        return false;
    }
    buf.extend(rest.chars().map(|c| if c == '.' { '/' } else { c }));
    let module = buf.len();
    // A single name may come from `from . import name`, where `name` can be defined
    // in the package's `__init__.py` rather than being a submodule.
    try_at(&mut buf, module, &[".py"], &mut visit)
        || try_at(&mut buf, module, &["/__init__.py"], &mut visit)
        || (!rest.contains('.') && try_at(&mut buf, dir, &["__init__.py"], &mut visit))
}

// ---------------------------------------------------------------- Rust

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RsTok<'a> {
    Word(&'a str),
    Punct(u8),
    Opaque,
}

fn extract_rust(text: &str) -> Vec<String> {
    let toks = lex_rust(text);
    let mut out = Vec::new();
    let mut depth = 0usize;
    // Enclosing inline modules: `mod a { mod b; }` loads `a/b.rs`, not `b.rs`.
    let mut inline: Vec<(&str, usize)> = Vec::new();
    for (k, tok) in toks.iter().enumerate() {
        match *tok {
            RsTok::Punct(b'{') => depth += 1,
            RsTok::Punct(b'}') => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
            }
            RsTok::Word("mod") => {
                let Some(RsTok::Word(name)) = toks.get(k + 1).copied() else {
                    continue;
                };
                if name.as_bytes()[0].is_ascii_digit() {
                    continue;
                }
                match toks.get(k + 2) {
                    Some(RsTok::Punct(b';')) => {
                        let mut spec = String::from(RUST_SPEC_PREFIX);
                        for (outer, _) in &inline {
                            spec.push_str(outer);
                            spec.push('/');
                        }
                        spec.push_str(name);
                        out.push(spec);
                    }
                    Some(RsTok::Punct(b'{')) => inline.push((name, depth)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    out
}

fn lex_rust(s: &str) -> Vec<RsTok<'_>> {
    let b = s.as_bytes();
    let mut toks = Vec::with_capacity(token_capacity(b.len()));
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'/' if next == Some(b'/') => i = line_end(b, i),
            b'/' if next == Some(b'*') => i = skip_rust_block_comment(b, i),
            b'"' => {
                i = skip_rust_string(b, i + 1);
                toks.push(RsTok::Opaque);
            }
            b'\'' => match skip_rust_char(s, i) {
                Some(after) => {
                    toks.push(RsTok::Opaque);
                    i = after;
                }
                // A lifetime or label: the quote is punctuation, the name a word.
                None => {
                    toks.push(RsTok::Punct(c));
                    i += 1;
                }
            },
            _ if is_word_byte(c) => {
                let (tok, after) = scan_rust_word(s, i);
                toks.push(tok);
                i = after;
            }
            _ => {
                toks.push(RsTok::Punct(c));
                i += 1;
            }
        }
    }
    toks
}

/// The word starting at `start`, or the literal its prefix opens (`r"…"`,
/// `br#"…"#`, `b"…"`, `c"…"`, `b'x'`) as one opaque token, and where it ends.
fn scan_rust_word(s: &str, start: usize) -> (RsTok<'_>, usize) {
    let b = s.as_bytes();
    let i = word_end(b, start, b'_');
    let word = &s[start..i];
    let after = b.get(i).copied();
    if matches!(word, "r" | "br" | "cr") && matches!(after, Some(b'"' | b'#')) {
        let hashes = b[i..].iter().take_while(|&&h| h == b'#').count();
        if b.get(i + hashes) == Some(&b'"') {
            return (
                RsTok::Opaque,
                skip_rust_raw_string(b, i + hashes + 1, hashes),
            );
        }
        if word == "r" && hashes == 1 && b.get(i + 1).is_some_and(|&n| is_word_byte(n)) {
            // Raw identifier: `mod r#type;` loads `type.rs`.
            let end = word_end(b, i + 1, b'_');
            return (RsTok::Word(&s[i + 1..end]), end);
        }
    }
    if matches!(word, "b" | "c") && after == Some(b'"') {
        return (RsTok::Opaque, skip_rust_string(b, i + 1));
    }
    if word == "b"
        && after == Some(b'\'')
        && let Some(after) = skip_rust_char(s, i)
    {
        return (RsTok::Opaque, after);
    }
    (RsTok::Word(word), i)
}

/// Rust block comments nest, so a commented-out block containing comments stays
/// commented out.
fn skip_rust_block_comment(b: &[u8], start: usize) -> usize {
    let mut nesting = 0usize;
    let mut i = start;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            nesting += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            nesting -= 1;
            i += 2;
            if nesting == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

fn skip_rust_string(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

fn skip_rust_raw_string(b: &[u8], mut i: usize, hashes: usize) -> usize {
    while i < b.len() {
        if b[i] == b'"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == b'#')
                .count()
                == hashes
        {
            return i + 1 + hashes;
        }
        i += 1;
    }
    b.len()
}

/// The end of a char literal starting at the quote at `start`, or `None` when the
/// quote begins a lifetime or label instead.
fn skip_rust_char(s: &str, start: usize) -> Option<usize> {
    let b = s.as_bytes();
    let first = s.get(start + 1..)?.chars().next()?;
    if first == '\\' {
        // Longest escape is `'\u{10FFFF}'`; a bound keeps a stray quote local.
        let close = b[start + 2..].iter().take(12).position(|&c| c == b'\'')?;
        return Some(start + 2 + close + 1);
    }
    let close = start + 1 + first.len_utf8();
    (b.get(close) == Some(&b'\'')).then_some(close + 1)
}

fn rust_candidates(path: &str, spec: &str, mut visit: impl FnMut(&str) -> bool) -> bool {
    let Some(rel) = spec.strip_prefix(RUST_SPEC_PREFIX) else {
        return false;
    };
    if rel.split('/').any(|seg| matches!(seg, "" | "." | "..")) {
        return false;
    }
    let Some(mut base) = dir_parts(path) else {
        return false;
    };
    let name = file_name(path);
    if !RUST_DIR_OWNERS.contains(&name) {
        base.push(name.strip_suffix(".rs").unwrap_or(name));
    }
    let mut buf = dir_prefix(&base, rel.len() + 7);
    let dir = buf.len();
    try_at(&mut buf, dir, &[rel, ".rs"], &mut visit)
        || try_at(&mut buf, dir, &[rel, "/mod.rs"], &mut visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(path: &str, content: &str) -> Vec<String> {
        extract(path, content.as_bytes())
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn resolve_in(path: &str, specs: &[&str], tree: &[&str]) -> Resolved {
        let exists = |p: &str| tree.contains(&p);
        resolve(path, &strings(specs), &exists)
    }

    fn resolved(paths: &[&str], unresolved: &[&str]) -> Resolved {
        Resolved {
            paths: strings(paths),
            unresolved: strings(unresolved),
        }
    }

    // ------------------------------------------------------------ JS / TS extract

    #[test]
    fn js_finds_every_import_form_in_order_of_appearance() {
        let src = r#"
import React from 'react';
import a from './a';
import "./side-effect";
export { b } from "../b";
export * as c from './c';
const d = require('./d');
const e = await import('./e');
import type { F } from './f';
import g = require("./g");
"#;
        assert_eq!(
            specs("src/app.ts", src),
            strings(&[
                "./a",
                "./side-effect",
                "../b",
                "./c",
                "./d",
                "./e",
                "./f",
                "./g"
            ])
        );
    }

    #[test]
    fn js_bare_specifiers_are_ignored() {
        let src = "import x from 'react';\nimport y from '@scope/pkg';\nrequire('fs');\nimport z from '.hidden';\n";
        assert_eq!(specs("a.js", src), Vec::<String>::new());
    }

    #[test]
    fn js_dot_and_dot_dot_alone_are_relative() {
        let src = "import a from '.';\nimport b from '..';\n";
        assert_eq!(specs("x/y.mjs", src), strings(&[".", ".."]));
    }

    #[test]
    fn js_multi_line_import_is_found() {
        let src = "import {\n  a,\n  b,\n} from './x';\nexport {\n c\n}\n  from\n '../y'\n";
        assert_eq!(specs("src/m.tsx", src), strings(&["./x", "../y"]));
    }

    #[test]
    fn js_commented_out_import_is_not_a_dependency() {
        let src = "// import a from './a';\n/* import b from './b';\n require('./c') */\nimport d from './d'; // from './e'\n";
        assert_eq!(specs("a.js", src), strings(&["./d"]));
    }

    #[test]
    fn js_import_mentioned_inside_a_string_or_template_is_ignored() {
        let src = "const s = \"import a from './a'\";\nconst t = `require('./t') ${x} from './u'`;\nimport v from './v';\n";
        assert_eq!(specs("a.js", src), strings(&["./v"]));
    }

    #[test]
    fn js_nested_template_substitution_does_not_desynchronise_lexing() {
        let src = "const t = `a ${ {k: `inner ${1}`}.k } b`;\nimport v from './v';\n";
        assert_eq!(specs("a.js", src), strings(&["./v"]));
    }

    #[test]
    fn js_regex_containing_a_quote_does_not_hide_a_later_import() {
        let src =
            "const re = /'/g; import a from './a';\nconst half = 4 / 2; import b from './b';\n";
        assert_eq!(specs("a.js", src), strings(&["./a", "./b"]));
    }

    #[test]
    fn js_computed_require_is_not_a_dependency() {
        let src = "require('./a' + name);\nrequire('./b');\nimport(`./c`);\n";
        assert_eq!(specs("a.cjs", src), strings(&["./b"]));
    }

    #[test]
    fn js_repeated_specifier_is_reported_once() {
        let src = "import a from './a';\nimport { b } from './a';\nrequire('./a');\n";
        assert_eq!(specs("a.js", src), strings(&["./a"]));
    }

    #[test]
    fn many_repeated_imports_are_each_reported_once_in_order() {
        // More than the few a short list dedups by comparison.
        let names: Vec<String> = (0..20).rev().map(|i| format!("./m{i}")).collect();
        let mut src = String::new();
        for name in names.iter().chain(names.iter().step_by(3)) {
            src.push_str(&format!("import x from '{name}';\n"));
        }
        assert_eq!(specs("a.js", &src), names);
    }

    #[test]
    fn js_hashbang_line_is_skipped() {
        let src = "#!/usr/bin/env node\nconst x = require('./x');\n";
        assert_eq!(specs("bin/cli.js", src), strings(&["./x"]));
    }

    #[test]
    fn js_identifier_named_from_is_not_an_import() {
        let src = "const from = './nope';\nlet x = from + './also-nope';\n";
        assert_eq!(specs("a.js", src), Vec::<String>::new());
    }

    #[test]
    fn js_unterminated_string_stops_at_end_of_line() {
        let src = "const s = 'oops\nimport a from './a';\n";
        assert_eq!(specs("a.js", src), strings(&["./a"]));
    }

    #[test]
    fn js_uppercase_extension_is_recognised() {
        assert_eq!(specs("A.JS", "import a from './a';"), strings(&["./a"]));
    }

    // ------------------------------------------------------------ JS / TS resolve

    #[test]
    fn js_exact_path_resolves_first() {
        let tree = ["src/lib/y.js", "src/lib/y.js.ts"];
        assert_eq!(
            resolve_in("src/app/main.js", &["../lib/y.js"], &tree),
            resolved(&["src/lib/y.js"], &[])
        );
    }

    #[test]
    fn js_extensionless_specifier_resolves_by_appending_extensions_in_order() {
        let tree = ["src/x.ts", "src/x.json"];
        assert_eq!(
            resolve_in("src/main.ts", &["./x"], &tree),
            resolved(&["src/x.ts"], &[])
        );
    }

    #[test]
    fn js_directory_specifier_resolves_to_its_index() {
        let tree = ["src/widgets/index.tsx"];
        assert_eq!(
            resolve_in("src/main.ts", &["./widgets"], &tree),
            resolved(&["src/widgets/index.tsx"], &[])
        );
    }

    #[test]
    fn js_dot_resolves_to_index_of_own_directory() {
        let tree = ["src/index.js", "index.js"];
        assert_eq!(
            resolve_in("src/a.js", &["."], &tree),
            resolved(&["src/index.js"], &[])
        );
        assert_eq!(
            resolve_in("src/a.js", &[".."], &tree),
            resolved(&["index.js"], &[])
        );
    }

    #[test]
    fn js_trailing_slash_only_matches_an_index() {
        let tree = ["lib", "lib/index.js"];
        assert_eq!(
            resolve_in("a.js", &["./lib/"], &tree),
            resolved(&["lib/index.js"], &[])
        );
    }

    #[test]
    fn ts_import_of_js_name_resolves_to_ts_source() {
        let tree = ["src/x.ts", "src/y.tsx", "src/z.mts"];
        assert_eq!(
            resolve_in("src/main.ts", &["./x.js", "./y.js", "./z.mjs"], &tree),
            resolved(&["src/x.ts", "src/y.tsx", "src/z.mts"], &[])
        );
    }

    #[test]
    fn js_dot_segments_inside_specifier_are_normalised() {
        let tree = ["a/c/d.js"];
        assert_eq!(
            resolve_in("a/b/main.js", &["./../c/./d"], &tree),
            resolved(&["a/c/d.js"], &[])
        );
    }

    #[test]
    fn import_above_repo_root_is_unresolved() {
        let tree = ["x.js", "../x.js"];
        assert_eq!(
            resolve_in("src/main.js", &["../../x"], &tree),
            resolved(&[], &["../../x"])
        );
        assert_eq!(
            resolve_in("pkg/mod.py", &["...x"], &["x.py"]),
            resolved(&[], &["...x"])
        );
    }

    #[test]
    fn missing_target_is_reported_unresolved_in_input_order() {
        let tree = ["src/b.js"];
        assert_eq!(
            resolve_in("src/main.js", &["./c", "./b", "./a"], &tree),
            resolved(&["src/b.js"], &["./c", "./a"])
        );
    }

    #[test]
    fn resolved_paths_are_sorted_and_deduplicated() {
        let tree = ["src/z.js", "src/a/index.js"];
        assert_eq!(
            resolve_in("src/main.js", &["./z", "./a", "./z.js", "./a/index"], &tree),
            resolved(&["src/a/index.js", "src/z.js"], &[])
        );
    }

    #[test]
    fn js_file_at_repo_root_resolves_siblings() {
        assert_eq!(
            resolve_in("main.js", &["./util"], &["util.js"]),
            resolved(&["util.js"], &[])
        );
    }

    // ------------------------------------------------------------ Python extract

    #[test]
    fn python_relative_from_imports_are_found_in_dotted_form() {
        let src = "import os\nfrom os import path\nfrom .x import y\nfrom ..pkg.mod import z as w\nfrom . import a, b as c\nfrom .. import d\n";
        assert_eq!(
            specs("p/q/m.py", src),
            strings(&[".x", "..pkg.mod", ".a", ".b", "..d"])
        );
    }

    #[test]
    fn python_parenthesised_multi_line_import_yields_each_name() {
        let src =
            "from . import (\n    alpha,\n    beta as b,  # trailing comment\n    gamma,\n)\n";
        assert_eq!(
            specs("p/m.py", src),
            strings(&[".alpha", ".beta", ".gamma"])
        );
    }

    #[test]
    fn python_backslash_continuation_keeps_the_statement_together() {
        let src = "from . import a, \\\n    b\nc = 1\n";
        assert_eq!(specs("p/m.py", src), strings(&[".a", ".b"]));
    }

    #[test]
    fn python_star_import_from_package_yields_bare_dots() {
        assert_eq!(specs("p/m.py", "from .. import *\n"), strings(&[".."]));
    }

    #[test]
    fn python_comments_and_docstrings_are_ignored() {
        let src = "\"\"\"Usage:\n\n    from .hidden import thing\n\"\"\"\n# from .commented import x\ns = 'from .quoted import y'\nfrom .real import z\n";
        assert_eq!(specs("p/m.py", src), strings(&[".real"]));
    }

    #[test]
    fn python_names_on_the_next_statement_are_not_imported() {
        let src = "from . import a\nb, c = 1, 2\n";
        assert_eq!(specs("p/m.py", src), strings(&[".a"]));
    }

    #[test]
    fn python_yield_from_and_raise_from_are_not_imports() {
        let src = "def f():\n    yield from .5\n    raise E from e\nfrom.x import y\n";
        assert_eq!(specs("p/m.py", src), strings(&[".x"]));
    }

    // ------------------------------------------------------------ Python resolve

    #[test]
    fn python_from_dot_import_resolves_to_sibling_module() {
        let tree = ["pkg/a.py", "pkg/__init__.py"];
        assert_eq!(
            resolve_in("pkg/main.py", &[".a"], &tree),
            resolved(&["pkg/a.py"], &[])
        );
    }

    #[test]
    fn python_subpackage_resolves_to_its_init() {
        let tree = ["pkg/sub/__init__.py"];
        assert_eq!(
            resolve_in("pkg/main.py", &[".sub"], &tree),
            resolved(&["pkg/sub/__init__.py"], &[])
        );
    }

    #[test]
    fn python_name_defined_in_package_init_resolves_to_the_init() {
        let tree = ["pkg/__init__.py"];
        assert_eq!(
            resolve_in("pkg/main.py", &[".helper"], &tree),
            resolved(&["pkg/__init__.py"], &[])
        );
    }

    #[test]
    fn python_two_dots_resolve_in_the_parent_package() {
        let tree = ["top/util/io.py", "top/__init__.py"];
        assert_eq!(
            resolve_in("top/sub/main.py", &["..util.io", "..missing"], &tree),
            resolved(&["top/__init__.py", "top/util/io.py"], &[])
        );
    }

    #[test]
    fn python_dotted_module_does_not_fall_back_to_package_init() {
        let tree = ["pkg/__init__.py"];
        assert_eq!(
            resolve_in("pkg/main.py", &[".x.y"], &tree),
            resolved(&[], &[".x.y"])
        );
    }

    #[test]
    fn python_bare_dots_resolve_to_package_init() {
        let tree = ["top/__init__.py"];
        assert_eq!(
            resolve_in("top/sub/main.py", &[".."], &tree),
            resolved(&["top/__init__.py"], &[])
        );
    }

    #[test]
    fn python_module_at_repo_root_resolves_siblings() {
        assert_eq!(
            resolve_in("main.py", &[".util"], &["util.py"]),
            resolved(&["util.py"], &[])
        );
    }

    // ------------------------------------------------------------ Rust extract

    #[test]
    fn rust_mod_declarations_with_any_visibility_are_found() {
        let src = "mod a;\npub mod b;\npub(crate) mod c;\npub(in crate::x) mod d;\n#[cfg(test)]\nmod tests;\n#[path = \"other.rs\"]\nmod e;\n";
        assert_eq!(
            specs("src/lib.rs", src),
            strings(&["mod:a", "mod:b", "mod:c", "mod:d", "mod:tests", "mod:e"])
        );
    }

    #[test]
    fn rust_inline_module_is_not_a_file_dependency() {
        let src = "mod inline {\n    fn f() {}\n}\nmod after;\n";
        assert_eq!(specs("src/lib.rs", src), strings(&["mod:after"]));
    }

    #[test]
    fn rust_mod_inside_inline_module_is_nested_under_it() {
        let src = "mod outer {\n    mod inner {\n        pub mod leaf;\n    }\n    mod sibling;\n}\nmod top;\n";
        assert_eq!(
            specs("src/lib.rs", src),
            strings(&["mod:outer/inner/leaf", "mod:outer/sibling", "mod:top"])
        );
    }

    #[test]
    fn rust_comments_and_strings_do_not_declare_modules() {
        let src = "// mod a;\n/* mod b; /* nested */ mod c; */\nconst S: &str = \"mod d;\";\nconst R: &str = r#\"mod e; \"# ;\nconst C: char = '\"'; mod f;\nfn g<'a>(x: &'a str) {}\nmod h;\n";
        assert_eq!(specs("src/lib.rs", src), strings(&["mod:f", "mod:h"]));
    }

    #[test]
    fn rust_raw_identifier_module_drops_the_prefix() {
        assert_eq!(specs("src/lib.rs", "mod r#type;\n"), strings(&["mod:type"]));
    }

    // ------------------------------------------------------------ Rust resolve

    #[test]
    fn rust_mod_in_lib_rs_resolves_beside_it() {
        let tree = ["src/a.rs", "src/b/mod.rs"];
        assert_eq!(
            resolve_in("src/lib.rs", &["mod:a", "mod:b", "mod:c"], &tree),
            resolved(&["src/a.rs", "src/b/mod.rs"], &["mod:c"])
        );
    }

    #[test]
    fn rust_mod_in_non_mod_rs_resolves_into_subdirectory() {
        let tree = ["src/gate/deps.rs", "src/deps.rs", "src/gate/wake/mod.rs"];
        assert_eq!(
            resolve_in("src/gate.rs", &["mod:deps", "mod:wake"], &tree),
            resolved(&["src/gate/deps.rs", "src/gate/wake/mod.rs"], &[])
        );
    }

    #[test]
    fn rust_file_rs_is_preferred_over_mod_rs() {
        let tree = ["src/gate/deps.rs", "src/gate/deps/mod.rs"];
        assert_eq!(
            resolve_in("src/gate/mod.rs", &["mod:deps"], &tree),
            resolved(&["src/gate/deps.rs"], &[])
        );
    }

    #[test]
    fn rust_nested_spec_resolves_through_inline_module_directories() {
        let tree = ["src/outer/inner.rs"];
        assert_eq!(
            resolve_in("src/lib.rs", &["mod:outer/inner"], &tree),
            resolved(&["src/outer/inner.rs"], &[])
        );
    }

    #[test]
    fn rust_spec_without_prefix_is_unresolved() {
        assert_eq!(
            resolve_in("src/lib.rs", &["a"], &["src/a.rs"]),
            resolved(&[], &["a"])
        );
    }

    // ------------------------------------------------------------ any language

    #[test]
    fn unknown_extension_yields_no_imports() {
        assert_eq!(
            specs("README.md", "import a from './a';"),
            Vec::<String>::new()
        );
        assert_eq!(specs("Makefile", "mod a;"), Vec::<String>::new());
    }

    #[test]
    fn unknown_extension_resolves_nothing() {
        assert_eq!(
            resolve_in("notes.txt", &["./a"], &["a", "a.js"]),
            resolved(&[], &["./a"])
        );
    }

    #[test]
    fn binary_content_yields_no_imports() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        for path in ["a.js", "a.py", "a.rs"] {
            assert_eq!(extract(path, &bytes), Vec::<String>::new(), "{path}");
        }
    }

    #[test]
    fn invalid_utf8_around_an_import_does_not_hide_it() {
        let mut bytes = vec![0xff, 0xfe, b'\n'];
        bytes.extend_from_slice(b"import a from './a';\n");
        bytes.extend_from_slice(&[0xc3, b'\n']);
        assert_eq!(extract("a.js", &bytes), strings(&["./a"]));
    }

    #[test]
    fn non_ascii_identifiers_and_chars_are_lexed_safely() {
        assert_eq!(
            specs("a.js", "const é = 'ü'; import a from './ä';"),
            strings(&["./ä"])
        );
        assert_eq!(
            specs("a.rs", "const C: char = 'é'; mod ñ;"),
            strings(&["mod:ñ"])
        );
    }

    #[test]
    fn imports_beyond_the_first_mebibyte_are_not_scanned() {
        let mut src = String::from("import a from './a';\n");
        src.push_str(&" ".repeat(MAX_SCAN));
        src.push_str("import b from './b';\n");
        assert_eq!(specs("a.js", &src), strings(&["./a"]));
    }

    #[test]
    fn arbitrary_syntax_soup_never_panics() {
        // Deterministic LCG over the bytes the lexers treat specially, so every
        // branch sees odd neighbours; no assertion beyond "returns".
        let alphabet = b"'\"`$/{}()[]*#\\\nr b.;:,modfromimportrequire\xc3\xa9\xff\x00";
        let mut state: u64 = 0x5eed;
        for _ in 0..2000 {
            let len = (state >> 33) as usize % 64;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    alphabet[(state >> 33) as usize % alphabet.len()]
                })
                .collect();
            for path in ["a.js", "a.py", "a.rs", "mod.rs"] {
                let found = extract(path, &bytes);
                let _ = resolve(path, &found, &|_| false);
            }
        }
    }

    #[test]
    fn truncated_input_never_panics() {
        let samples = [
            "import a from './a",
            "const s = `${",
            "/* unterminated",
            "x = /[/",
            "'\\",
            "from . import (",
            "\"\"\"open",
            "s = '\\",
            "mod",
            "mod a",
            "r#\"",
            "'\\u{",
            "b'",
            "/* /* */",
            "}}}}",
            "\\",
        ];
        for sample in samples {
            for path in ["a.js", "a.py", "a.rs"] {
                for end in 0..=sample.len() {
                    if sample.is_char_boundary(end) {
                        let _ = extract(path, &sample.as_bytes()[..end]);
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------ the candidate lists of old

    // The resolver as it was, one `String` per candidate: the reference the
    // one-buffer resolver must agree with, answer for answer.
    fn old_join(parts: &[&str], tail: &str) -> String {
        if parts.is_empty() {
            tail.to_string()
        } else {
            format!("{}/{}", parts.join("/"), tail)
        }
    }

    fn old_candidates(path: &str, spec: &str) -> Vec<String> {
        match lang_of(path) {
            Some(Lang::Js) => old_js_candidates(path, spec),
            Some(Lang::Python) => old_python_candidates(path, spec),
            Some(Lang::Rust) => old_rust_candidates(path, spec),
            None => Vec::new(),
        }
    }

    fn old_resolve(path: &str, specs: &[String], exists: &dyn Fn(&str) -> bool) -> Resolved {
        let mut paths = BTreeSet::new();
        let mut unresolved = Vec::new();
        for spec in specs {
            match old_candidates(path, spec).into_iter().find(|c| exists(c)) {
                Some(found) => {
                    paths.insert(found);
                }
                None => unresolved.push(spec.clone()),
            }
        }
        Resolved {
            paths: paths.into_iter().collect(),
            unresolved: dedup_in_order(unresolved),
        }
    }

    fn old_js_candidates(path: &str, spec: &str) -> Vec<String> {
        if !is_relative_js(spec) {
            return Vec::new();
        }
        let Some(mut parts) = dir_parts(path) else {
            return Vec::new();
        };
        for seg in spec.split('/') {
            if push_segment(&mut parts, seg).is_none() {
                return Vec::new();
            }
        }
        // `./lib/`, `.` and `..` name a directory, so only its index can match.
        let dir_only = spec.ends_with('/') || spec.ends_with("/.") || spec.ends_with("/..");
        let dir_only = dir_only || spec == "." || spec == "..";
        let mut out = Vec::new();
        if !dir_only {
            let base = parts.join("/");
            out.push(base.clone());
            // TypeScript sources import their siblings by the name of the emitted file.
            for (js, ts) in [
                (".js", ".ts"),
                (".js", ".tsx"),
                (".jsx", ".tsx"),
                (".mjs", ".mts"),
                (".cjs", ".cts"),
            ] {
                if let Some(stem) = base.strip_suffix(js) {
                    out.push(format!("{stem}{ts}"));
                }
            }
            for ext in JS_RESOLVE_EXTS {
                out.push(format!("{base}{ext}"));
            }
        }
        for ext in JS_RESOLVE_EXTS {
            out.push(old_join(&parts, &format!("index{ext}")));
        }
        out
    }

    fn old_python_candidates(path: &str, spec: &str) -> Vec<String> {
        let rest = spec.trim_start_matches('.');
        let dots = spec.len() - rest.len();
        if dots == 0 {
            return Vec::new();
        }
        let Some(mut pkg) = dir_parts(path) else {
            return Vec::new();
        };
        for _ in 1..dots {
            if pkg.pop().is_none() {
                return Vec::new();
            }
        }
        if rest.is_empty() {
            return vec![old_join(&pkg, "__init__.py")];
        }
        let names: Vec<&str> = rest.split('.').collect();
        if names.iter().any(|n| n.is_empty()) {
            return Vec::new();
        }
        let module = names.join("/");
        let mut out = vec![
            old_join(&pkg, &format!("{module}.py")),
            old_join(&pkg, &format!("{module}/__init__.py")),
        ];
        // A single name may come from `from . import name`, where `name` can be defined
        // in the package's `__init__.py` rather than being a submodule.
        if names.len() == 1 {
            out.push(old_join(&pkg, "__init__.py"));
        }
        out
    }

    fn old_rust_candidates(path: &str, spec: &str) -> Vec<String> {
        let Some(rel) = spec.strip_prefix(RUST_SPEC_PREFIX) else {
            return Vec::new();
        };
        if rel.split('/').any(|seg| matches!(seg, "" | "." | "..")) {
            return Vec::new();
        }
        let Some(mut base) = dir_parts(path) else {
            return Vec::new();
        };
        let name = file_name(path);
        if !RUST_DIR_OWNERS.contains(&name) {
            base.push(name.strip_suffix(".rs").unwrap_or(name));
        }
        vec![
            old_join(&base, &format!("{rel}.rs")),
            old_join(&base, &format!("{rel}/mod.rs")),
        ]
    }

    const TRICKY_PATHS: &[&str] = &[
        "main.js",
        "src/a.js",
        "src/app/main.ts",
        "a/b/c/d.mjs",
        "x/./y/../z.cjs",
        "src/../a.js",
        "../out.js",
        "a//b.jsx",
        "/abs.js",
        "A.JS",
        "é/ü.tsx",
        "pkg/main.py",
        "main.py",
        "top/sub/m.py",
        "../up.py",
        "src/lib.rs",
        "src/gate.rs",
        "src/gate/mod.rs",
        "main.rs",
        "src/X.RS",
        "../x.rs",
        "notes.txt",
        "Makefile",
        "",
    ];
    const TRICKY_SPECS: &[&str] = &[
        ".",
        "..",
        "./",
        "../",
        "./.",
        "./..",
        "./a",
        "./a.js",
        "./a.jsx",
        "./a.mjs",
        "./a.cjs",
        "./a.js.ts",
        "../lib/y.js",
        "./lib/",
        "./lib/.",
        "./lib/..",
        "../../x",
        "../../../../x",
        "./a/./b/../c",
        ".//a",
        "./a//",
        "./index",
        "./é.js",
        "react",
        "/abs",
        "",
        ".a",
        "..a",
        "...x",
        ".x.y",
        ".x..y",
        ".x.",
        "mod:a",
        "mod:a/b",
        "mod:",
        "mod:../x",
        "mod:a//b",
        "mod:./a",
    ];

    #[test]
    fn the_one_buffer_resolver_tries_the_candidates_of_old_in_order() {
        for path in TRICKY_PATHS {
            for spec in TRICKY_SPECS {
                assert_eq!(
                    candidates(path, spec),
                    old_candidates(path, spec),
                    "{path} {spec}"
                );
            }
            let specs = strings(TRICKY_SPECS);
            assert_eq!(
                candidate_dirs(path, &specs),
                specs
                    .iter()
                    .flat_map(|spec| old_candidates(path, spec))
                    .map(|c| parent(&c).to_string())
                    .collect::<BTreeSet<_>>(),
                "{path}"
            );
        }
    }

    #[test]
    fn the_one_buffer_resolver_finds_what_the_candidate_lists_found() {
        for path in TRICKY_PATHS {
            // Every candidate of every spec, each once the only file and once
            // the first of the rest: the first hit, a later one, and none.
            let all: Vec<String> = TRICKY_SPECS
                .iter()
                .flat_map(|spec| old_candidates(path, spec))
                .collect();
            let specs = strings(TRICKY_SPECS);
            for k in 0..=all.len() {
                let only = |p: &str| all.get(k).is_some_and(|c| c == p);
                assert_eq!(
                    resolve(path, &specs, &only),
                    old_resolve(path, &specs, &only)
                );
                let rest = |p: &str| all[k..].iter().any(|c| c == p);
                assert_eq!(
                    resolve(path, &specs, &rest),
                    old_resolve(path, &specs, &rest)
                );
                let every_other = |p: &str| all.iter().skip(k % 2).step_by(2).any(|c| c == p);
                assert_eq!(
                    resolve(path, &specs, &every_other),
                    old_resolve(path, &specs, &every_other)
                );
            }
        }
    }

    #[test]
    fn a_hit_on_a_path_already_resolved_still_resolves_its_spec() {
        let tree = ["src/z.js"];
        assert_eq!(
            resolve_in("src/main.js", &["./z", "./z.js", "../src/z"], &tree),
            resolved(&["src/z.js"], &[])
        );
    }
}
