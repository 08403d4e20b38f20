//! A manifest as sentinel writes it, read in one pass: each part from its
//! own line. Read as one document, the state-wide parts and the shard lines
//! are parsed by two readers (`State`, then `shards::Tail`), each skipping
//! over what the other reads: the observation log and the 512 shard lines
//! were scanned twice on every wake.
//!
//! JSON text written by serde holds no raw line break (one inside a string
//! is escaped), so the lines `store::encode_manifest` writes are the parts
//! it wrote. Anything else, an edited, reformatted or truncated file, a key
//! out of place, one part that fails to parse, gives `None`, and the caller
//! reads the document whole as before: that reader alone decides what is
//! refused, and what this one returns for a file is what it returns.

use std::ops::Range;

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use super::files::Saved;
use super::records::observation::ObservationLog;
use super::schema::State;
use super::shards::Layout;

/// The parts of a manifest.
pub struct Parts {
    pub state: State,
    pub layout: Layout,
    pub shards: Vec<Option<Saved>>,
    /// Where each shard's line is in the bytes read, when every line was
    /// read as one (a save copies a line whose bucket did not change).
    pub lines: Option<Lines>,
}

/// Whether a key was in the object.
#[derive(Default)]
struct Seen(bool);

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Seen, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Seen(true))
    }
}

/// What the header line must and must not hold: a part of the body named
/// there too would be a duplicate key of the document, which its reader
/// refuses.
#[derive(Deserialize)]
struct HeaderCheck {
    body_bytes: u64,
    #[serde(default)]
    backlog: Seen,
    #[serde(default)]
    llm: Seen,
    #[serde(default)]
    observations: Seen,
    #[serde(default)]
    files: Seen,
    #[serde(default)]
    layout: Seen,
    #[serde(default)]
    shards: Seen,
}

impl HeaderCheck {
    fn names_a_body_part(&self) -> bool {
        [
            &self.backlog,
            &self.llm,
            &self.observations,
            &self.files,
            &self.layout,
            &self.shards,
        ]
        .iter()
        .any(|s| s.0)
    }
}

/// The manifest `bytes` in one pass, or `None` when they are not laid out
/// exactly as `store::encode_manifest` writes them.
pub fn read(bytes: &[u8]) -> Option<Parts> {
    let end = newline(bytes)?;
    let (head, body) = bytes.split_at(end + 1);
    // `{"schema":...,"body_bytes":N,` and its line break: an object once
    // its last comma is a brace.
    let mut object = head.strip_suffix(b",\n")?.to_vec();
    object.push(b'}');
    let check: HeaderCheck = serde_json::from_slice(&object).ok()?;
    if check.body_bytes != body.len() as u64 || check.names_a_body_part() {
        return None;
    }
    let mut state: State = serde_json::from_slice(&object).ok()?;
    let mut rest = body;
    state.backlog = part(&mut rest, b"\"backlog\":")?;
    state.llm = part(&mut rest, b"\"llm\":")?;
    state.observations = log_line(&mut rest)?;
    let layout: Layout = part(&mut rest, b"\"layout\":")?;
    // `"shards":[` and a line per shard, then `]}`: the array, whose line
    // breaks are white space.
    let array = rest.strip_prefix(b"\"shards\":")?.strip_suffix(b"}\n")?;
    let at = bytes.len() - rest.len() + b"\"shards\":".len();
    let (shards, lines) = match shard_lines(array, at) {
        Some((shards, lines)) => (shards, Some(lines)),
        None => (serde_json::from_slice(array).ok()?, None),
    };
    Some(Parts {
        state,
        layout,
        shards,
        lines,
    })
}

/// Where each shard's line is in the manifest.
type Lines = Vec<Range<usize>>;

