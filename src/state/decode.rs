//! A direct reader for the shard files sentinel writes, the other half of
//! `encode`: a wake parses the two or three shards it touches, and serde's
//! generic path was a fifth of a 1-file wake's instructions.
//!
//! It reads exactly the layout the writer produces (its field order, its
//! newlines, strings without escapes, integer timestamps) and gives `None`
//! for anything else: then the shard is read by serde as before, which alone
//! decides what is accepted and what error a damaged shard reports. So a
//! shard written by hand, by an older build or with an escaped path costs
//! the old price and means the same.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::files::{Saved, Summary};
use super::json_read::Cursor;
use super::schema::{ContentFacts, Decision, FileRecord, NextReview, Outcome};
use super::shards::ShardFile;

/// A line of the manifest's `shards`, when it is exactly the text
/// `encode::put_saved` writes (an optional field only when it is set, a
/// count only when it is not zero): then what it gives that writer writes
/// back as the same line, and a save may copy the line instead.
pub(super) fn saved_line(line: &[u8]) -> Option<Option<Saved>> {
    if line == b"null" {
        return Some(None);
    }
    let mut c = Cursor::new(line);
    c.lit(b"{\"id\":")?;
    let id = c.string()?;
    c.lit(b",\"n\":")?;
    let mut s = Summary {
        n: usize::try_from(c.u64()?).ok()?,
        ..Summary::default()
    };
    if c.lit(b",\"retry\":").is_some() {
        s.retry = Some(c.ts()?);
    }
    if c.lit(b",\"awaiting\":").is_some() {
        s.awaiting = c.nonzero()?;
    }
    if c.lit(b",\"decided_by\":{").is_some() {
        s.decided_by = c.counts()?;
    }
    if c.lit(b",\"review\":{\"at\":").is_some() {
        let at = c.plain_time()?;
        c.lit(b",\"path\":")?;
        let path = c.string()?;
        c.lit(b"}")?;
        s.review = Some(NextReview { at, path });
    }
    if c.lit(b",\"stuck\":").is_some() {
        s.stuck = c.nonzero()?;
    }
    if c.lit(b",\"unknown_deps\":").is_some() {
        s.unknown_deps = c.nonzero()?;
    }
    if c.lit(b",\"triggers\":").is_some() {
        s.triggers = c.nonzero()?;
    }
    if c.lit(b",\"unknown_dirs\":").is_some() {
        s.unknown_dirs = c.string().filter(|d| !d.is_empty())?;
    }
    c.lit(b"}")?;
    (c.at == line.len()).then_some(Some(Saved { id, summary: s }))
}

/// The shard in `bytes`, when it is laid out as the writer lays it out.
pub(super) fn shard(bytes: &[u8]) -> Option<ShardFile> {
    let mut c = Cursor::new(bytes);
    c.lit(b"{\"bucket\":")?;
    let bucket = usize::try_from(c.u64()?).ok()?;
    c.lit(b",\"of\":")?;
    let of = usize::try_from(c.u64()?).ok()?;
    c.lit(b",\"files\":{")?;
    let files = c.entries(Cursor::record)?;
    c.lit(b",\"importers\":{")?;
    let importers = c.entries(Cursor::strs)?;
    c.lit(b"}\n")?;
    (c.at == bytes.len()).then_some(ShardFile {
        bucket,
        of,
        files,
        importers,
    })
}

/// The record for `path` (`Some(None)`: none) in the shard in `bytes`,
/// bucket `bucket` of `of` holding `n` records, read without decoding the others:
/// one record per line, keys strictly ascending, the record of `path` (if
/// any) decoded as `shard` would decode it. `None` for anything `shard`
/// might not read the same way (the caller then decodes the whole shard,
/// which alone decides what is accepted and which error is reported).
pub(super) fn holds(
    bytes: &[u8],
    bucket: usize,
    of: usize,
    n: usize,
    path: &str,
) -> Option<Option<FileRecord>> {
    let mut c = Cursor::new(bytes);
    c.lit(b"{\"bucket\":")?;
    (usize::try_from(c.u64()?).ok()? == bucket).then_some(())?;
    c.lit(b",\"of\":")?;
    (usize::try_from(c.u64()?).ok()? == of).then_some(())?;
    c.lit(b",\"files\":{\n")?;
    let mut found = None;
    let mut count = 0usize;
    let mut last: Option<&str> = None;
    if c.lit(b"}").is_none() {
        loop {
            // A record never holds a raw newline: its line ends at the next.
            let end = c.at + memchr::memchr(b'\n', c.b.get(c.at..)?)?;
            let key = c.str()?;
            if last.is_some_and(|l| l >= key) {
                return None;
            }
            last = Some(key);
            count += 1;
            c.lit(b":")?;
            if key == path {
                found = Some(c.record()?);
            } else {
                c.at = end - usize::from(c.b.get(end - 1) == Some(&b','));
            }
            if c.lit(b",\n").is_none() {
                c.lit(b"\n}")?;
                (c.at == end + 2).then_some(())?;
                break;
            }
            if c.at != end + 1 {
                return None;
            }
        }
    }
    c.lit(b",\"importers\":{")?;
    (count == n && bytes.ends_with(b"}\n")).then_some(found)
}

