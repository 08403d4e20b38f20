//! The observation log's JSON in the manifest, written directly, byte for
//! byte what `serde_json::to_writer` writes for it: up to 500 open watches,
//! three RFC 3339 times each, are written on every wake, and serde's
//! generic path escapes every field name and scans every string byte by
//! byte on the way.
//!
//! The writer knows the field order of the derived `Serialize` of
//! `ObservationLog`, `Watch`, `Prediction`, `Resolution` and `Totals`; the
//! tests compare it with serde on logs with every field set, the
//! structs built without `..Default::default()` so that a field added to
//! one of them fails to build them until the writer knows it.
//!
//! The reader (`read_log`) takes only that text back: every field in that
//! order, no white space, no escape in a string. Anything else gives
//! `None` and is read by serde (`parse_log`), which alone decides what is
//! refused; what the reader returns for a text is what serde returns.
//!
//! A wake changes one or two of the 500 watches, and the others are mostly
//! copies of a few (a tick opens its watches with the same times and bet):
//! both sides remember the last few watches and their text, and copy a
//! watch, or its text, instead of reading or writing it again.

use std::ops::Range;

use chrono::{DateTime, Datelike, Timelike, Utc};

use super::encode::{put_str, put_u64};
use super::json_read::Cursor;
use super::records::observation::{
    Category, ObservationLog, Prediction, Resolution, Totals, Watch,
};
use super::rfc3339;

/// The log as `serde_json::to_writer` writes it, appended to `out`.
pub fn put_log(out: &mut Vec<u8>, log: &ObservationLog) -> serde_json::Result<()> {
    let mut times = Times::default();
    let mut written = Written::default();
    out.extend_from_slice(b"{\"open\":{");
    for (i, (path, w)) in log.open.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, path);
        out.push(b':');
        match written.text_of(w) {
            Some(text) => out.extend_from_within(text),
            None => {
                let at = out.len();
                put_watch(out, w, &mut times)?;
                written.keep(w, at..out.len());
            }
        }
    }
    out.extend_from_slice(b"},\"resolved\":[");
    for (i, r) in log.resolved.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_resolution(out, r, &mut times);
    }
    out.extend_from_slice(b"],\"totals\":");
    put_totals(out, &log.totals);
    out.push(b'}');
    Ok(())
}

/// The watches last written and where their text is in the output: the
/// open watches of a log are mostly copies of a few (those a tick opened
/// share their times and bet), and a watch costs a dozen writes where a
/// comparison and a copy do.
type Written<'a> = Memo<(&'a Watch, Range<usize>)>;

/// The last few of something, the oldest replaced first.
struct Memo<T> {
    last: [Option<T>; WATCH_MEMO],
    next: usize,
}

impl<T> Default for Memo<T> {
    fn default() -> Self {
        Memo {
            last: [const { None }; WATCH_MEMO],
            next: 0,
        }
    }
}

/// Watches remembered by the writer and by the reader.
const WATCH_MEMO: usize = 4;

impl<'a> Written<'a> {
    /// Where the text of a watch written as `w` would be is already.
    fn text_of(&self, w: &Watch) -> Option<Range<usize>> {
        let (_, text) = self.last.iter().flatten().find(|(v, _)| same_text(v, w))?;
        Some(text.clone())
    }

    fn keep(&mut self, w: &'a Watch, text: Range<usize>) {
        self.last[self.next] = Some((w, text));
        self.next = (self.next + 1) % WATCH_MEMO;
    }
}

/// Whether `put_watch` writes the same text for `a` and `b`: their fields
/// equal, the float by its bits (`0.0 == -0.0`, written apart; a NaN is
/// never equal to itself, written the same). Every field is named, so that
/// one added to `Watch` fails to build this until it is compared.
fn same_text(a: &Watch, b: &Watch) -> bool {
    let Watch {
        category,
        prediction,
        first_ts,
        last_ts,
        reevaluate_at,
        rollback_baseline,
        observations,
    } = a;
    let same_bet = match (prediction, &b.prediction) {
        (None, None) => true,
        (Some(p), Some(q)) => {
            let Prediction {
                stable,
                risk,
                problem_probability,
            } = p;
            *stable == q.stable
                && problem_probability.to_bits() == q.problem_probability.to_bits()
                && *risk == q.risk
        }
        _ => false,
    };
    *category == b.category
        && *first_ts == b.first_ts
        && *last_ts == b.last_ts
        && *reevaluate_at == b.reevaluate_at
        && *rollback_baseline == b.rollback_baseline
        && *observations == b.observations
        && same_bet
}

