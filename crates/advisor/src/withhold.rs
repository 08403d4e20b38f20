//! Secrets withheld for real: what `/proc/<pid>/environ` shows of sentinel
//! holds no key, and no other user may read sentinel's memory.
//!
//! An agent runs without sentinel's secrets in its environment, but the
//! kernel shows every process's initial environment block to anyone who may
//! read `/proc/<pid>/environ` (the same user, or root: the usual case in CI
//! containers). So at the very start of `main`, before any thread exists,
//! each secret is copied into the heap (`setenv`, which std's `env::var`,
//! clap's `env` bindings and the redaction layer read as before) and its
//! bytes in the original block are overwritten in place.

use std::ffi::{CStr, OsString, c_char};
use std::os::unix::ffi::OsStringExt;

// No crate offers this: std and rustix copy the environment out, and what
// must be written is the kernel's own block, which only `environ` points at.
unsafe extern "C" {
    /// The C library's environment array; at the start of `main` its
    /// strings are still the ones in the block the kernel set up.
    static mut environ: *mut *mut c_char;
}

/// Move the values of `names` out of the process's initial environment
/// block and make the process undumpable. Call first thing in `main`, while
/// the process has one thread: nothing may read the environment meanwhile.
pub fn secrets(names: &[&str]) {
    let mut moved: Vec<(String, OsString)> = Vec::new();
    // SAFETY: single-threaded at the start of main; `environ` is a
    // NULL-terminated array of NUL-terminated strings owned by the process.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let s = *entry;
            let bytes = CStr::from_ptr(s).to_bytes();
            let len = bytes.len();
            if let Some(name) = names.iter().find(|n| is_entry_of(bytes, n)) {
                let value = bytes[name.len() + 1..].to_vec();
                // The same name twice: the first is what getenv returns.
                if !moved.iter().any(|(n, _)| n == name) {
                    moved.push((name.to_string(), OsString::from_vec(value)));
                }
                // Wipe the value where the kernel shows it (after the `=`).
                let start = s.add(name.len() + 1);
                std::ptr::write_bytes(start, 0, len - name.len() - 1);
            }
            entry = entry.add(1);
        }
        for (name, value) in &moved {
            // setenv copies it to the heap; the block keeps only `NAME=`.
            std::env::set_var(name, value);
        }
    }
    undumpable();
}

fn is_entry_of(entry: &[u8], name: &str) -> bool {
    entry.len() > name.len() && entry.starts_with(name.as_bytes()) && entry[name.len()] == b'='
}

/// `PR_SET_DUMPABLE` 0: `/proc/<pid>/mem`, `environ` and the other private
/// files of sentinel become root's, so another user cannot read them, and a
/// crash leaves no core with the keys in it. Root can still read them: see
/// docs/threat-model.md.
fn undumpable() {
    use rustix::process::{DumpableBehavior, set_dumpable_behavior};
    let _ = set_dumpable_behavior(DumpableBehavior::NotDumpable);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_matched_by_its_whole_name() {
        assert!(is_entry_of(b"GITLAB_TOKEN=x", "GITLAB_TOKEN"));
        assert!(!is_entry_of(b"SENTINEL_GITLAB_TOKEN=x", "GITLAB_TOKEN"));
        assert!(!is_entry_of(b"GITLAB_TOKENS=x", "GITLAB_TOKEN"));
        assert!(!is_entry_of(b"GITLAB_TOKEN", "GITLAB_TOKEN"));
    }
}
