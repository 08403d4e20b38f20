//! URLs, read one way: every split, origin comparison and credential cut
//! goes through `http::Uri`, the parser ureq itself uses to decide where a
//! request goes, so what sentinel compares is what the request would reach.
//!
//! An address is only ever cut, never rewritten: http keeps the authority's
//! bytes as written, so an address without credentials comes back byte for
//! byte (a clone's identity is stored in every state; a trailing `/` or a
//! lowered host would make the next tick see another scope). An scp-style
//! `git@host:g/p.git` has no scheme and is left as it is.

use ::http::Uri;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};
use std::borrow::Cow;

/// Everything but RFC 3986's unreserved characters (letters, digits and
/// `-._~`) is escaped: a value so encoded is one query value or one path
/// segment, whatever it holds.
pub const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `value` percent-encoded as one query value or path segment.
pub fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, UNRESERVED).to_string()
}

/// `url` parsed as an absolute `scheme://authority` address, or `None`
/// (a path, an scp-style remote, `file:///`, anything ureq would refuse).
fn parse(url: &str) -> Option<Uri> {
    let uri: Uri = url.parse().ok()?;
    (uri.scheme().is_some() && uri.authority().is_some()).then_some(uri)
}

/// Where the authority's `user:password@` lies in `url` (`start..at`, the
/// `@` at `at`), when it has one. Bytes http refuses outside the authority's
/// own syntax (a space, a non-ASCII letter, `\`) are read as a plain letter
/// of the same length first, so a credential in an address ureq would never
/// fetch but git may still hold is found, and cut, all the same.
fn userinfo_span(url: &str) -> Option<(usize, usize)> {
    let plain: String = url
        .bytes()
        .map(|b| {
            let special = b"!$&'()*+,;=-._~:/?#[]@%";
            if b.is_ascii_alphanumeric() || special.contains(&b) {
                char::from(b)
            } else {
                'x'
            }
        })
        .collect();
    let uri = parse(&plain)?;
    let authority = uri.authority()?;
    // Both are slices of the same bytes: the host starts right after the `@`.
    let whole = authority.as_str();
    let host_at = authority.host().as_ptr() as usize - whole.as_ptr() as usize;
    let start = uri.scheme_str()?.len() + "://".len();
    (plain.get(start..start + whole.len()) == Some(whole) && host_at > 0)
        .then(|| (start, start + host_at - 1))
}

/// The `user:password` of `url`'s authority as written (percent-encoding
/// kept), or `None` when it names no user.
pub fn credentials(url: &str) -> Option<&str> {
    userinfo_span(url).map(|(start, at)| &url[start..at])
}

/// `url` without the `user:password@` of its authority: what may be stored
/// and shown. Without one it is `url` itself, byte for byte.
pub fn without_credentials(url: &str) -> Cow<'_, str> {
    match userinfo_span(url) {
        Some((start, at)) => Cow::Owned(format!("{}{}", &url[..start], &url[at + 1..])),
        None => Cow::Borrowed(url),
    }
}

/// `link` with the credentials of `from` put back, when it has none of its
/// own: a next page on the configured origin is read as the first was.
pub fn with_credentials_of(link: &str, from: &str) -> String {
    match (credentials(from), userinfo_span(link), parse(link)) {
        (Some(info), None, Some(uri)) => {
            let start = uri.scheme_str().map_or(0, str::len) + "://".len();
            format!("{}{info}@{}", &link[..start], &link[start..])
        }
        _ => link.to_string(),
    }
}

/// `url` without credentials, query or fragment: enough to say where a
/// request went without what it carried.
pub fn location(url: &str) -> String {
    let bare = without_credentials(url);
    match parse(&bare) {
        // After the authority, the first `?` or `#` ends the path.
        Some(uri) => {
            let start = uri.scheme_str().map_or(0, str::len) + "://".len();
            let cut = bare[start..]
                .find(['?', '#'])
                .map_or(bare.len(), |i| start + i);
            bare[..cut].to_string()
        }
        None => bare.into_owned(),
    }
}

/// The host of `url` as a request would reach it, lowered, its IPv6
/// brackets kept; its port after a `:` unless it is the scheme's default.
pub fn host(url: &str) -> Option<String> {
    let uri = parse(url)?;
    let authority = uri.authority()?;
    // http reads a port it cannot parse (`:443abc`, `:99999`) as none, the
    // scheme's default: such an address is no origin to compare.
    let whole = authority.as_str();
    let host_end =
        authority.host().as_ptr() as usize - whole.as_ptr() as usize + authority.host().len();
    match whole[host_end..].strip_prefix(':') {
        Some(port) if !port.is_empty() && port.parse::<u16>().is_err() => return None,
        _ => {}
    }
    let host = authority.host().to_ascii_lowercase();
    let default = match uri.scheme_str()?.to_ascii_lowercase().as_str() {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    };
    Some(match authority.port_u16() {
        // `https://h:443` and `https://h` are one place: a default port
        // written out must not make an address look foreign.
        Some(port) if Some(port) != default => format!("{host}:{port}"),
        _ => host,
    })
}