fn put_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// The texts of the times last written: the 1,500 times of a log's 500
/// watches are a handful of instants, and their calendar fields cost more
/// than the rest of a watch.
#[derive(Default)]
struct Times {
    last: [Option<(DateTime<Utc>, [u8; 20])>; 4],
    next: usize,
}

fn put_time(out: &mut Vec<u8>, t: &DateTime<Utc>, times: &mut Times) {
    // The text never needs an escape. The one shape sentinel writes is put
    // in place: `rfc3339::text` builds a string per time.
    out.push(b'"');
    match times.last.iter().flatten().find(|(at, _)| at == t) {
        Some((_, text)) => out.extend_from_slice(text),
        None => match plain_text(t) {
            Some(text) => {
                out.extend_from_slice(&text);
                times.last[times.next] = Some((*t, text));
                times.next = (times.next + 1) % times.last.len();
            }
            None => out.extend_from_slice(rfc3339::text(t).as_bytes()),
        },
    }
    out.push(b'"');
}

/// `t` as `rfc3339::text` writes it, when that is `YYYY-MM-DDTHH:MM:SSZ`.
fn plain_text(t: &DateTime<Utc>) -> Option<[u8; 20]> {
    let fields = plain_digits(t)?;
    let mut text = *b"0000-00-00T00:00:00Z";
    for (&(at, width), n) in PLAIN_FIELDS.iter().zip(fields) {
        let mut n = n;
        for i in (at..at + width).rev() {
            text[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }
    Some(text)
}

/// Where each field of `YYYY-MM-DDTHH:MM:SSZ` is, and its width.
const PLAIN_FIELDS: [(usize, usize); 6] = [(0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2)];

/// The fields of `t` when `rfc3339::text` writes it as `YYYY-MM-DDTHH:MM:SSZ`
/// (a year of four digits, no fraction, no leap second).
fn plain_digits(t: &DateTime<Utc>) -> Option<[u32; 6]> {
    let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
    (t.nanosecond() == 0).then(|| [year, t.month(), t.day(), t.hour(), t.minute(), t.second()])
}

/// `,"key":`.
fn key(out: &mut Vec<u8>, k: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

fn put_prediction(out: &mut Vec<u8>, p: &Prediction) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"stable\":");
    put_bool(out, p.stable);
    key(out, "risk");
    put_str(out, &p.risk);
    key(out, "problem_probability");
    // serde's own float text (and its `null` for what is not finite).
    serde_json::to_writer(&mut *out, &p.problem_probability)?;
    out.push(b'}');
    Ok(())
}

fn put_watch(out: &mut Vec<u8>, w: &Watch, times: &mut Times) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"category\":\"");
    out.extend_from_slice(w.category.as_str().as_bytes());
    out.push(b'"');
    key(out, "prediction");
    match &w.prediction {
        Some(p) => put_prediction(out, p)?,
        None => out.extend_from_slice(b"null"),
    }
    key(out, "first_ts");
    put_time(out, &w.first_ts, times);
    key(out, "last_ts");
    put_time(out, &w.last_ts, times);
    key(out, "reevaluate_at");
    put_time(out, &w.reevaluate_at, times);
    key(out, "rollback_baseline");
    put_u64(out, u64::from(w.rollback_baseline));
    key(out, "observations");
    put_u64(out, w.observations);
    out.push(b'}');
    Ok(())
}

fn put_resolution(out: &mut Vec<u8>, r: &Resolution, times: &mut Times) {
    out.extend_from_slice(b"{\"path\":");
    put_str(out, &r.path);
    key(out, "correct");
    put_bool(out, r.correct);
    key(out, "reason");
    put_str(out, &r.reason);
    key(out, "predicted_stable");
    put_bool(out, r.predicted_stable);
    key(out, "observed_stable");
    put_bool(out, r.observed_stable);
    key(out, "opened");
    put_time(out, &r.opened, times);
    key(out, "resolved");
    put_time(out, &r.resolved, times);
    key(out, "observations");
    put_u64(out, r.observations);
    out.push(b'}');
}

