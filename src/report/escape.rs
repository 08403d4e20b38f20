//! One escaping layer for text sentinel did not write itself (paths, model
//! messages, peers' errors): on a terminal no control character or bidi
//! override reaches the screen raw, and on the dashboard no text can start
//! a quick action, inject a link or break the table.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters that move the cursor, recolour, or reorder text on a terminal.
fn hostile(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
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
/// open a link, an HTML tag, emphasis or a new cell is backslash-escaped.
pub fn markdown(s: &str) -> String {
    let safe = terminal(s);
    let mut out = String::with_capacity(safe.len() + 8);
    for c in safe.chars() {
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
    out
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
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
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
    fn markdown_text_cannot_open_a_link_a_tag_or_a_cell() {
        assert_eq!(
            markdown("x](http://e)<img>|\n/label ~x"),
            "x\\]\\(http://e\\)\\<img\\>\\|\\\\n/label \\~x"
        );
    }

    #[test]
    fn a_code_span_outlasts_the_backticks_inside() {
        assert_eq!(code("a.js"), "`a.js`");
        assert_eq!(code("a`b|c"), "`` a`b\\|c ``");
        assert_eq!(url_path("a b)/c.js"), "a%20b%29/c.js");
    }
}
