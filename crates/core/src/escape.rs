//! One escaping layer for text sentinel did not write itself (paths, model
//! messages, peers' errors): on a terminal no control character, bidi
//! override or invisible separator reaches the screen raw, in JSON none
//! reaches a reader raw, and on the dashboard no text can start a quick
//! action, open a link, show an image, mention anyone or break the table.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters that move the cursor, recolour, or reorder text on a terminal.
fn hostile(c: char) -> bool {
    c.is_control() || invisible(c)
}

/// Characters that reorder text or hide in it (bidi embeddings, overrides,
/// isolates and marks, line and paragraph separators, the zero-width
/// space): valid in JSON and Markdown, so escaped there too.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{200b}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{061c}'
    )
}

/// A JSON document with every invisible character of its strings written
/// as a `\uXXXX` escape: the same value to a parser, nothing hidden from a
/// reader of the text. (Control characters are escaped by JSON itself.)
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(invisible) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if invisible(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` with every control character and bidi override shown escaped, as
/// Rust writes them: `\n`, `\t`, `\r`, `\u{1b}`, `\u{202e}`.
pub fn terminal(s: &str) -> Cow<'_, str> {
    if !s.chars().any(hostile) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if hostile(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Markdown text for one line or table cell: escaped for the terminal
/// first (so no line break survives), then every character that could
/// open a link, an HTML tag, emphasis or a new cell is backslash-escaped,
/// and every word a renderer would link or notify (a URL, a `www.` host, an
/// address, an `@mention`) is put in a code span, where nothing is linked.
pub fn markdown(s: &str) -> String {
    let safe = terminal(s);
    let mut out = String::with_capacity(safe.len() + 8);
    let mut word = String::new();
    for c in safe.chars().chain(std::iter::once(' ')) {
        if !c.is_whitespace() {
            word.push(c);
            continue;
        }
        if linkable(&word) {
            out.push_str(&code(&word));
        } else {
            escape_into(&mut out, &word);
        }
        word.clear();
        out.push(c);
    }
    out.pop();
    out
}

/// Whether a renderer (GFM's autolinks, GitLab's references) could turn
/// `word` into a link or a notification.
fn linkable(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    lower.contains("://") || lower.contains("www.") || word.contains('@')
}

fn escape_into(out: &mut String, word: &str) {
    for c in word.chars() {
        if matches!(
            c,
            '\\' | '`'
                | '*'
                | '_'
                | '['
                | ']'
                | '('
                | ')'
                | '<'
                | '>'
                | '|'
                | '!'
                | '#'
                | '~'
                | '&'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A code span holding `s` literally: a fence longer than any run of
/// backticks inside, `|` escaped for the table, control characters shown.
pub fn code(s: &str) -> String {
    let safe = terminal(s).replace('|', "\\|");
    let longest = safe.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    if longest == 0 {
        return format!("`{safe}`");
    }
    let fence = "`".repeat(longest + 1);
    format!("{fence} {safe} {fence}")
}

/// A path for a link target: everything but letters, digits and `-._~/`
/// percent-encoded, so no `)` or space ends the link early.
pub fn url_path(s: &str) -> String {
    const PATH: &percent_encoding::AsciiSet = &crate::address::UNRESERVED.remove(b'/');
    percent_encoding::utf8_percent_encode(s, PATH).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_and_bidi_overrides_are_shown_escaped() {
        assert_eq!(terminal("a\nb\tc\u{1b}[31m"), "a\\nb\\tc\\u{1b}[31m");
        assert_eq!(terminal("x\u{202e}y\u{2066}"), "x\\u{202e}y\\u{2066}");
        assert!(matches!(terminal("plain — text"), Cow::Borrowed(_)));
    }

    #[test]
    fn invisible_characters_are_escaped_in_text_and_json() {
        assert_eq!(terminal("a\u{200b}b\u{2028}"), "a\\u{200b}b\\u{2028}");
        let doc = serde_json::to_string("p\u{202e}q\u{2029}").unwrap();
        let escaped = json(&doc);
        assert_eq!(escaped, r#""p\u202eq\u2029""#);
        let back: String = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, "p\u{202e}q\u{2029}", "the same value");
    }

    #[test]
    fn links_addresses_and_mentions_become_code_spans() {
        assert_eq!(
            markdown("see https://evil.example/x www.evil.com @all and a@b.c ok"),
            "see `https://evil.example/x` `www.evil.com` `@all` and `a@b.c` ok"
        );
    }

    #[test]
    fn markdown_text_cannot_open_a_link_a_tag_or_a_cell() {
        assert_eq!(
            markdown("x](e)<img>|\n/label ~x"),
            "x\\]\\(e\\)\\<img\\>\\|\\\\n/label \\~x"
        );
        assert_eq!(
            markdown("x](http://e)|"),
            "`x](http://e)\\|`",
            "a link in a code span is text"
        );
    }

    #[test]
    fn a_code_span_outlasts_the_backticks_inside() {
        assert_eq!(code("a.js"), "`a.js`");
        assert_eq!(code("a`b|c"), "`` a`b\\|c ``");
        assert_eq!(url_path("a b)/c.js"), "a%20b%29/c.js");
    }
}