fn put_totals(out: &mut Vec<u8>, t: &Totals) {
    out.extend_from_slice(b"{\"by_category\":{");
    for (i, (k, n)) in t.by_category.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, k);
        out.push(b':');
        put_u64(out, *n);
    }
    out.extend_from_slice(b"}");
    key(out, "resolved_correct");
    put_u64(out, t.resolved_correct);
    key(out, "resolved_wrong");
    put_u64(out, t.resolved_wrong);
    out.push(b'}');
}

/// The log in `bytes`, as serde reads it: directly when it is the text
/// `put_log` writes, through serde otherwise.
pub fn parse_log(bytes: &[u8]) -> serde_json::Result<ObservationLog> {
    match read_log(bytes) {
        Some(log) => Ok(log),
        None => serde_json::from_slice(bytes),
    }
}

/// The log, when `bytes` are exactly the text `put_log` writes for one.
pub fn read_log(bytes: &[u8]) -> Option<ObservationLog> {
    let (log, len) = read_log_prefix(bytes)?;
    (len == bytes.len()).then_some(log)
}

/// The least bytes a watch's text and its path's take (an empty path, no
/// bet, numbers of one digit), to reserve room for the watches up front.
const LEAST_WATCH: usize = 160;

/// The log whose text, exactly as `put_log` writes it, starts `bytes`,
/// and that text's length. The reader looks at no byte past it, so the
/// log's line of a manifest is read without looking for its end first.
pub fn read_log_prefix(bytes: &[u8]) -> Option<(ObservationLog, usize)> {
    let mut c = Cursor::new(bytes);
    let mut log = ObservationLog::default();
    c.lit(b"{\"open\":{")?;
    if !c.eat(b'}') {
        // In the writer's order, keys strictly ascending (two equal keys
        // are left to serde), to be built in bulk rather than one by one.
        let mut open: Vec<(String, Watch)> = Vec::with_capacity(bytes.len() / LEAST_WATCH);
        let mut read = Read::default();
        loop {
            let path = c.str()?;
            if open.last().is_some_and(|(last, _)| last.as_str() >= path) {
                return None;
            }
            c.lit(b":")?;
            open.push((path.to_string(), c.watch_memo(&mut read)?));
            if c.eat(b'}') {
                break;
            }
            c.lit(b",")?;
        }
        log.open = open.into_iter().collect();
    }
    c.lit(b",\"resolved\":[")?;
    if !c.eat(b']') {
        loop {
            log.resolved.push_back(c.resolution()?);
            if c.eat(b']') {
                break;
            }
            c.lit(b",")?;
        }
    }
    c.lit(b",\"totals\":{\"by_category\":{")?;
    if !c.eat(b'}') {
        loop {
            let k = c.str()?.to_string();
            c.lit(b":")?;
            log.totals.by_category.insert(k, c.u64()?);
            if c.eat(b'}') {
                break;
            }
            c.lit(b",")?;
        }
    }
    c.lit(b",\"resolved_correct\":")?;
    log.totals.resolved_correct = c.u64()?;
    c.lit(b",\"resolved_wrong\":")?;
    log.totals.resolved_wrong = c.u64()?;
    c.lit(b"}}")?;
    Some((log, c.at))
}

/// The texts of the watches last read, and what each was read as.
type Read<'a> = Memo<(&'a [u8], Watch)>;

impl<'a> Cursor<'a> {
    /// `watch`, or a copy of a watch among the last few read when the
    /// bytes at the cursor start with its text: the reader decides on the
    /// bytes it has read alone (a number ends at the `}` or `,` that is
    /// part of the text), so the same bytes read the same watch, and they
    /// are compared, not read again.
    fn watch_memo(&mut self, read: &mut Read<'a>) -> Option<Watch> {
        let b: &'a [u8] = self.b;
        let rest = b.get(self.at..)?;
        if let Some((text, w)) = read
            .last
            .iter()
            .flatten()
            .find(|(t, _)| rest.starts_with(t))
        {
            self.at += text.len();
            return Some(w.clone());
        }
        let start = self.at;
        let w = self.watch()?;
        read.last[read.next] = Some((&b[start..self.at], w.clone()));
        read.next = (read.next + 1) % WATCH_MEMO;
        Some(w)
    }

    fn bool(&mut self) -> Option<bool> {
        if self.lit(b"true").is_some() {
            return Some(true);
        }
        self.lit(b"false").map(|_| false)
    }

    fn time(&mut self) -> Option<DateTime<Utc>> {
        let text = self.str()?;
        self.time_of(text, |s| rfc3339::parse(s).ok())
    }