/// The host of `url` alone, lowered, an IPv6 address without its brackets.
pub fn host_name(url: &str) -> Option<String> {
    let uri = parse(url)?;
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(host.to_ascii_lowercase())
}

/// `scheme://host[:port]`, lowered, the default port left out: two
/// addresses with the same origin reach the same server.
pub fn origin(url: &str) -> Option<String> {
    let scheme = parse(url)?.scheme_str()?.to_ascii_lowercase();
    Some(format!("{scheme}://{}", host(url)?))
}

/// The scheme of `url` (`https`, `http+unix`, `unix`), as RFC 3986 spells
/// one: a letter, then letters, digits, `+`, `-` or `.`, then `:`. Read on
/// its own, as an address of a Unix socket need not have an authority
/// http accepts (`http+unix://%2Frun%2Fx.sock`).
pub fn scheme(url: &str) -> Option<&str> {
    let end = url.find(':')?;
    let name = &url[..end];
    let mut bytes = name.bytes();
    let first = bytes.next()?;
    (first.is_ascii_alphabetic()
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
    .then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_at_sign_after_the_authority_is_not_a_credential() {
        for url in [
            "https://host?q=a@b/",
            "https://host#frag@b/",
            "https://host/p?next=https://u:p@evil/",
            "https://host/@scope/pkg",
        ] {
            assert_eq!(credentials(url), None, "{url}");
            assert_eq!(without_credentials(url), url);
        }
    }

    #[test]
    fn credentials_are_cut_as_written() {
        let url = "https://oauth2:p%40ss@gitlab.example.com/g/p.git";
        assert_eq!(credentials(url), Some("oauth2:p%40ss"));
        assert_eq!(
            without_credentials(url),
            "https://gitlab.example.com/g/p.git"
        );
        // The last `@` of the authority ends the user information.
        assert_eq!(without_credentials("ssh://a@b@h:22/x"), "ssh://h:22/x");
        assert_eq!(
            without_credentials("https://u:t@[::1]:8443/x"),
            "https://[::1]:8443/x"
        );
        // An address ureq would refuse is still cut where the user ends.
        assert_eq!(
            without_credentials("https://u:tok en@h/a b/ü"),
            "https://h/a b/ü"
        );
    }

    #[test]
    fn an_address_without_credentials_comes_back_byte_for_byte() {
        for url in [
            "https://gitlab.example.com/g/p.git",
            "HTTPS://Host:443",
            "https://host",
            "https://[::1]:8080/x?y#z",
            "git@gitlab.example.com:g/p.git",
            "file:///srv/p.git",
            "/srv/p.git",
            "",
        ] {
            assert!(matches!(without_credentials(url), Cow::Borrowed(u) if u == url));
        }
    }

    #[test]
    fn origins_compare_scheme_host_and_port() {
        assert_eq!(
            origin("https://u:p@GitLab.example.com:443/api").as_deref(),
            Some("https://gitlab.example.com")
        );
        assert_eq!(origin("http://[::1]:80/").as_deref(), Some("http://[::1]"));
        assert_eq!(host("https://[::1]:8443/").as_deref(), Some("[::1]:8443"));
        assert_eq!(host_name("https://u@[::1]:8443/").as_deref(), Some("::1"));
        assert_ne!(origin("https://h/"), origin("https://h:8443/"));
        assert_ne!(origin("https://h/"), origin("https://h.evil/"));
        assert_eq!(origin("https://h?@evil/").as_deref(), Some("https://h"));
        assert_eq!(origin("git@h:g/p.git"), None);
        assert_eq!(origin("https://h:443abc/"), None);
        assert_eq!(origin("https://h:99999/"), None);
        assert_eq!(origin("https://h:/").as_deref(), Some("https://h"));
        assert_eq!(origin("/api/v4"), None);
    }

    #[test]
    fn a_link_gets_credentials_back_only_when_it_has_none() {
        let base = "https://me:tok@h/api/v4";
        assert_eq!(
            with_credentials_of("https://h/api/v4/x?page=2", base),
            "https://me:tok@h/api/v4/x?page=2"
        );
        assert_eq!(
            with_credentials_of("https://you:x@h/a", base),
            "https://you:x@h/a"
        );
        assert_eq!(
            with_credentials_of("https://h/a", "https://h/"),
            "https://h/a"
        );
    }

    #[test]
    fn a_location_keeps_neither_credentials_nor_query() {
        assert_eq!(
            location("https://u:p@h:1/a/b?private_token=x#f"),
            "https://h:1/a/b"
        );
        assert_eq!(location("https://h/a#f?x"), "https://h/a");
    }

    #[test]
    fn schemes_are_read_without_an_authority() {
        assert_eq!(scheme("http+unix://%2Frun%2Fx.sock/v1"), Some("http+unix"));
        assert_eq!(scheme("unix:/run/x.sock"), Some("unix"));
        assert_eq!(scheme("git@h:g/p.git"), None);
        assert_eq!(scheme("/a:b"), None);
    }
}
