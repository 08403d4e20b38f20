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

use super::encode::{put_str, put_u64};
use super::records::observation::{ObservationLog, Prediction, Resolution, Totals, Watch};
use super::rfc3339;

/// The log as `serde_json::to_writer` writes it, appended to `out`.
pub fn put_log(out: &mut Vec<u8>, log: &ObservationLog) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"open\":{");
    for (i, (path, w)) in log.open.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_str(out, path);
        out.push(b':');
        put_watch(out, w)?;
    }
    out.extend_from_slice(b"},\"resolved\":[");
    for (i, r) in log.resolved.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_resolution(out, r);
    }
    out.extend_from_slice(b"],\"totals\":");
    put_totals(out, &log.totals);
    out.push(b'}');
    Ok(())
}

fn put_bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

fn put_time(out: &mut Vec<u8>, t: &chrono::DateTime<chrono::Utc>) {
    // The text never needs an escape.
    out.push(b'"');
    out.extend_from_slice(rfc3339::text(t).as_bytes());
    out.push(b'"');
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

fn put_watch(out: &mut Vec<u8>, w: &Watch) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"category\":\"");
    out.extend_from_slice(w.category.as_str().as_bytes());
    out.push(b'"');
    key(out, "prediction");
    match &w.prediction {
        Some(p) => put_prediction(out, p)?,
        None => out.extend_from_slice(b"null"),
    }
    key(out, "first_ts");
    put_time(out, &w.first_ts);
    key(out, "last_ts");
    put_time(out, &w.last_ts);
    key(out, "reevaluate_at");
    put_time(out, &w.reevaluate_at);
    key(out, "rollback_baseline");
    put_u64(out, u64::from(w.rollback_baseline));
    key(out, "observations");
    put_u64(out, w.observations);
    out.push(b'}');
    Ok(())
}

fn put_resolution(out: &mut Vec<u8>, r: &Resolution) {
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
    put_time(out, &r.opened);
    key(out, "resolved");
    put_time(out, &r.resolved);
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