    /// A number, read by serde itself: its float parsing is its own.
    fn f64(&mut self) -> Option<f64> {
        let rest = self.b.get(self.at..)?;
        let len = rest
            .iter()
            .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .count();
        let text = &rest[..len];
        let n = match self.last_float {
            Some((last, n)) if last == text => n,
            _ => serde_json::from_slice(text).ok()?,
        };
        self.last_float = Some((text, n));
        self.at += len;
        Some(n)
    }

    fn category(&mut self) -> Option<Category> {
        match self.str()? {
            "NO_VALUE" => Some(Category::NoValue),
            "INSUFFICIENT_DATA" => Some(Category::InsufficientData),
            "OBSERVE" => Some(Category::Observe),
            _ => None,
        }
    }

    fn watch(&mut self) -> Option<Watch> {
        self.lit(b"{\"category\":")?;
        let category = self.category()?;
        self.lit(b",\"prediction\":")?;
        let prediction = if self.lit(b"null").is_some() {
            None
        } else {
            self.lit(b"{\"stable\":")?;
            let stable = self.bool()?;
            self.lit(b",\"risk\":")?;
            let risk = self.str()?.to_string();
            self.lit(b",\"problem_probability\":")?;
            let problem_probability = self.f64()?;
            self.lit(b"}")?;
            Some(Prediction {
                stable,
                risk,
                problem_probability,
            })
        };
        self.lit(b",\"first_ts\":")?;
        let first_ts = self.time()?;
        self.lit(b",\"last_ts\":")?;
        let last_ts = self.time()?;
        self.lit(b",\"reevaluate_at\":")?;
        let reevaluate_at = self.time()?;
        self.lit(b",\"rollback_baseline\":")?;
        let rollback_baseline = u32::try_from(self.u64()?).ok()?;
        self.lit(b",\"observations\":")?;
        let observations = self.u64()?;
        self.lit(b"}")?;
        Some(Watch {
            category,
            prediction,
            first_ts,
            last_ts,
            reevaluate_at,
            rollback_baseline,
            observations,
        })
    }

