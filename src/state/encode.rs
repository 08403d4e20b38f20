//! A direct JSON writer for the per-file records, byte for byte what
//! `serde_json::to_writer` writes for them: a save encodes every record of
//! the tree on a first run, and serde's generic path escapes every field
//! name and scans every string byte by byte on the way.
//!
//! The writer knows the field order and the skip rules of `FileRecord`'s
//! derived `Serialize`; the rare nested parts (a review schedule, a retry)
//! go through serde as they are. The tests compare both writers on records
//! with every field set.

use serde::Serialize;

use super::files::Saved;
use super::schema::{ContentFacts, Decision, FileRecord};

/// `value` as compact JSON through serde, appended to `out`.
fn serde_into<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, value)
}

/// A JSON string; one that needs an escape is left to serde, so the escapes
/// are serde's own.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    if needs_no_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_into(out, s);
    }
}

/// Whether serde writes `s` as it is between quotes: no control byte
/// (below 0x20), no quote and no backslash. Eight bytes at a time: every string
/// of every record of a first run passes here, and a byte at a time was
/// the largest part of encoding them.
fn needs_no_escape(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Nonzero exactly when some byte of `v` is zero (a borrow may set the
    // flag of a byte above a zero one, never one when there is none).
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut chunks = s.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(c.try_into().expect("eight bytes"));
        // A byte below 0x20, exactly as for a zero byte (0x20 <= 0x80).
        let control = v.wrapping_sub(ONES * 0x20) & !v & HIGH;
        let quote = zero_byte(v ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(v ^ (ONES * u64::from(b'\\')));
        if control | quote | backslash != 0 {
            return false;
        }
    }
    chunks
        .remainder()
        .iter()
        .all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// A list of JSON strings.
pub fn put_strs<S: AsRef<str>>(out: &mut Vec<u8>, list: &[S]) {
    out.push(b'[');
    for (i, s) in list.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, s.as_ref());
    }
    out.push(b']');
}

/// Pairs of decimal digits, `00` to `99`, for `put_u64`.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

pub fn put_u64(out: &mut Vec<u8>, mut n: u64) {
    // Two digits a step: a first run writes four 13-digit times a record.
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[at..]);
}

fn put_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    put_u64(out, n.unsigned_abs());
}

/// The times of one record, which are mostly one instant (a first run's
/// record was decided, changed, first and last seen at the tick's time):
/// the text of the last one written is copied for the next that equals it.
#[derive(Default)]
struct Times {
    last: Option<(i64, usize)>,
    text: [u8; 20],
}

impl Times {
    fn put(&mut self, out: &mut Vec<u8>, t: &chrono::DateTime<chrono::Utc>) {
        let ms = t.timestamp_millis();
        if let Some((at, len)) = self.last
            && at == ms
        {
            out.extend_from_slice(&self.text[..len]);
            return;
        }
        let start = out.len();
        put_i64(out, ms);
        let len = out.len() - start;
        // An i64 in decimal, its sign included, is at most 20 bytes.
        self.text[..len].copy_from_slice(&out[start..]);
        self.last = Some((ms, len));
    }
}

fn put_ts(out: &mut Vec<u8>, t: &chrono::DateTime<chrono::Utc>) {
    put_i64(out, t.timestamp_millis());
}

/// `,"key":` (without the comma for the first field, which is always `blob`),
/// as one literal.
macro_rules! key {
    ($out:expr, $k:literal) => {
        $out.extend_from_slice(concat!(",\"", $k, "\":").as_bytes())
    };
}