impl<'a> Cursor<'a> {
    /// `\n"key":value` entries, `,`-separated, up to `\n}`; keys strictly
    /// ascending, as the writer's path order has them (serde would keep
    /// the last of two equal keys: leave that to it).
    fn entries<T>(&mut self, value: fn(&mut Self) -> Option<T>) -> Option<BTreeMap<String, T>> {
        let mut out: Vec<(String, T)> = Vec::new();
        loop {
            if !out.is_empty() {
                if self.lit(b"\n}").is_some() {
                    break;
                }
                self.lit(b",")?;
            }
            self.lit(b"\n")?;
            if out.is_empty() && self.lit(b"}").is_some() {
                break;
            }
            let key = self.str()?;
            if out.last().is_some_and(|(last, _)| last.as_str() >= key) {
                return None;
            }
            self.lit(b":")?;
            out.push((key.to_string(), value(self)?));
        }
        // Sorted: built in bulk, every node full.
        Some(out.into_iter().collect())
    }

    /// A count the writer writes only when it is not zero.
    fn nonzero(&mut self) -> Option<u64> {
        self.u64().filter(|n| *n != 0)
    }

    /// `"key":n` pairs up to `}`, at least one, keys strictly ascending.
    fn counts(&mut self) -> Option<BTreeMap<String, u64>> {
        let mut out: Vec<(String, u64)> = Vec::new();
        loop {
            let key = self.str()?;
            if out.last().is_some_and(|(last, _)| last.as_str() >= key) {
                return None;
            }
            self.lit(b":")?;
            out.push((key.to_string(), self.u64()?));
            if self.eat(b'}') {
                return Some(out.into_iter().collect());
            }
            self.lit(b",")?;
        }
    }

    /// A time as `rfc3339::text` writes it for a whole second of a year of
    /// four digits, `YYYY-MM-DDTHH:MM:SSZ`; any other text serde reads.
    /// `parse_plain` reads exactly that shape, digits and all, into a whole
    /// second, and refuses a leap second that chrono would read with a
    /// fraction: what it refuses, this refused after chrono read it.
    fn plain_time(&mut self) -> Option<DateTime<Utc>> {
        let text = self.str()?;
        self.time_of(text, |s| super::rfc3339::parse_plain(s.as_bytes()))
    }

    fn string(&mut self) -> Option<String> {
        self.str().map(str::to_string)
    }

