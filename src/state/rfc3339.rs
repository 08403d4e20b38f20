//! RFC 3339 times of the observation log (`first_ts`, `last_ts`, ...), in
//! exactly the text chrono's own serde writes and reading what it reads,
//! without its general formatter and parser for the one shape sentinel
//! writes (`2026-07-01T00:00:00Z`): a manifest holds up to 500 open
//! watches, three times each, written and read on every wake.

use chrono::{DateTime, Datelike, NaiveDate, SecondsFormat, Timelike, Utc};
use serde::{Deserializer, Serializer};

/// The text chrono's `Serialize` gives `t`.
pub fn text(t: &DateTime<Utc>) -> String {
    let (year, nanos) = (t.year(), t.nanosecond());
    if !(0..=9999).contains(&year) || nanos != 0 {
        // Fractions, leap seconds and years of other widths: chrono's own.
        return t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    }
    let mut out = *b"0000-00-00T00:00:00Z";
    let put = |out: &mut [u8; 20], at: usize, width: usize, mut n: u32| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    };
    put(&mut out, 0, 4, year as u32);
    put(&mut out, 5, 2, t.month());
    put(&mut out, 8, 2, t.day());
    put(&mut out, 11, 2, t.hour());
    put(&mut out, 14, 2, t.minute());
    put(&mut out, 17, 2, t.second());
    out.iter().map(|&b| b as char).collect()
}

/// `YYYY-MM-DDTHH:MM:SSZ` read directly; anything else as chrono reads it.
pub fn parse(s: &str) -> Result<DateTime<Utc>, String> {
    if let Some(t) = parse_plain(s.as_bytes()) {
        return Ok(t);
    }
    s.parse::<DateTime<chrono::FixedOffset>>()
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{s}` is not an RFC 3339 time: {e}"))
}

pub(super) fn parse_plain(b: &[u8]) -> Option<DateTime<Utc>> {
    let shape = b.len() == 20
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !shape {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        b[from..to].iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let date = NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 7)?, num(8, 10)?)?;
    // Second 60 (a leap second) is left to chrono.
    let time = date.and_hms_opt(num(11, 13)?, num(14, 16)?, num(17, 19)?)?;
    Some(time.and_utc())
}

pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&text(t))
}

/// Takes the text as the deserializer lends it: no copy per time.
struct TextVisitor;

impl serde::de::Visitor<'_> for TextVisitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an RFC 3339 time")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        parse(v).map_err(E::custom)
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    d.deserialize_str(TextVisitor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_text_is_chronos_own_for_every_kind_of_time() {
        let times = [
            Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(1, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 3, 4, 5, 6, 7).unwrap(),
            Utc.timestamp_opt(1_782_864_000, 5_000_000).unwrap(),
            Utc.timestamp_opt(1_782_864_000, 123_456_789).unwrap(),
            Utc.timestamp_opt(1_782_863_999, 1_500_000_000).unwrap(),
        ];
        for (i, t) in times.iter().enumerate() {
            let chrono_text = serde_json::to_string(t).unwrap();
            assert_eq!(format!("\"{}\"", text(t)), chrono_text, "time {i}");
            let back: DateTime<Utc> = serde_json::from_str(&chrono_text).unwrap();
            assert_eq!(parse(&text(t)), Ok(back), "time {i}");
        }
        for secs in (0..4_000_000_000i64).step_by(7_777_777) {
            let t = Utc.timestamp_opt(secs, 0).unwrap();
            assert_eq!(
                format!("\"{}\"", text(&t)),
                serde_json::to_string(&t).unwrap()
            );
            assert_eq!(parse(&text(&t)), Ok(t));
        }
    }

    #[test]
    fn what_chrono_reads_is_read_and_what_it_refuses_is_refused() {
        for s in [
            "2026-07-01T00:00:00Z",
            "2026-07-01T02:00:00+02:00",
            "2026-07-01t00:00:00z",
            "2026-07-01 00:00:00Z",
            "2026-07-01T00:00:00.5Z",
            "2016-12-31T23:59:60Z",
        ] {
            let chrono: Result<DateTime<Utc>, _> = serde_json::from_str(&format!("\"{s}\""));
            assert_eq!(parse(s).ok(), chrono.ok(), "{s}");
        }
        for s in [
            "2026-02-30T00:00:00Z",
            "2026-07-01T24:00:00Z",
            "2026-07-01T00:00:0xZ",
            "",
            "x",
        ] {
            assert!(parse(s).is_err(), "{s}");
            assert!(
                serde_json::from_str::<DateTime<Utc>>(&format!("\"{s}\"")).is_err(),
                "{s}"
            );
        }
    }
}