/// `key!` for a name known only at run time.
fn key(out: &mut Vec<u8>, k: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

fn put_content(out: &mut Vec<u8>, c: &ContentFacts) {
    out.extend_from_slice(b"{\"hash\":");
    put_str(out, &c.hash);
    key!(out, "chars");
    put_u64(out, c.chars);
    if !c.imports.is_empty() {
        key!(out, "imports");
        put_strs(out, &c.imports);
    }
    out.push(b'}');
}

fn put_decision(out: &mut Vec<u8>, d: &Decision, times: &mut Times) {
    out.extend_from_slice(b"{\"outcome\":\"");
    out.extend_from_slice(d.outcome.as_str().as_bytes());
    out.push(b'"');
    key!(out, "reason");
    put_str(out, &d.reason);
    key!(out, "ts");
    times.put(out, &d.ts);
    if let Some(by) = &d.by {
        key!(out, "by");
        put_str(out, by);
    }
    if let Some(answered_by) = &d.answered_by {
        key!(out, "answered_by");
        put_str(out, answered_by);
    }
    out.push(b'}');
}

/// One record, as `serde_json::to_writer` writes it.
pub fn put_record(out: &mut Vec<u8>, r: &FileRecord) -> serde_json::Result<()> {
    let mut times = Times::default();
    out.extend_from_slice(b"{\"blob\":");
    put_str(out, &r.blob);
    if let Some(c) = &r.content {
        key!(out, "content");
        put_content(out, c);
    }
    if let Some(fp) = &r.fingerprint {
        key!(out, "fingerprint");
        put_str(out, fp);
    }
    if let Some(d) = &r.decision {
        key!(out, "decision");
        put_decision(out, d, &mut times);
    }
    if let Some(t) = &r.changed_ts {
        key!(out, "changed_ts");
        times.put(out, t);
    }
    if let Some(review) = &r.review {
        key!(out, "review");
        serde_into(out, review)?;
    }
    if r.rollback_streak != 0 {
        key!(out, "rollback_streak");
        put_u64(out, u64::from(r.rollback_streak));
    }
    if !r.deps.is_empty() {
        key!(out, "deps");
        put_strs(out, &r.deps);
    }
    if let Some(t) = &r.first_ts {
        key!(out, "first_ts");
        times.put(out, t);
    }
    key!(out, "last_ts");
    times.put(out, &r.last_ts);
    key!(out, "evaluations");
    put_u64(out, r.evaluations);
    key!(out, "reuses");
    put_u64(out, r.reuses);
    key!(out, "tokens_saved");
    put_u64(out, r.tokens_saved);
    if let Some(retry) = &r.retry {
        key!(out, "retry");
        serde_into(out, retry)?;
    }
    if !r.own_output.is_empty() {
        key!(out, "own_output");
        put_strs(out, &r.own_output);
    }
    if !r.rewrites.is_empty() {
        key!(out, "rewrites");
        out.push(b'[');
        for (i, t) in r.rewrites.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            times.put(out, t);
        }
        out.push(b']');
    }
    if r.stuck {
        key!(out, "stuck");
        out.extend_from_slice(b"true");
    }
    out.push(b'}');
    Ok(())
}

