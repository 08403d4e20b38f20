//! Timestamps of the per-file records as integer milliseconds since the Unix
//! epoch: a wake reads and writes them for every record it touches, and
//! formatting and parsing RFC 3339 cost about a quarter of a large wake's
//! CPU. Loading still accepts the RFC 3339 strings of older states.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};

/// Milliseconds since the epoch: `jq '.last_ts / 1000 | todate'` reads it.
fn millis(t: &DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_millis<E: de::Error>(ms: i64) -> Result<DateTime<Utc>, E> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| E::custom(format!("timestamp {ms} ms is out of range")))
}

struct TsVisitor;

impl<'de> Visitor<'de> for TsVisitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("milliseconds since the epoch or an RFC 3339 time")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        from_millis(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        let v = i64::try_from(v).map_err(|_| E::custom("timestamp out of range"))?;
        from_millis(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        DateTime::parse_from_rfc3339(v)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| E::custom(format!("`{v}` is not an RFC 3339 time: {e}")))
    }
}

pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_i64(millis(t))
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    d.deserialize_any(TsVisitor)
}

/// `Option<DateTime<Utc>>` the same way (`null` stays `null`).
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_some(&millis(t)),
            None => s.serialize_none(),
        }
    }

    struct OptVisitor;

    impl<'de> Visitor<'de> for OptVisitor {
        type Value = Option<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("null, milliseconds since the epoch or an RFC 3339 time")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(TsVisitor).map(Some)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        d.deserialize_option(OptVisitor)
    }
}

/// `Vec<DateTime<Utc>>` the same way.
pub mod vec {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[DateTime<Utc>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(v.len()))?;
        for t in v {
            seq.serialize_element(&millis(t))?;
        }
        seq.end()
    }

    struct VecVisitor;

    /// One element, read with the same visitor as a single timestamp.
    struct Elem(DateTime<Utc>);

    impl<'de> serde::Deserialize<'de> for Elem {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Elem, D::Error> {
            d.deserialize_any(TsVisitor).map(Elem)
        }
    }

    impl<'de> Visitor<'de> for VecVisitor {
        type Value = Vec<DateTime<Utc>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of timestamps")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(Elem(t)) = seq.next_element()? {
                out.push(t);
            }
            Ok(out)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<DateTime<Utc>>, D::Error> {
        d.deserialize_seq(VecVisitor)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct R {
        #[serde(with = "super")]
        at: DateTime<Utc>,
        #[serde(default, with = "super::option")]
        maybe: Option<DateTime<Utc>>,
        #[serde(default, with = "super::vec")]
        many: Vec<DateTime<Utc>>,
    }

    #[test]
    fn a_record_timestamp_is_written_as_integer_millis() {
        let at: DateTime<Utc> = "2026-06-16T10:00:00.250Z".parse().unwrap();
        let r = R {
            at,
            maybe: Some(at),
            many: vec![at],
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(
            text,
            r#"{"at":1781604000250,"maybe":1781604000250,"many":[1781604000250]}"#
        );
        assert_eq!(serde_json::from_str::<R>(&text).unwrap(), r);
    }

    #[test]
    fn an_old_rfc3339_timestamp_still_loads() {
        let r: R = serde_json::from_str(
            r#"{"at":"2026-06-16T10:00:00Z","maybe":"2026-06-16T10:00:00+02:00","many":["2026-06-16T10:00:00Z"]}"#,
        )
        .unwrap();
        let at: DateTime<Utc> = "2026-06-16T10:00:00Z".parse().unwrap();
        assert_eq!(r.at, at);
        assert_eq!(r.maybe, Some(at - chrono::Duration::hours(2)));
        assert_eq!(r.many, vec![at]);
        let none: R = serde_json::from_str(r#"{"at":0,"maybe":null}"#).unwrap();
        assert_eq!(none.maybe, None);
        assert!(serde_json::from_str::<R>(r#"{"at":"yesterday"}"#).is_err());
    }
}