    fn resolution(&mut self) -> Option<Resolution> {
        self.lit(b"{\"path\":")?;
        let path = self.str()?.to_string();
        self.lit(b",\"correct\":")?;
        let correct = self.bool()?;
        self.lit(b",\"reason\":")?;
        let reason = self.str()?.to_string();
        self.lit(b",\"predicted_stable\":")?;
        let predicted_stable = self.bool()?;
        self.lit(b",\"observed_stable\":")?;
        let observed_stable = self.bool()?;
        self.lit(b",\"opened\":")?;
        let opened = self.time()?;
        self.lit(b",\"resolved\":")?;
        let resolved = self.time()?;
        self.lit(b",\"observations\":")?;
        let observations = self.u64()?;
        self.lit(b"}")?;
        Some(Resolution {
            path,
            correct,
            reason,
            predicted_stable,
            observed_stable,
            opened,
            resolved,
            observations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::records::observation::Category;
    use chrono::{DateTime, TimeZone, Utc};

    const STRINGS: [&str; 7] = [
        "plain",
        "",
        "quote \" and \\ backslash",
        "tab\tnew\nline\r\u{8}\u{c}\u{1}\u{1f}\u{7f}",
        "unicode é ✓ 𝄞 \u{2028}",
        "</script>",
        "src/d1/f10.txt",
    ];

    const FLOATS: [f64; 9] = [
        0.05,
        0.04999999999999999,
        0.0,
        -0.0,
        1.0,
        1e-7,
        1e300,
        f64::NAN,
        f64::INFINITY,
    ];

    fn times() -> Vec<DateTime<Utc>> {
        vec![
            Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            Utc.timestamp_opt(1_782_864_000, 5_000_000).unwrap(),
            Utc.timestamp_opt(1_782_863_999, 1_500_000_000).unwrap(),
        ]
    }

    /// A log of `n` watches and resolutions drawn from the strings,
    /// floats and times above, every field set (no `..Default`).
    fn log(n: usize) -> ObservationLog {
        let t = times();
        let categories = [
            Category::NoValue,
            Category::InsufficientData,
            Category::Observe,
        ];
        let mut log = ObservationLog::default();
        for i in 0..n {
            let s = STRINGS[i % STRINGS.len()];
            let prediction = (i % 4 != 3).then(|| Prediction {
                stable: i % 2 == 0,
                risk: STRINGS[(i + 1) % STRINGS.len()].into(),
                problem_probability: FLOATS[i % FLOATS.len()],
            });
            let watch = Watch {
                category: categories[i % 3],
                prediction,
                first_ts: t[i % t.len()],
                last_ts: t[(i + 1) % t.len()],
                reevaluate_at: t[(i + 2) % t.len()],
                rollback_baseline: if i % 5 == 0 { u32::MAX } else { i as u32 },
                observations: if i % 7 == 0 { u64::MAX } else { i as u64 },
            };
            log.open.insert(format!("{s}{i}"), watch);
            log.resolved.push_back(Resolution {
                path: format!("{s}/{i}"),
                correct: i % 3 == 0,
                reason: STRINGS[(i + 3) % STRINGS.len()].into(),
                predicted_stable: i % 2 == 1,
                observed_stable: i % 3 == 1,
                opened: t[(i + 3) % t.len()],
                resolved: t[(i + 4) % t.len()],
                observations: i as u64,
            });
            *log.totals.by_category.entry(s.into()).or_default() += i as u64;
        }
        log.totals = Totals {
            by_category: log.totals.by_category,
            resolved_correct: n as u64,
            resolved_wrong: u64::MAX,
        };
        log
    }

    fn direct(log: &ObservationLog) -> String {
        let mut out = Vec::new();
        put_log(&mut out, log).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Whatever the text, the direct reader declines it or reads what serde
    /// reads; the text the writer writes it reads, escapes aside.
    #[test]
    fn the_direct_observation_log_reader_reads_what_serde_reads_or_declines() {
        let plain = |log: &ObservationLog| {
            let mut log = log.clone();
            for w in log.open.values_mut() {
                // NaN and infinities are written as `null`, which no
                // reader takes back.
                w.prediction.iter_mut().for_each(|p| {
                    p.risk = "low".into();
                    if !p.problem_probability.is_finite() {
                        p.problem_probability = 0.5;
                    }
                });
            }
            for r in &mut log.resolved {
                r.reason = "window-elapsed".into();
                r.path = r
                    .path
                    .replace(|c: char| c.is_control() || c == '"' || c == '\\', "_");
            }
            log.open = log
                .open
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.replace(|c: char| c.is_control() || c == '"' || c == '\\', "_"),
                        v,
                    )
                })
                .collect();
            log.totals.by_category = log
                .totals
                .by_category
                .into_iter()
                .map(|(k, v)| {
                    (
                        k.replace(|c: char| c.is_control() || c == '"' || c == '\\', "_"),
                        v,
                    )
                })
                .collect();
            log
        };
        let mut texts = Vec::new();
        for n in [0, 1, 2, 3, 4, 7, 9, 45, 500] {
            let escaped = direct(&log(n));
            let plain = direct(&plain(&log(n)));
            let serde: ObservationLog = serde_json::from_str(&plain).unwrap();
            let read = read_log(plain.as_bytes()).expect("the text the writer writes");
            assert_eq!(
                serde_json::to_string(&read).unwrap(),
                serde_json::to_string(&serde).unwrap(),
                "{n}"
            );
            assert_eq!(read, serde, "{n}");
            texts.push(escaped);
            texts.push(plain);
        }
        let base = texts[9].clone();
        let edits = [
            base.replacen("\"open\":", "\"open\" :", 1),
            base.replacen("{\"category\"", "{ \"category\"", 1),
            base.replacen(
                ",\"last_ts\"",
                ",\"last_ts\":\"2026-07-01T00:00:00Z\",\"last_ts\"",
                1,
            ),
            base.replacen(",\"observations\":1}", "}", 1),
            base.replacen("\"rollback_baseline\":1,", "\"rollback_baseline\":01,", 1),
            base.replacen(
                "\"rollback_baseline\":1,",
                "\"rollback_baseline\":4294967296,",
                1,
            ),
            base.replacen("\"rollback_baseline\":1,", "\"rollback_baseline\":1.0,", 1),
            base.replacen("\"rollback_baseline\":1,", "\"rollback_baseline\":-1,", 1),
            base.replacen("\"OBSERVE\"", "\"observe\"", 1),
            base.replacen("2026-07-01T00:00:00Z", "2026-07-01T00:00:00+00:00", 1),
            base.replacen("2026-07-01T00:00:00Z", "2026-02-30T00:00:00Z", 1),
            base.replacen("\"stable\":true", "\"stable\":1", 1),
            base.replacen("\"resolved_wrong\":", "\"resolved_wrong\": ", 1),
            format!("{base} "),
            base[..base.len() - 1].to_string(),
            base.replacen("\"totals\":{", "\"totals\":{\"x\":1,", 1),
        ];
        for (i, e) in edits.iter().enumerate() {
            assert!(e != &base, "edit {i} applies");
        }
        for (i, text) in texts.iter().chain(&edits).enumerate() {
            let serde = serde_json::from_str::<ObservationLog>(text).ok();
            if let Some(read) = read_log(text.as_bytes()) {
                assert_eq!(Some(read), serde, "text {i} read otherwise");
            }
            assert_eq!(parse_log(text.as_bytes()).ok(), serde, "text {i}");
        }
    }

    /// Runs of equal watches and neighbours that differ in one field the
    /// memos could take for equal: a float's sign, a NaN, a number whose
    /// text starts another's, a bet's risk, no bet.
    fn repeating_log() -> ObservationLog {
        let t = times();
        let base = Watch {
            category: Category::Observe,
            prediction: Some(Prediction {
                stable: true,
                risk: "low".into(),
                problem_probability: 0.0,
            }),
            first_ts: t[0],
            last_ts: t[0],
            reevaluate_at: t[3],
            rollback_baseline: 1,
            observations: 1,
        };
        type Variant<'a> = Box<dyn Fn(&mut Watch) + 'a>;
        let variants: Vec<Variant> = vec![
            Box::new(|_| {}),
            Box::new(|w| w.prediction.as_mut().unwrap().problem_probability = -0.0),
            Box::new(|w| w.prediction.as_mut().unwrap().problem_probability = f64::NAN),
            Box::new(|w| w.prediction.as_mut().unwrap().problem_probability = 0.05),
            Box::new(|w| w.observations = 12),
            Box::new(|w| w.rollback_baseline = 10),
            Box::new(|w| w.prediction.as_mut().unwrap().risk = "lowest".into()),
            Box::new(|w| w.prediction.as_mut().unwrap().stable = false),
            Box::new(|w| w.prediction = None),
            Box::new(|w| w.category = Category::NoValue),
            Box::new(|w| w.last_ts = t[4]),
        ];
        let mut log = ObservationLog::default();
        for i in 0..600 {
            let mut w = base.clone();
            // Runs of one, two and three, in an order that goes round the
            // memos' four places.
            variants[(i / (1 + i % 3)) % variants.len()](&mut w);
            log.open.insert(format!("src/{i:04}"), w);
        }
        log
    }

    #[test]
    fn a_log_of_repeated_watches_is_written_and_read_as_serde_does() {
        let log = repeating_log();
        let text = direct(&log);
        assert_eq!(text, serde_json::to_string(&log).unwrap());
        // NaN is written `null`, which serde reads as no number at all.
        let finite = text.replace(":null}", ":0.5}");
        let serde: ObservationLog = serde_json::from_str(&finite).unwrap();
        let read = read_log(finite.as_bytes()).expect("the text the writer writes");
        assert_eq!(read, serde);
        assert_eq!(direct(&read), finite);
    }

    /// What the log's text is followed by is never read: the manifest's
    /// reader reads the log where its line goes on with the next part.
    #[test]
    fn the_log_read_from_the_start_of_a_longer_text_ends_where_its_text_does() {
        for log in [log(9), repeating_log(), ObservationLog::default()] {
            let text = direct(&log).replace(":null}", ":0.5}");
            let text = text.replace(|c: char| c.is_control() || c == '\\', "_");
            let Some(whole) = read_log(text.as_bytes()) else {
                continue;
            };
            for tail in ["", ",\n\"layout\":{}", "1", "}", ".5"] {
                let longer = format!("{text}{tail}");
                let (read, len) = read_log_prefix(longer.as_bytes()).expect("a prefix");
                assert_eq!((&read, len), (&whole, text.len()), "{tail:?}");
            }
        }
    }

    #[test]
    fn the_direct_observation_log_writer_writes_what_serde_writes() {
        for n in [0, 1, 2, 3, 4, 7, 9, 45, 500] {
            let log = log(n);
            assert_eq!(direct(&log), serde_json::to_string(&log).unwrap(), "{n}");
        }
        assert_eq!(
            direct(&ObservationLog::default()),
            serde_json::to_string(&ObservationLog::default()).unwrap()
        );
    }
}