/// A manifest's shard line (`null` for an empty bucket), as
/// `serde_json::to_writer` writes it: 512 of them on every save. The rare
/// parts (the advisors' counts, a review) go through serde as they are.
pub fn put_saved(out: &mut Vec<u8>, saved: Option<&Saved>) -> serde_json::Result<()> {
    let Some(Saved { id, summary: s }) = saved else {
        out.extend_from_slice(b"null");
        return Ok(());
    };
    out.extend_from_slice(b"{\"id\":");
    put_str(out, id);
    key!(out, "n");
    put_u64(out, s.n as u64);
    if let Some(t) = &s.retry {
        key!(out, "retry");
        put_ts(out, t);
    }
    if s.awaiting != 0 {
        key!(out, "awaiting");
        put_u64(out, s.awaiting);
    }
    if !s.decided_by.is_empty() {
        key!(out, "decided_by");
        serde_into(out, &s.decided_by)?;
    }
    if let Some(review) = &s.review {
        key!(out, "review");
        serde_into(out, review)?;
    }
    for (k, n) in [
        ("stuck", s.stuck),
        ("unknown_deps", s.unknown_deps),
        ("triggers", s.triggers),
    ] {
        if n != 0 {
            key(out, k);
            put_u64(out, n);
        }
    }
    if !s.unknown_dirs.is_empty() {
        key!(out, "unknown_dirs");
        put_str(out, &s.unknown_dirs);
    }
    out.push(b'}');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Outcome;
    use crate::state::records::lifecycle::Review;
    use crate::state::records::retry::{Retry, Wait};

    fn ts(ms: i64) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_millis(ms).unwrap()
    }

    fn direct(r: &FileRecord) -> String {
        let mut out = Vec::new();
        put_record(&mut out, r).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Every field set: a field added to the record without the writer
    /// knowing it fails to build here (no `..Default::default()`).
    fn full(text: &str, outcome: Outcome) -> FileRecord {
        FileRecord {
            blob: format!("b{text}"),
            content: Some(ContentFacts {
                hash: "0123456789abcdef".into(),
                chars: u64::MAX,
                imports: vec![text.into(), "./x.js".into()],
            }),
            fingerprint: Some(format!("fp|{text}")),
            decision: Some(Decision {
                answered_by: None,
                outcome,
                reason: format!("why {text}"),
                ts: ts(-1_500),
                by: Some(text.into()),
            }),
            changed_ts: Some(ts(1_782_864_000_123)),
            review: Some(Review {
                next: ts(1_000),
                interval_days: 7,
            }),
            rollback_streak: u32::MAX,
            deps: vec![format!("src/{text}")],
            first_ts: Some(ts(0)),
            last_ts: ts(i64::from(i32::MAX) * 1000),
            evaluations: 1,
            reuses: 0,
            tokens_saved: 10,
            retry: Some(Retry {
                fingerprint: text.into(),
                failures: 3,
                not_before: ts(5),
                wait: Wait::Backoff,
                at_once: true,
            }),
            own_output: vec![text.into()],
            rewrites: vec![ts(1), ts(2)],
            stuck: true,
        }
    }

    /// Every field set, or none: a field added to the summary without the
    /// writer knowing it fails to build here (no `..Default::default()`).
    #[test]
    fn the_direct_shard_line_writer_writes_what_serde_writes() {
        use crate::state::files::Summary;
        use crate::state::schema::NextReview;
        let mut lines: Vec<Option<Saved>> = vec![None];
        for (i, s) in ["ab", "quote \" \\", "0123abcd", ""].iter().enumerate() {
            let full = Summary {
                n: usize::MAX >> i,
                retry: Some(ts(-5 + i as i64 * 1_782_864_000_123)),
                awaiting: 1 + i as u64,
                decided_by: [(s.to_string(), 2), ("m".into(), u64::MAX)].into(),
                review: Some(NextReview {
                    at: ts(1_782_864_000_000),
                    path: format!("src/{s}"),
                }),
                stuck: 3,
                unknown_deps: u64::MAX,
                triggers: i as u64 + 1,
                unknown_dirs: format!("00c0{s}"),
            };
            let none = Summary {
                n: i,
                retry: None,
                awaiting: 0,
                decided_by: Default::default(),
                review: None,
                stuck: 0,
                unknown_deps: 0,
                triggers: 0,
                unknown_dirs: String::new(),
            };
            for summary in [full, none] {
                lines.push(Some(Saved {
                    id: s.to_string(),
                    summary,
                }));
            }
        }
        for line in &lines {
            let mut out = Vec::new();
            put_saved(&mut out, line.as_ref()).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(line).unwrap()
            );
        }
    }

    /// Every byte at every place of a word, and words of every length
    /// around the eight bytes the check takes at a time: the string is
    /// written as serde writes it, escaped or not.
    #[test]
    fn the_eight_bytes_at_a_time_escape_check_writes_what_serde_writes() {
        for len in 0..=19 {
            for at in 0..len {
                for b in 0..=0x7fu8 {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = b;
                    let s = std::str::from_utf8(&bytes).unwrap();
                    let mut out = Vec::new();
                    put_str(&mut out, s);
                    assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
                }
            }
        }
        for s in [
            "é✓𝄞\u{80}\u{ff}",
            "\u{2028}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{7f}\u{1f}",
        ] {
            let mut out = Vec::new();
            put_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn numbers_written_two_digits_at_a_time_are_serdes() {
        let mut n = 1u64;
        let mut cases = vec![0, u64::MAX, u64::MAX - 1, 1_782_864_000_000];
        while let Some(m) = n.checked_mul(10) {
            cases.extend([n - 1, n, n + 1, m - 1]);
            n = m;
        }
        for n in cases {
            let mut out = Vec::new();
            put_u64(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
            let i = n as i64;
            let mut out = Vec::new();
            put_i64(&mut out, i);
            assert_eq!(String::from_utf8(out).unwrap(), i.to_string());
        }
        let mut out = Vec::new();
        put_i64(&mut out, i64::MIN);
        assert_eq!(String::from_utf8(out).unwrap(), i64::MIN.to_string());
    }

    /// A record's times copied from the one written before when equal:
    /// equal, different, in turn, and the extremes.
    #[test]
    fn a_record_whose_times_repeat_is_written_as_serde_writes_it() {
        let mut r = full("plain", Outcome::LocalSkip);
        for (a, b) in [
            (1_782_864_000_000, 1_782_864_000_000),
            (1_782_864_000_000, 1_782_864_000_001),
            (-1, 1),
            (i64::from(i32::MIN) * 1000, 0),
        ] {
            r.decision.as_mut().unwrap().ts = ts(a);
            r.changed_ts = Some(ts(a));
            r.first_ts = Some(ts(b));
            r.last_ts = ts(a);
            r.rewrites = vec![ts(a), ts(a), ts(b), ts(a)];
            assert_eq!(direct(&r), serde_json::to_string(&r).unwrap());
        }
    }

    #[test]
    fn the_direct_record_writer_writes_what_serde_writes() {
        let strings = [
            "plain",
            "",
            "quote \" and \\ backslash",
            "tab\tnew\nline\r\u{8}\u{c}\u{1}\u{1f}\u{7f}",
            "unicode é ✓ 𝄞 \u{2028}",
            "</script>",
        ];
        let mut records = vec![FileRecord::default()];
        for (i, s) in strings.iter().enumerate() {
            for o in Outcome::ALL {
                records.push(full(s, o));
            }
            let mut partial = full(s, Outcome::ALL[i]);
            partial.content.as_mut().unwrap().imports.clear();
            partial.decision.as_mut().unwrap().by = None;
            partial.retry.as_mut().unwrap().failures = 0;
            partial.stuck = false;
            partial.rollback_streak = 0;
            partial.rewrites.clear();
            partial.review = None;
            partial.changed_ts = None;
            records.push(partial);
        }
        for r in &records {
            assert_eq!(direct(r), serde_json::to_string(r).unwrap());
        }
        for s in strings {
            let mut out = Vec::new();
            put_str(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
    }
}
