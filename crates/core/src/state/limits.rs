//! How large each file sentinel keeps beside its state may be when it reads
//! it back: far above what sentinel writes, far below what would exhaust
//! memory. A file over its bound is damaged or not sentinel's, and reading
//! it is refused before anything is allocated from it.

/// The state document: a manifest of the sharded layout, or a whole
/// document of schema 1 (every record in it) that its next save migrates.
pub const MAX_STATE_BYTES: u64 = 512 << 20;

/// `<state>.noops`: one line of about 40 bytes per no-op between two wakes;
/// a tick a minute for a year is 21 MiB.
pub const MAX_NOOPS_BYTES: u64 = 64 << 20;

/// `<state>.start`: one RFC 3339 time.
pub const MAX_START_BYTES: u64 = 4096;

/// `<state>.decisions`: the answers paid for since the last save, each
/// bounded (findings, reasons, a proposed content under `--max-file-bytes`).
pub const MAX_DECISIONS_BYTES: u64 = 512 << 20;

/// The least a record takes in a shard (`"x":{"blob":"","last_ts":"…"}`):
/// a shard of `n` bytes holds fewer than `n / MIN_RECORD_BYTES` records, so
/// a count read from the manifest is checked against the shards on disk.
pub const MIN_RECORD_BYTES: u64 = 32;

/// The most a record takes in a shard (its findings and reasons live in the
/// manifest).
pub const MAX_RECORD_BYTES: u64 = 256 << 10;

/// A shard's import index: every remembered file may import one path of
/// the bucket (200,000 names of 300 bytes).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// A shard holding `records` records (its summary's count) may be this large.
pub fn max_shard_bytes(records: usize) -> u64 {
    (records as u64)
        .saturating_mul(MAX_RECORD_BYTES)
        .saturating_add(MAX_INDEX_BYTES)
        .min(1 << 30)
}
