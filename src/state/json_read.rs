//! The cursor under the direct JSON readers of the state (`decode`,
//! `log_json`): each reads only the exact text its writer writes, and gives
//! `None` anywhere else, so that serde reads that and decides.

/// A position in the bytes being read; the readers add their own methods.
pub(super) struct Cursor<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(b: &'a [u8]) -> Cursor<'a> {
        Cursor { b, at: 0 }
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