    fn strs(&mut self) -> Option<Vec<String>> {
        self.lit(b"[")?;
        let mut out = Vec::new();
        if self.lit(b"]").is_some() {
            return Some(out);
        }
        loop {
            out.push(self.string()?);
            if self.lit(b"]").is_some() {
                return Some(out);
            }
            self.lit(b",")?;
        }
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    /// A timestamp the writer wrote: non-negative milliseconds.
    fn ts(&mut self) -> Option<DateTime<Utc>> {
        let ms = i64::try_from(self.u64()?).ok()?;
        if let Some((last, t)) = self.last_ms
            && last == ms
        {
            return Some(t);
        }
        let t = DateTime::from_timestamp_millis(ms)?;
        self.last_ms = Some((ms, t));
        Some(t)
    }

    fn ts_list(&mut self) -> Option<Vec<DateTime<Utc>>> {
        self.lit(b"[")?;
        let mut out = Vec::new();
        if self.lit(b"]").is_some() {
            return Some(out);
        }
        loop {
            out.push(self.ts()?);
            if self.lit(b"]").is_some() {
                return Some(out);
            }
            self.lit(b",")?;
        }
    }

    /// A small nested object read by serde (escapes and all): only its
    /// extent is found here.
    fn nested<T: serde::de::DeserializeOwned>(&mut self) -> Option<T> {
        let start = self.at;
        let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
        loop {
            let b = self.peek()?;
            self.at += 1;
            if in_str {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_str = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_str = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        break;
                    }
                }
                _ if depth == 0 => return None,
                _ => {}
            }
        }
        serde_json::from_slice(&self.b[start..self.at]).ok()
    }

    fn content(&mut self) -> Option<ContentFacts> {
        self.lit(b"{\"hash\":")?;
        let hash = self.string()?;
        self.lit(b",\"chars\":")?;
        let chars = self.u64()?;
        let imports = if self.lit(b",\"imports\":").is_some() {
            self.strs()?
        } else {
            Vec::new()
        };
        self.lit(b"}")?;
        Some(ContentFacts {
            hash,
            chars,
            imports,
        })
    }

    fn decision(&mut self) -> Option<Decision> {
        self.lit(b"{\"outcome\":")?;
        let name = self.str()?;
        let outcome = Outcome::ALL.into_iter().find(|o| o.as_str() == name)?;
        self.lit(b",\"reason\":")?;
        let reason = self.string()?;
        self.lit(b",\"ts\":")?;
        let ts = self.ts()?;
        let by = if self.lit(b",\"by\":").is_some() {
            Some(self.string()?)
        } else {
            None
        };
        let answered_by = if self.lit(b",\"answered_by\":").is_some() {
            Some(self.string()?)
        } else {
            None
        };
        self.lit(b"}")?;
        Some(Decision {
            outcome,
            reason,
            ts,
            by,
            answered_by,
        })
    }

    /// One record, its fields in the writer's order (`encode::put_record`).
    fn record(&mut self) -> Option<FileRecord> {
        self.lit(b"{\"blob\":")?;
        let mut r = FileRecord {
            blob: self.string()?,
            ..FileRecord::default()
        };
        let mut last_ts = None;
        // Each field at most once and in order: a field seen out of order
        // ends the fast path.
        let mut next = 0usize;
        while self.lit(b",\"").is_some() {
            let key = self.str_rest()?;
            // Looked for only after the last field: one before it is out
            // of order, and ends the fast path as an unknown one does.
            next += FIELDS.get(next..)?.iter().position(|f| *f == key)? + 1;
            match key {
                "content" => r.content = Some(self.content()?),
                "fingerprint" => r.fingerprint = Some(self.string()?),
                "decision" => r.decision = Some(self.decision()?),
                "changed_ts" => r.changed_ts = Some(self.ts()?),
                "review" => r.review = Some(self.nested()?),
                "rollback_streak" => r.rollback_streak = self.u32()?,
                "deps" => r.deps = self.strs()?,
                "first_ts" => r.first_ts = Some(self.ts()?),
                "last_ts" => last_ts = Some(self.ts()?),
                "evaluations" => r.evaluations = self.u64()?,
                "reuses" => r.reuses = self.u64()?,
                "tokens_saved" => r.tokens_saved = self.u64()?,
                "retry" => r.retry = Some(self.nested()?),
                "own_output" => r.own_output = self.strs()?,
                "rewrites" => r.rewrites = self.ts_list()?,
                "stuck" => {
                    self.lit(b"true")?;
                    r.stuck = true;
                }
                _ => return None,
            }
        }
        self.lit(b"}")?;
        r.last_ts = last_ts?;
        Some(r)
    }

    /// The rest of a key whose opening quote was eaten, and its colon.
    fn str_rest(&mut self) -> Option<&'a str> {
        self.at -= 1;
        let key = self.str()?;
        self.lit(b":")?;
        Some(key)
    }
}

