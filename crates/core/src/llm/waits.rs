//! Every wait a peer gives, wherever it puts it: `retry-after-ms`,
//! `Retry-After`, the reset of an exhausted `x-ratelimit-*` window (each
//! also under a proxy's `llm_provider-` prefix) and "try again in ..."
//! inside the message. The longest wins, and a wait beyond the cap is held
//! for the cap: a wait thrown away as "not sane" hands the provider back to
//! the 2-minute table, which is how a two-day wait became 90 calls.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// The longest wait believed as given; a longer one is held for this long.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 60 * 60);

/// The prefix LiteLLM puts before every header it passes on from upstream.
const PROXY_PREFIX: &str = "llm_provider-";

/// The headers (lower case, without a proxy's prefix) that say how long to wait.
const WAIT_HEADERS: [&str; 6] = [
    "retry-after-ms",
    "retry-after",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
];

/// Whether a response header is one `server_wait` reads: only these are
/// kept with a failure.
pub fn is_wait_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let bare = name.strip_prefix(PROXY_PREFIX).unwrap_or(&name);
    WAIT_HEADERS.contains(&bare)
}

/// A wait the peer asked for, and where it said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub wait: Duration,
    /// The header (as sent, prefix included) or `message`.
    pub from: String,
    /// The peer asked for longer than `MAX_WAIT`; `wait` is the cap.
    pub capped: bool,
}

/// The longest wait in `headers` (name, value) and in the error's
/// `message`, relative to `now` for an HTTP date; `None` when nothing asks
/// for a wait over zero. A window's reset counts only when the window is
/// spent (its `remaining` header is 0 or absent): OpenAI sends the resets
/// of both windows on every answer, and the one with room left is not a wait.
pub fn server_wait(
    headers: &[(String, String)],
    message: Option<&str>,
    now: DateTime<Utc>,
) -> Option<Wait> {
    let mut found: Vec<(Duration, String)> = Vec::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let (prefix, bare) = match lower.strip_prefix(PROXY_PREFIX) {
            Some(bare) => (PROXY_PREFIX, bare),
            None => ("", lower.as_str()),
        };
        let wait = match bare {
            "retry-after-ms" => millis(value),
            "retry-after" => seconds_or_date(value, now),
            "x-ratelimit-reset-requests" | "x-ratelimit-reset-tokens" => {
                let window = bare.trim_start_matches("x-ratelimit-reset-");
                let remaining = format!("{prefix}x-ratelimit-remaining-{window}");
                let spent = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(&remaining))
                    .is_none_or(|(_, v)| v.trim() == "0");
                if spent { duration(value) } else { None }
            }
            _ => None,
        };
        if let Some(w) = wait {
            found.push((w, name.clone()));
        }
    }
    if let Some(w) = message.and_then(said_in_words) {
        found.push((w, "message".into()));
    }
    let (wait, from) = found.into_iter().max_by_key(|(w, _)| *w)?;
    Some(Wait {
        wait: wait.min(MAX_WAIT),
        from,
        capped: wait > MAX_WAIT,
    })
}

/// A `retry-after-ms` value: milliseconds, possibly fractional.
fn millis(s: &str) -> Option<Duration> {
    let ms: f64 = s.trim().parse().ok()?;
    positive_secs(ms / 1000.0)
}

/// A `Retry-After` value: whole seconds, or an HTTP date relative to `now`.
fn seconds_or_date(s: &str, now: DateTime<Utc>) -> Option<Duration> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return (secs > 0).then(|| Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(s).ok()?.with_timezone(&Utc);
    (at - now).to_std().ok().filter(|d| !d.is_zero())
}

/// Seconds as a positive, finite duration; anything else is no wait.
/// Clamped before converting: `from_secs_f64` panics past its range.
fn positive_secs(secs: f64) -> Option<Duration> {
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    let limit = MAX_WAIT.as_secs_f64() * 2.0;
    Some(Duration::from_secs_f64(secs.min(limit)))
}

/// A duration as OpenAI (and Groq) write their resets, `1h2m3.5s`,
/// `120ms`, `6m0s`, or a plain number of seconds.
pub fn duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return positive_secs(secs);
    }
    let mut total = 0.0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "d" => 86_400.0,
            "h" => 3_600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit..];
    }
    positive_secs(total)
}

/// The phrases that put a wait inside a message: OpenAI's and Groq's "try
/// again in 8h38m24s", Gemini's "retry in 23.4s", Azure's "retry after 20
/// seconds".
const WAIT_PHRASES: [&str; 4] = [
    "try again in ",
    "retry in ",
    "retry after ",
    "try again after ",
];

/// The longest wait a message asks for in words.
pub fn said_in_words(message: &str) -> Option<Duration> {
    let lower = message.to_ascii_lowercase();
    WAIT_PHRASES
        .iter()
        .flat_map(|p| lower.match_indices(p).map(move |(i, _)| i + p.len()))
        .filter_map(|at| spoken(&lower[at..]))
        .max()
}

