//! The cursor under the direct JSON readers of the state (`decode`,
//! `log_json`): each reads only the exact text its writer writes, and gives
//! `None` anywhere else, so that serde reads that and decides.

use chrono::{DateTime, Utc};

/// A position in the bytes being read; the readers add their own methods.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
    /// The texts last read as times, and what each was read as: the 1,500
    /// times of a log's 500 watches are a handful of instants, and reading
    /// one is most of the cost of a watch.
    times: [Option<(&'a str, DateTime<Utc>)>; MEMO],
    next_time: usize,
    /// The text last read as a float, and its value (serde's reading of a
    /// float is its own, and slow beside the rest of a watch).
    pub(super) last_float: Option<(&'a [u8], f64)>,
}

/// Times remembered by a cursor.
const MEMO: usize = 4;

impl<'a> Cursor<'a> {
    pub(super) fn new(b: &'a [u8]) -> Cursor<'a> {
        Cursor {
            b,
            at: 0,
            times: [None; MEMO],
            next_time: 0,
            last_float: None,
        }
    }

    /// `text` read as a time by `parse`, which is asked only for a text
    /// not among the last few it read (the same text reads the same).
    pub(super) fn time_of(
        &mut self,
        text: &'a str,
        parse: fn(&str) -> Option<DateTime<Utc>>,
    ) -> Option<DateTime<Utc>> {
        if let Some((_, t)) = self.times.iter().flatten().find(|(s, _)| *s == text) {
            return Some(*t);
        }
        let t = parse(text)?;
        self.times[self.next_time] = Some((text, t));
        self.next_time = (self.next_time + 1) % MEMO;
        Some(t)
    }

    /// `s`, exactly, at the position.
    pub(super) fn lit(&mut self, s: &[u8]) -> Option<()> {
        let rest = self.b.get(self.at..)?;
        rest.starts_with(s).then(|| self.at += s.len())
    }

    pub(super) fn eat(&mut self, c: u8) -> bool {
        self.lit(&[c]).is_some()
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    /// A string without escapes or control characters, valid UTF-8 (the
    /// writers leave those to serde, and so do the readers).
    pub(super) fn str(&mut self) -> Option<&'a str> {
        self.lit(b"\"")?;
        let rest = self.b.get(self.at..)?;
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        let s = std::str::from_utf8(&rest[..len]).ok()?;
        self.at += len + 1;
        Some(s)
    }

    /// Digits as serde reads a `u64`: no sign, no leading zero, no
    /// fraction or exponent, no overflow.
    pub(super) fn u64(&mut self) -> Option<u64> {
        let rest = self.b.get(self.at..)?;
        let len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let digits = &rest[..len];
        if len == 0 || (len > 1 && digits[0] == b'0') {
            return None;
        }
        if matches!(rest.get(len), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let n = digits.iter().try_fold(0u64, |n, d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })?;
        self.at += len;
        Some(n)
    }
}