/// `FileRecord`'s fields after `blob`, in the order the writer puts them.
const FIELDS: [&str; 16] = [
    "content",
    "fingerprint",
    "decision",
    "changed_ts",
    "review",
    "rollback_streak",
    "deps",
    "first_ts",
    "last_ts",
    "evaluations",
    "reuses",
    "tokens_saved",
    "retry",
    "own_output",
    "rewrites",
    "stuck",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;
    use crate::state::files::Rules;
    use crate::state::records::lifecycle::Review;
    use crate::state::records::retry::{Retry, Wait};
    use crate::state::shards;
    use std::collections::BTreeSet;

    const NO_RULES: Rules = Rules {
        locked: |_, _| false,
        review_due: |_, _, _| None,
        import_dirs: |_, _| BTreeSet::new(),
    };

    fn ts(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).unwrap()
    }

    /// Every field set, or (`i` odd) every optional one left out.
    fn record(i: usize) -> FileRecord {
        let base = FileRecord {
            blob: format!("{i:040x}"),
            last_ts: ts(1_782_864_000_000 + i as i64),
            evaluations: i as u64,
            ..FileRecord::default()
        };
        if i % 2 == 1 {
            return base;
        }
        FileRecord {
            content: Some(ContentFacts {
                hash: "0123456789abcdef".into(),
                chars: u64::MAX - i as u64,
                imports: if i.is_multiple_of(4) {
                    vec!["./a.js".into(), "../b".into()]
                } else {
                    vec![]
                },
            }),
            fingerprint: Some(format!("fp{i}|low|doc|0.90|deps:-")),
            decision: Some(Decision {
                answered_by: None,
                outcome: Outcome::ALL[i % Outcome::ALL.len()],
                reason: format!("reason {i} é ✓"),
                ts: ts(0),
                by: i.is_multiple_of(3).then(|| "openai:gpt-4o-mini".into()),
            }),
            changed_ts: Some(ts(5)),
            review: Some(Review {
                next: ts(1_000),
                interval_days: 7,
            }),
            rollback_streak: u32::MAX,
            deps: vec![format!("f{}.js", i / 2), "f0.js".into()],
            first_ts: Some(ts(1)),
            reuses: 3,
            tokens_saved: u64::MAX,
            retry: Some(Retry {
                fingerprint: "fp \"quoted\"".into(),
                failures: 2,
                not_before: ts(9),
                wait: Wait::Backoff,
                at_once: true,
            }),
            own_output: vec!["abc".into(), "def".into()],
            rewrites: vec![ts(1), ts(2)],
            stuck: true,
            ..base
        }
    }

    /// The shard files of a saved state of `n` varied records.
    pub(super) fn written(dir: &std::path::Path, n: usize) -> Vec<Vec<u8>> {
        let path = dir.join("state.json");
        let mut state = State::new();
        state.files.set_rules(NO_RULES);
        for i in 0..n {
            state
                .files
                .insert(format!("src/d{}/f{i}.js", i % 13), record(i));
        }
        shards::save(&path, &state).unwrap();
        shards::shard_files(&path)
            .iter()
            .map(|f| std::fs::read(f).unwrap())
            .collect()
    }

    fn by_serde(bytes: &[u8]) -> Option<ShardFile> {
        serde_json::from_slice(bytes).ok()
    }

    fn same(a: &ShardFile, b: &ShardFile) -> bool {
        (a.bucket, a.of, &a.files, &a.importers) == (b.bucket, b.of, &b.files, &b.importers)
    }

    #[test]
    fn a_shard_the_writer_wrote_is_read_directly_as_serde_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let shards = written(dir.path(), 600);
        assert!(shards.len() > 1);
        let mut importers = 0;
        for bytes in &shards {
            let direct = shard(bytes).expect("the writer's own layout is read directly");
            assert!(same(&direct, &by_serde(bytes).unwrap()));
            importers += direct.importers.len();
        }
        assert!(importers > 0, "the index was read too");
    }

    #[test]
    fn anything_but_the_writers_layout_is_left_to_serde() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = written(dir.path(), 40).swap_remove(0);
        let text = String::from_utf8(bytes).unwrap();
        assert!(shard(text.as_bytes()).is_some());
        let first_blob = text.find("{\"blob\":").unwrap();
        let edits: Vec<(&str, String)> = vec![
            (
                "an escaped path",
                text.replacen("\n\"src/", "\n\"src\\/", 1),
            ),
            (
                "an unknown field",
                text.replacen("{\"blob\":", "{\"extra\":1,\"blob\":", 1),
            ),
            ("a field out of order", {
                let mut t = text.clone();
                t.insert_str(first_blob + 1, "\"evaluations\":1,");
                t
            }),
            (
                "an earlier field after a later one",
                text.replacen(
                    ",\"tokens_saved\":",
                    ",\"rollback_streak\":1,\"tokens_saved\":",
                    1,
                ),
            ),
            (
                "a field twice",
                text.replacen(",\"reuses\":", ",\"reuses\":1,\"reuses\":", 1),
            ),
            ("a space", text.replacen("\"of\":", "\"of\": ", 1)),
            (
                "a negative time",
                text.replacen("\"last_ts\":", "\"last_ts\":-", 1),
            ),
            (
                "a fraction",
                text.replacen("\"evaluations\":", "\"evaluations\":1.5,\"x\":", 1),
            ),
            (
                "a leading zero",
                text.replacen("\"reuses\":", "\"reuses\":0", 1),
            ),
            (
                "null",
                text.replacen("\"reuses\":", "\"reuses\":null,\"y\":", 1),
            ),
            ("a trailing byte", format!("{text} ")),
            (
                "a missing last_ts",
                text.replacen("\"last_ts\":", "\"last_tz\":", 1),
            ),
            (
                "an unknown outcome",
                text.replacen("\"outcome\":\"", "\"outcome\":\"x", 1),
            ),
            (
                "a u32 overflow",
                text.replacen("\"rollback_streak\":", "\"rollback_streak\":9", 1),
            ),
            ("truncated", text[..text.len() / 2].to_string()),
        ];
        for (what, edited) in edits {
            assert_ne!(edited, text, "{what}: the edit applies");
            assert!(
                shard(edited.as_bytes()).is_none(),
                "{what} is read by serde"
            );
        }
        // What serde accepts that the writer never writes keeps its meaning.
        let spaced = text.replacen("\"of\":", "\"of\": ", 1);
        assert!(same(
            &by_serde(spaced.as_bytes()).unwrap(),
            &shard(text.as_bytes()).unwrap()
        ));
    }

    fn line_of(saved: Option<&Saved>) -> String {
        let mut out = Vec::new();
        crate::state::encode::put_saved(&mut out, saved).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn summary_with_every_field() -> Summary {
        Summary {
            n: 216,
            retry: Some(ts(1_782_864_000_123)),
            awaiting: 2,
            decided_by: [("model a".to_string(), 3), ("model b".to_string(), 0)].into(),
            review: Some(NextReview {
                at: ts(1_783_728_000_000),
                path: "src/d1/f10.txt".into(),
            }),
            stuck: 4,
            unknown_deps: 5,
            triggers: 6,
            unknown_dirs: "00ff".into(),
        }
    }

    /// The manifest's shard lines were read by serde on every wake, and
    /// written again whole though a wake changes two or three of 512: a
    /// line the writer wrote is read directly, as serde reads it, and only
    /// such a line, so that a save may copy it as it is.
    #[test]
    fn a_shard_line_the_writer_wrote_is_read_directly_as_serde_reads_it_and_no_other() {
        let id = "ab".repeat(32);
        let every = Saved {
            id: id.clone(),
            summary: summary_with_every_field(),
        };
        let bare = Saved {
            id: id.clone(),
            summary: Summary {
                n: 1,
                ..Summary::default()
            },
        };
        for saved in [Some(&every), Some(&bare), None] {
            let line = line_of(saved);
            let direct = saved_line(line.as_bytes()).expect(&line);
            let serde: Option<Saved> = serde_json::from_str(&line).unwrap();
            assert_eq!(direct.as_ref(), saved, "{line}");
            assert_eq!(direct, serde, "{line}");
        }
        // What serde reads alike but the writer never writes: left to serde.
        let line = line_of(Some(&every));
        let declined = [
            line.replace("\"awaiting\":2", "\"awaiting\":0"),
            line.replace(",\"triggers\":6", ",\"triggers\":0"),
            line.replace("\"model a\":3,\"model b\":0", "\"model b\":0,\"model a\":3"),
            line.replace("2026-07-11T00:00:00Z", "2026-07-11T00:00:00+00:00"),
            line.replace("2026-07-11T00:00:00Z", "2026-07-11t00:00:00z"),
            line.replace("2026-07-11T00:00:00Z", "2026-07-11T00:00:00.5Z"),
            line.replace("2026-07-11T00:00:00Z", "2026-06-30T23:59:60Z"),
            line.replace("src/d1/f10.txt", "src\\/d1/f10.txt"),
            line.replace("\"unknown_dirs\":\"00ff\"", "\"unknown_dirs\":\"\""),
            line.replace("{\"id\"", "{ \"id\""),
            format!("{},\"more\":1}}", &line[..line.len() - 1]),
            line.replace(
                "\"stuck\":4,\"unknown_deps\":5",
                "\"unknown_deps\":5,\"stuck\":4",
            ),
        ];
        for (i, text) in declined.iter().enumerate() {
            assert_ne!(text, &line, "edit {i} changed nothing");
            assert!(saved_line(text.as_bytes()).is_none(), "edit {i}: {text}");
            let serde: Option<Saved> = serde_json::from_str(text).unwrap();
            assert!(serde.is_some(), "edit {i}");
        }
    }
}
