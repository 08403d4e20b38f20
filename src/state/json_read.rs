//! The cursor under the direct reader of the state's shards (`decode`): it
//! reads only the exact text its writer writes, and gives `None` anywhere
//! else, so that serde reads that and decides.

use chrono::{DateTime, Utc};

/// A position in the bytes being read; the readers add their own methods.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
    /// `b` as text, when all of it is UTF-8: checked once, in bulk, rather
    /// than string by string (7,000 strings in a 1-file wake's shard and
    /// manifest, where the check of each cost more than finding its end).
    text: Option<&'a str>,
    /// The texts last read as times, and what each was read as: the 1,500
    /// times of a log's 500 watches are a handful of instants, and reading
    /// one is most of the cost of a watch.
    times: [Option<(&'a str, DateTime<Utc>)>; MEMO],
    next_time: usize,
    /// The milliseconds last read as a timestamp, and their time: a
    /// shard's 250 records share a few instants, and the calendar sums of
    /// each cost more than the rest of its reading.
    pub(super) last_ms: Option<(i64, DateTime<Utc>)>,
}

/// Times remembered by a cursor.
const MEMO: usize = 4;

impl<'a> Cursor<'a> {
    pub(super) fn new(b: &'a [u8]) -> Cursor<'a> {
        Cursor {
            b,
            at: 0,
            text: std::str::from_utf8(b).ok(),
            times: [None; MEMO],
            next_time: 0,
            last_ms: None,
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
        let len = plain_len(rest);
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        // A string starts after a quote and ends before one, both ASCII:
        // within valid text its bytes are always a whole slice of it.
        let s = match self.text {
            Some(text) => text.get(self.at..self.at + len)?,
            None => std::str::from_utf8(&rest[..len]).ok()?,
        };
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

/// How many bytes at the start of `b` are none of `"`, `\\` and the control
/// bytes below 0x20, looked at eight at a time: the strings of a shard and
/// of the manifest are a quarter of their bytes, and a byte at a time the
/// search cost more than the rest of their reading.
fn plain_len(b: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether a byte of `v` is below `n` (for `n` up to 0x80: a byte at or
    // above it never borrows, and one below always sets its high bit).
    let below = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGH != 0;
    let mut at = 0;
    for chunk in b.chunks_exact(8) {
        let v = u64::from_ne_bytes(chunk.try_into().expect("eight bytes"));
        let quote = below(v ^ (ONES * u64::from(b'"')), 1);
        let backslash = below(v ^ (ONES * u64::from(b'\\')), 1);
        if quote || backslash || below(v, 0x20) {
            break;
        }
        at += 8;
    }
    let stop = |c: &u8| *c == b'"' || *c == b'\\' || *c < 0x20;
    at + b[at..].iter().position(stop).unwrap_or(b.len() - at)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Looked for eight bytes at a time, the end of a plain string is
    /// where a search byte by byte finds it, beside bytes one bit off the
    /// bytes that end one and beside the bytes of UTF-8 above 0x7f.
    /// Text checked whole or string by string, a string reads the same:
    /// multi-byte letters kept, bytes that are no UTF-8 refused, and bytes
    /// that are none elsewhere in the input no matter to a valid string.
    #[test]
    fn a_string_reads_the_same_from_text_checked_whole_or_string_by_string() {
        let read = |b: &[u8]| Cursor::new(b).str().map(str::to_string);
        assert_eq!(read("\"é✓\"".as_bytes()).as_deref(), Some("é✓"));
        assert_eq!(read(b"\"ab\"\xff"), Some("ab".to_string()));
        assert_eq!(read(b"\"a\xffb\""), None);
        assert_eq!(read(b"\"a\xc3\"\xa9"), None);
        let mut c = Cursor::new("\"é\",\"ü\"".as_bytes());
        assert_eq!(c.str(), Some("é"));
        assert!(c.lit(b",").is_some());
        assert_eq!(c.str(), Some("ü"));
    }

    #[test]
    fn a_plain_string_ends_where_a_search_byte_by_byte_finds_its_end() {
        let filler = [b'a', 0x20, 0x23, 0x5d, 0xa2, 0xdc, 0xe2, 0x7f, 0xff, 0x21];
        for len in 0..40usize {
            for stop in [b'"', b'\\', 0x00, 0x1f, 0x0a] {
                for at in 0..=len {
                    let mut b: Vec<u8> = (0..len).map(|i| filler[(i * 7) % filler.len()]).collect();
                    if at < len {
                        b[at] = stop;
                    }
                    let want = b
                        .iter()
                        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
                        .unwrap_or(len);
                    assert_eq!(plain_len(&b), want, "{b:?}");
                }
            }
        }
    }
}