/// The array of shard lines as `store::encode_manifest` writes it, `[`, a
/// line per shard, each after a line break and all but the last ending in
/// a comma, then a line break and `]`, every line read by serde; `None` for
/// anything else. With each line's place
/// in the manifest, `at` being the array's.
fn shard_lines(array: &[u8], at: usize) -> Option<(Vec<Option<Saved>>, Lines)> {
    let inner = array.strip_prefix(b"[\n")?.strip_suffix(b"\n]")?;
    let mut start = at + 2;
    let (mut shards, mut lines) = (Vec::new(), Vec::new());
    let mut rest = inner;
    loop {
        let (text, last) = match newline(rest) {
            Some(end) => (rest[..end].strip_suffix(b",")?, false),
            None => (rest, true),
        };
        shards.push(serde_json::from_slice::<Option<Saved>>(text).ok()?);
        lines.push(start..start + text.len());
        if last {
            return Some((shards, lines));
        }
        // Past the line, its comma and its line break.
        start += text.len() + 2;
        rest = &rest[text.len() + 2..];
    }
}

/// Where the first line break in `bytes` is, looked for eight bytes at a
/// time: the observation log's line is most of a manifest, and a byte at a
/// time it cost as much as reading the log.
fn newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    const BREAKS: u64 = u64::from_ne_bytes([b'\n'; 8]);
    let mut at = 0;
    for chunk in bytes.chunks_exact(8) {
        let v = u64::from_ne_bytes(chunk.try_into().expect("eight bytes")) ^ BREAKS;
        // Whether a byte of `v` is zero, that is a byte of the chunk a break.
        if v.wrapping_sub(ONES) & !v & HIGH != 0 {
            break;
        }
        at += 8;
    }
    bytes[at..].iter().position(|&b| b == b'\n').map(|i| at + i)
}

/// The observation log's line, `rest` moved past it, read by serde.
fn log_line(rest: &mut &[u8]) -> Option<ObservationLog> {
    part(rest, b"\"observations\":")
}

/// The line at the start of `rest` that is `key`, a value and a comma: the
/// value, and `rest` moved past the line.
fn part<T: DeserializeOwned>(rest: &mut &[u8], key: &[u8]) -> Option<T> {
    serde_json::from_slice(line(rest, key)?).ok()
}

