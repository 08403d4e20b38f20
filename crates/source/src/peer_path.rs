//! The paths a peer names are checked before anything is done with them: a
//! GitLab tree or compare entry whose path is absolute, has `..`, `.` or
//! empty segments, or holds NUL or control characters is never a file of
//! the watched tree. It is never judged, remembered or handed over; a note
//! names it (escaped) and the rest of the listing goes on.

/// Why `path` cannot name a file of the tree; `None` when it can.
pub fn refusal(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("is empty");
    }
    if path.starts_with('/') {
        return Some("is absolute");
    }
    if path.chars().any(char::is_control) {
        return Some("holds a NUL or control character");
    }
    for segment in path.split('/') {
        match segment {
            "" => return Some("has an empty segment"),
            "." => return Some("has a `.` segment"),
            ".." => return Some("has a `..` segment"),
            _ => {}
        }
    }
    None
}

/// The note for a refused path, the path escaped so it cannot forge lines.
pub fn note(peer: &str, path: &str, why: &str) -> String {
    format!(
        "{peer} named the path `{}`, which {why}: it is not a file of the tree and was neither judged nor handed over",
        sentinel_core::escape::terminal(path)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_tree_paths_are_refused_and_ordinary_ones_kept() {
        for bad in [
            "../../../../etc/x_auth.js",
            "/etc/passwd_auth.js",
            "src/auth/./x.js",
            "src/auth//y.js",
            "src/auth/",
            "",
            "src/a\0.js",
            "src/a\n.js",
            "src/..",
        ] {
            assert!(refusal(bad).is_some(), "{bad:?}");
        }
        for good in [
            "src/auth.js",
            "a/.hidden/b.js",
            "src/..x.js",
            "src/lm-studio/c.js",
        ] {
            assert_eq!(refusal(good), None, "{good:?}");
        }
        let n = note("GitLab", "src/a\n.js", "holds a NUL or control character");
        assert!(!n.contains('\n'), "{n}");
    }
}