/// The duration at the start of `text`: `8h38m24s` or `20 seconds`.
fn spoken(text: &str) -> Option<Duration> {
    let mut words = text.split_whitespace();
    let first = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if let Some(d) = duration(first).filter(|_| first.ends_with(|c: char| c.is_ascii_alphabetic()))
    {
        return Some(d);
    }
    let value: f64 = first.parse().ok()?;
    let unit = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_alphabetic());
    let scale = match unit.trim_end_matches('s') {
        "millisecond" => 0.001,
        "second" | "sec" => 1.0,
        "minute" | "min" => 60.0,
        "hour" | "hr" => 3_600.0,
        "day" => 86_400.0,
        _ => return None,
    };
    positive_secs(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-06-16T12:00:00Z".parse().unwrap()
    }

    fn h(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn wait(pairs: &[(&str, &str)], message: Option<&str>) -> Option<(u64, String, bool)> {
        server_wait(&h(pairs), message, now())
            .map(|w| (w.wait.as_millis() as u64, w.from, w.capped))
    }

    #[test]
    fn openais_reset_form_is_read_to_the_millisecond() {
        let cases = [
            ("8h38m24s", 31_104_000),
            ("1h2m3.5s", 3_723_500),
            ("120ms", 120),
            ("6m0s", 360_000),
            ("1.574s", 1_574),
            ("17", 17_000),
        ];
        for (text, ms) in cases {
            assert_eq!(
                duration(text).map(|d| d.as_millis() as u64),
                Some(ms),
                "{text}"
            );
        }
        for bad in ["", "h", "5x", "-3s", "0s", "NaN", "inf", "1e400"] {
            assert_eq!(duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_per_day_limit_is_held_until_its_reset_from_header_or_message() {
        let rpd = "Rate limit reached for gpt-4o-mini in organization org-**** on requests per day (RPD): Limit 10000, Used 10000, Requested 1. Please try again in 8h38m24s. Visit https://platform.openai.com/account/rate-limits to learn more.";
        let header = [
            ("llm_provider-x-ratelimit-remaining-requests", "0"),
            ("llm_provider-x-ratelimit-reset-requests", "8h38m24s"),
        ];
        assert_eq!(
            wait(&header, None),
            Some((
                31_104_000,
                "llm_provider-x-ratelimit-reset-requests".into(),
                false
            ))
        );
        assert_eq!(
            wait(&[], Some(rpd)),
            Some((31_104_000, "message".into(), false))
        );
    }

    #[test]
    fn the_reset_of_a_window_with_room_left_is_not_a_wait() {
        // OpenAI's headers on a tokens-per-minute 429: the requests window has room.
        let headers = [
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ];
        assert_eq!(
            wait(&headers, None),
            Some((360_000, "x-ratelimit-reset-tokens".into(), false))
        );
    }

    #[test]
    fn a_wait_beyond_a_day_is_held_for_the_cap_not_thrown_away() {
        assert_eq!(
            wait(&[("llm_provider-retry-after", "172800")], None),
            Some((86_400_000, "llm_provider-retry-after".into(), true))
        );
        assert_eq!(
            wait(&[("retry-after", "Fri, 01 Jan 2100 00:00:00 GMT")], None).map(|w| w.2),
            Some(true)
        );
        assert_eq!(
            wait(&[("retry-after-ms", "1e12")], None).map(|w| w.2),
            Some(true)
        );
    }

    #[test]
    fn the_longest_wait_wins_wherever_it_is() {
        let headers = [
            ("retry-after-ms", "1500.5"),
            ("retry-after", "7"),
            ("llm_provider-retry-after", "3600"),
        ];
        assert_eq!(
            wait(&headers, Some("Please try again in 20s.")),
            Some((3_600_000, "llm_provider-retry-after".into(), false))
        );
        assert_eq!(
            wait(&[("retry-after", "7")], Some("Please try again in 1m30s.")),
            Some((90_000, "message".into(), false))
        );
    }

    #[test]
    fn waits_said_in_words_are_read_in_each_providers_phrasing() {
        let cases = [
            ("Please try again in 1.574s. Visit", 1_574),
            ("Please retry after 20 seconds.", 20_000),
            ("Please retry in 23.476542s.", 23_476),
            ("try again in 2 minutes", 120_000),
            ("Please try again in 120ms.", 120),
        ];
        for (text, ms) in cases {
            assert_eq!(wait(&[], Some(text)).map(|w| w.0), Some(ms), "{text}");
        }
        for none in [
            "try again later",
            "retry after a while",
            "Rate limit reached.",
        ] {
            assert_eq!(wait(&[], Some(none)), None, "{none}");
        }
    }

    #[test]
    fn zero_negative_and_garbage_waits_are_no_wait() {
        for bad in ["0", "-1", "garbage", "", "NaN", "inf"] {
            assert_eq!(wait(&[("retry-after-ms", bad)], None), None, "ms {bad:?}");
            assert_eq!(wait(&[("retry-after", bad)], None), None, "s {bad:?}");
        }
        assert_eq!(
            wait(&[("retry-after", "Tue, 16 Jun 2026 11:59:00 GMT")], None),
            None
        );
    }

    #[test]
    fn only_wait_headers_are_kept() {
        assert!(is_wait_header("Retry-After"));
        assert!(is_wait_header("llm_provider-x-ratelimit-reset-tokens"));
        assert!(!is_wait_header("x-litellm-response-cost"));
        assert!(!is_wait_header("llm_provider-date"));
    }
}