/// The value's text of the line `part` reads.
fn line<'a>(rest: &mut &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let end = newline(rest)?;
    let line = &rest[..end];
    *rest = &rest[end + 1..];
    line.strip_prefix(key)?.strip_suffix(b",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::Rules;
    use crate::records::autonomy::{Trigger, TriggerKind};
    use crate::records::observation::{Category, Prediction, Resolution, Watch};
    use crate::records::scope::Scope;
    use crate::schema::{FileRecord, NextReview, Proposal};
    use crate::{shards, store};
    use chrono::{DateTime, TimeZone, Utc};
    use std::collections::BTreeSet;

    const NO_RULES: Rules = Rules {
        locked: |_, _| false,
        review_due: |_, _, _| None,
        import_dirs: |_, _| BTreeSet::new(),
    };

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 7, day, 0, 0, 0).unwrap()
    }

    /// A state with every part of the manifest set, strings that need
    /// escapes among them, saved: the manifest's bytes.
    fn manifest() -> Vec<u8> {
        manifest_in(tempfile::tempdir().unwrap().path())
    }

    /// `manifest`, saved as `dir/state.json` (and its shards).
    fn manifest_in(dir: &std::path::Path) -> Vec<u8> {
        let path = dir.join("state.json");
        let mut s = State::new();
        s.scope = Some(Scope {
            source: "git".into(),
            project: "local:/r \"q\"".into(),
            branch: "main".into(),
            path: "src".into(),
        });
        s.wake.last_head = Some("abc".into());
        s.wake.ticks = 7;
        s.wake.wakes = 3;
        s.wake.by_reason.insert("first_run".into(), 1);
        s.wake.last_wake_ts = Some(at(1));
        s.outcomes.insert("local_skip".into(), 5);
        s.backlog = vec!["src/a \"q\".js".into(), "src/b\n.js".into()];
        s.llm.attempts = 4;
        s.llm.failures.insert("timeout".into(), 2);
        s.llm.proposals.insert(
            "src/p.js".into(),
            Proposal {
                fingerprint: "fp".into(),
                reason: "why\tnot".into(),
                findings: vec![],
                ts: at(2),
                stale: true,
                patch_commit: Some("c0ffee".into()),
                patch_pending: None,
            },
        );
        s.next_review = Some(NextReview {
            at: at(9),
            path: "src/r.js".into(),
        });
        s.next_retry = Some(at(3));
        s.autonomy_triggers = vec![Trigger {
            path: "src/t.js".into(),
            kind: TriggerKind::WrongPrediction,
            detail: "x".into(),
            ts: at(4),
        }];
        s.decided_by.insert("model".into(), 2);
        for i in 0..20 {
            s.observations.open.insert(
                format!("src/w{i}.js"),
                Watch {
                    category: Category::Observe,
                    prediction: (i % 2 == 0).then(|| Prediction {
                        stable: true,
                        risk: "low".into(),
                        problem_probability: 0.05 * i as f64,
                    }),
                    first_ts: at(1),
                    last_ts: at(2),
                    reevaluate_at: at(3),
                    rollback_baseline: i,
                    observations: 1,
                },
            );
        }
        s.observations.resolved.push_back(Resolution {
            path: "src/old.js".into(),
            reason: "window-elapsed".into(),
            opened: at(1),
            resolved: at(5),
            ..Resolution::default()
        });
        s.observations.totals.resolved_wrong = 3;
        s.files.set_rules(NO_RULES);
        for i in 0..1500 {
            s.files.insert(
                format!("src/f{i}.js"),
                FileRecord {
                    blob: format!("b{i}"),
                    last_ts: at(1),
                    ..FileRecord::default()
                },
            );
        }
        store::save(&path, &s).unwrap();
        std::fs::read(&path).unwrap()
    }

    /// The document read whole, as `store::load_lazy` reads one that is
    /// not laid out as written.
    fn whole(bytes: &[u8]) -> Option<(State, String, Vec<Option<Saved>>)> {
        let state: State = serde_json::from_slice(bytes).ok()?;
        let tail: shards::Tail = serde_json::from_slice(bytes).ok()?;
        let layout = serde_json::to_string(&tail.layout?).unwrap();
        Some((state, layout, tail.shards))
    }

    fn one_pass(bytes: &[u8]) -> Option<(State, String, Vec<Option<Saved>>)> {
        let p = read(bytes)?;
        let layout = serde_json::to_string(&p.layout).unwrap();
        Some((p.state, layout, p.shards))
    }

    /// The header line made to count the body `text` now has.
    fn recount(text: &str) -> String {
        let (head, body) = text.split_once('\n').unwrap();
        let at = head.rfind("\"body_bytes\":").unwrap() + "\"body_bytes\":".len();
        let end = at + head[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
        format!("{}{}{}\n{body}", &head[..at], body.len(), &head[end..])
    }

    #[test]
    fn a_manifest_read_in_one_pass_is_the_manifest_read_whole() {
        let bytes = manifest();
        let fast = one_pass(&bytes).expect("the layout as written");
        let slow = whole(&bytes).unwrap();
        assert_eq!(fast.0, slow.0);
        assert_eq!(fast.1, slow.1);
        assert_eq!(fast.2, slow.2);
        assert!(fast.2.len() >= 8, "{} shards", fast.2.len());
        assert_eq!(fast.0.observations.open.len(), 20);
        assert_eq!(fast.0.backlog.len(), 2);
    }

    /// Whatever the edit, the one-pass reader either declines or reads
    /// what the whole reader reads; what the whole reader refuses (a key
    /// twice, a truncated file) it never accepts.
    #[test]
    fn an_edited_manifest_is_read_whole_and_what_the_whole_reader_refuses_is_never_read_in_one_pass()
     {
        let text = String::from_utf8(manifest()).unwrap();
        let (head, body) = text.split_once('\n').unwrap();
        let refused = [
            // A body part named in the header too: a key twice.
            recount(&text.replacen("{\"schema\"", "{\"backlog\":[],\"schema\"", 1)),
            recount(&text.replacen("{\"schema\"", "{\"observations\":{},\"schema\"", 1)),
            // A body part twice in the body.
            recount(&text.replacen(",\n\"llm\":", ",\n\"backlog\":[],\n\"llm\":", 1)),
            // Truncated, with and without the count agreeing.
            text[..text.len() - 10].to_string(),
            recount(&text[..text.len() - 10]),
            // Not JSON at the end.
            recount(&text.replacen("\n]}\n", "\n]}x\n", 1)),
        ];
        for (i, bad) in refused.iter().enumerate() {
            assert!(whole(bad.as_bytes()).is_none(), "edit {i} is read whole");
            assert!(
                one_pass(bad.as_bytes()).is_none(),
                "edit {i} read in one pass"
            );
        }
        let declined = [
            // Reformatted: the same document, other line breaks.
            text.replace(",\n\"", ",\"")
                .replacen(",\"backlog\"", ",\n\"backlog\"", 1),
            recount(&text.replacen(",\n\"layout\":", ",\n\"layout\" :", 1)),
            recount(&text.replacen(",\n\"llm\":", ",\n\"x\":1,\n\"llm\":", 1)),
            recount(&text.replacen(",\n\"llm\":", ",\"x\":1,\n\"llm\":", 1)),
            format!("{head}\n {body}"),
            recount(&format!("{head}\n{body}\n")),
        ];
        for (i, edit) in declined.iter().enumerate() {
            assert!(
                one_pass(edit.as_bytes()).is_none(),
                "edit {i} read in one pass"
            );
            if let Some(read) = whole(edit.as_bytes()) {
                assert_eq!(read.0.observations.open.len(), 20, "edit {i}");
            }
        }
    }

    /// A wake wrote every shard line of the manifest again; now a save
    /// copies the line of each shard whose summary is the one read, and
    /// what it writes is what a save that copies nothing writes.
    #[test]
    fn a_save_copies_the_shard_lines_it_read_and_writes_what_a_save_from_scratch_writes() {
        let bytes = manifest();
        let parts = read(&bytes).expect("the layout as written");
        let lines = parts.lines.expect("every shard line read directly");
        assert_eq!(lines.len(), parts.shards.len());
        for (range, saved) in lines.iter().zip(&parts.shards) {
            let mut again = Vec::new();
            serde_json::to_writer(&mut again, saved).unwrap();
            assert_eq!(&bytes[range.clone()], &again[..]);
        }
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_eq!(manifest_in(a.path()), bytes);
        assert_eq!(manifest_in(b.path()), bytes);
        let (copied, fresh) = (a.path().join("state.json"), b.path().join("state.json"));
        let (mut state, kept) = store::load_kept(&copied).unwrap().unwrap();
        assert!(kept.is_some(), "nothing kept to copy");
        let mut other = store::load_lazy(&fresh).unwrap().unwrap();
        for s in [&mut state, &mut other] {
            s.files.set_rules(NO_RULES);
            s.files.insert(
                "src/new.js".into(),
                FileRecord {
                    blob: "new".into(),
                    last_ts: at(6),
                    ..FileRecord::default()
                },
            );
        }
        store::save_kept(&copied, &state, kept.as_ref()).unwrap();
        store::save(&fresh, &other).unwrap();
        assert_eq!(
            std::fs::read(&copied).unwrap(),
            std::fs::read(&fresh).unwrap()
        );
    }

    /// The line breaks are looked for eight bytes at a time: wherever the
    /// first one is, beside bytes one bit off a break, it is the one a
    /// search byte by byte finds.
    #[test]
    fn the_first_line_break_is_found_wherever_it_is() {
        let filler = [0x8a, 0x0b, 0x09, b'a', 0xff, 0x00, 0x0a ^ 0x80];
        for len in 0..40usize {
            for at in 0..=len {
                for second in [None, Some(at + 1), Some(len.saturating_sub(1))] {
                    let mut b: Vec<u8> = (0..len).map(|i| filler[i % filler.len()]).collect();
                    for i in [Some(at), second].into_iter().flatten() {
                        if i < len {
                            b[i] = b'\n';
                        }
                    }
                    let want = b.iter().position(|&x| x == b'\n');
                    assert_eq!(newline(&b), want, "{b:?}");
                }
            }
        }
    }
}
