//! Hostile and unusual object stores: what sentinel judges is what git
//! reads, and a store built to mislead it or to exhaust it ends the tick
//! cleanly. The packs and loose objects are written byte by byte here.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use flate2::Compression;
use flate2::write::ZlibEncoder;
use sha1::{Digest, Sha1};

use crate::expect_code;
use crate::util::{Output, Run, Sandbox, WATCHED, at};

/// The exit codes a tick ends with by itself (an abort is 134, a signal
/// none at all).
const CLEAN: [i32; 8] = [0, 1, 2, 10, 11, 12, 13, 14];

fn ended_cleanly(out: &Output) {
    let code = out.code;
    assert!(CLEAN.contains(&code), "exit {code}: {}", out.stderr);
}

/// The tick run to its end, or failed when it hangs.
fn watched(run: Run, what: &str) -> Output {
    crate::hostile_local::within_watchdog(run.spawn(), what)
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut z = ZlibEncoder::new(Vec::new(), Compression::fast());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

fn unhex(id: &str) -> [u8; 20] {
    let mut out = [0; 20];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A pack entry's header: its type and (inflated) size, as git writes it.
fn entry_header(kind: u8, mut size: u64) -> Vec<u8> {
    let mut out = vec![(kind << 4) | (size & 0x0f) as u8];
    size >>= 4;
    while size > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((size & 0x7f) as u8);
        size >>= 7;
    }
    out
}

/// Plants `pack-<name>.pack` holding one entry under `id` (its header and
/// body as given) and its version-2 index, beside the clone's own packs.
fn plant_pack(git_dir: &Path, name: &str, id: &str, entry: &[u8]) {
    let mut pack = b"PACK".to_vec();
    pack.extend(2u32.to_be_bytes());
    pack.extend(1u32.to_be_bytes());
    pack.extend(entry);
    let pack_sum = Sha1::digest(&pack);
    pack.extend(pack_sum);
    let id = unhex(id);
    let mut idx = b"\xfftOc".to_vec();
    idx.extend(2u32.to_be_bytes());
    for first in 0..=255u8 {
        idx.extend(u32::from(id[0] <= first).to_be_bytes());
    }
    idx.extend(id);
    idx.extend(crc32(entry).to_be_bytes());
    idx.extend(12u32.to_be_bytes());
    idx.extend(pack_sum);
    let idx_sum = Sha1::digest(&idx);
    idx.extend(idx_sum);
    let dir = git_dir.join("objects/pack");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(format!("pack-{name}.pack")), pack).unwrap();
    fs::write(dir.join(format!("pack-{name}.idx")), idx).unwrap();
}

fn git_dir(sb: &Sandbox) -> PathBuf {
    sb.repo.root.join(".git")
}

/// The loose object file of `id`.
fn loose(sb: &Sandbox, id: &str) -> PathBuf {
    git_dir(sb).join("objects").join(&id[..2]).join(&id[2..])
}

fn listed(out: &Output) -> Vec<String> {
    let report = out.json();
    report["files"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .map(|f| f["path"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A second pack, named to be searched first, holds another tree under the
/// id of the watched directory (listing a file git never lists): sentinel
/// never judges it, nor drops the real files for it.
#[test]
fn invariant_28_a_decoy_pack_is_never_judged() {
    let sb = Sandbox::with_files(&["a.js", "b.js", "c.js"]);
    sb.repo.git(&["gc", "-q"]);
    let tree = sb.repo.git(&["rev-parse", &format!("HEAD:{WATCHED}")]);
    let blob = sb.repo.git(&["rev-parse", &format!("HEAD:{WATCHED}/a.js")]);
    let mut decoy = b"100644 evil.js\0".to_vec();
    decoy.extend(unhex(&blob));
    let mut entry = entry_header(2, decoy.len() as u64);
    entry.extend(zlib(&decoy));
    plant_pack(&git_dir(&sb), &"0".repeat(40), &tree, &entry);

    let out = sb.tick(&at(0), &[]);
    ended_cleanly(&out);
    let files = listed(&out);
    assert!(!files.iter().any(|f| f.ends_with("evil.js")), "{files:?}");
    if out.code == 10 {
        let real: Vec<String> = ["a.js", "b.js", "c.js"]
            .iter()
            .map(|f| format!("{WATCHED}/{f}"))
            .collect();
        assert_eq!(files, real);
    }
    let state = fs::read_to_string(&sb.state).unwrap_or_default();
    assert!(!state.contains("evil.js"));
}

/// A loose object whose bytes do not hash to its id is refused, not read.
#[test]
fn a_forged_loose_object_is_never_judged() {
    let sb = Sandbox::with_files(&["a.js"]);
    let blob = sb.repo.git(&["rev-parse", &format!("HEAD:{WATCHED}/a.js")]);
    let forged = b"blob 20\0// forged, not a.js\n";
    let path = loose(&sb, &blob);
    fs::remove_file(&path).unwrap();
    fs::write(&path, zlib(forged)).unwrap();

    let out = watched(sb.tick_cmd(&at(0)), "a forged loose object");
    ended_cleanly(&out);
    assert_eq!(out.json()["file_reads"], 0, "the forged bytes were read");
}

/// `a.js` is a delta whose base is itself (small, so its size is within
/// the read limit), `b.js` one whose chain would be walked with every
/// link held; under a 1 GiB address space the tick ends by itself and the
/// state records the new head.
#[test]
fn a_self_referencing_delta_ends_the_tick_cleanly_and_the_state_advances() {
    let sb = Sandbox::with_files(&["a.js", "b.js", "c.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    sb.repo.write(&format!("{WATCHED}/a.js"), "// a, edited\n");
    sb.repo
        .write(&format!("{WATCHED}/b.js"), vec![b'b'; 2 << 20]);
    let head = sb.repo.commit("edit a and b");
    for (name, size) in [("a.js", 13u64), ("b.js", 2 << 20)] {
        let blob = sb
            .repo
            .git(&["rev-parse", &format!("HEAD:{WATCHED}/{name}")]);
        fs::remove_file(loose(&sb, &blob)).unwrap();
        // Copy `size` bytes from the base, itself, then insert them all.
        let mut delta = Vec::new();
        for _ in 0..2 {
            let mut n = size;
            loop {
                let more = n >> 7 > 0;
                delta.push((n & 0x7f) as u8 | if more { 0x80 } else { 0 });
                n >>= 7;
                if !more {
                    break;
                }
            }
        }
        let mut left = size;
        while left > 0 {
            let n = left.min(127);
            delta.push(n as u8);
            delta.extend(std::iter::repeat_n(b'x', n as usize));
            left -= n;
        }
        let mut entry = entry_header(7, delta.len() as u64);
        entry.extend(unhex(&blob));
        entry.extend(zlib(&delta));
        plant_pack(&git_dir(&sb), &format!("{size:040x}"), &blob, &entry);
    }

    let out = watched(
        sb.tick_cmd(&at(2)).memory_limit(1 << 30),
        "a self-referencing delta",
    );
    ended_cleanly(&out);
    let out = watched(sb.tick_cmd(&at(4)), "the tick after");
    ended_cleanly(&out);
    assert_eq!(sb.stats()["wake"]["last_head"], head.as_str());
}

/// A file 20,000 directories down: the walk of the wake's changes keeps
/// its own stack, stops at git's depth limit and ends the tick cleanly.
#[test]
fn a_directory_twenty_thousand_levels_deep_ends_the_tick_cleanly() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let deep = vec!["d"; 20_000].join("/");
    let head = sb.repo.head();
    let mut stream = format!(
        "commit refs/heads/deep\ncommitter t <t@example.invalid> 0 +0000\ndata 4\ndeep\nfrom {head}\nM 100644 inline {WATCHED}/{deep}/x.js\ndata 3\nx;\n\n"
    )
    .into_bytes();
    stream.extend(b"done\n");
    let mut child = Command::new("git")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(["fast-import", "--quiet", "--done"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&stream).unwrap();
    assert!(child.wait().unwrap().success());
    sb.repo.git(&["reset", "-q", "--soft", "deep"]);

    for minutes in [2, 4] {
        let out = sb.tick(&at(minutes), &[]);
        ended_cleanly(&out);
    }
}

/// A reftable clone (or, where git cannot make one, a files one) whose
/// head commit is replaced with `git replace`: sentinel lists and reads
/// what git lists and reads.
#[test]
fn a_replaced_commit_is_read_as_git_reads_it() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    // git 2.47 migrates no reflogs: there are none to keep here.
    let _ = fs::remove_dir_all(git_dir(&sb).join("logs"));
    let reftable = Command::new("git")
        .arg("-C")
        .arg(&sb.repo.root)
        .args(["refs", "migrate", "--ref-format=reftable"])
        .output()
        .is_ok_and(|o| o.status.success());
    eprintln!("reftable: {reftable}");
    if std::env::var_os("SENTINEL_REQUIRE_REFTABLE").is_some() {
        assert!(reftable, "this git cannot make a reftable clone");
    }
    let original = sb.repo.head();
    // The replacement has the original's parents, and one file more.
    sb.repo
        .write(&format!("{WATCHED}/replaced.js"), "// replaced\n");
    sb.repo.git(&["add", "-A"]);
    let tree = sb.repo.git(&["write-tree"]);
    let mut args = vec![
        "commit-tree".to_string(),
        tree,
        "-m".into(),
        "replacement".into(),
    ];
    for parent in sb
        .repo
        .git(&["rev-parse", &format!("{original}^@")])
        .lines()
    {
        args.extend(["-p".to_string(), parent.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let replacement = sb.repo.git(&args);
    sb.repo.git(&["reset", "-q", "--hard", &original]);
    sb.repo.git(&["replace", &original, &replacement]);
    let git_lists = sb
        .repo
        .git(&["ls-tree", "-r", "--name-only", &original, WATCHED]);

    let out = sb.tick(&at(0), &[]);
    expect_code(&out, 10);
    let files = listed(&out);
    assert_eq!(files.join("\n"), git_lists);
    assert!(files.contains(&format!("{WATCHED}/replaced.js")));
    assert_eq!(out.json()["reader"], "git");
}

/// `sentinel stats` of the sandbox's state with `extra` flags, as printed.
fn stats(sb: &Sandbox, extra: &[&str]) -> String {
    let out = sb
        .sentinel(["stats"])
        .args(extra)
        .arg("--state")
        .arg(&sb.state)
        .output();
    assert_eq!(out.code, 0, "stats failed: {}", out.stderr);
    out.stdout
}

/// The reader chosen for a clone is remembered by the wake and said by
/// `stats`, in the table, the JSON and the Prometheus text: gix for a
/// plain clone, git (and why) for one gix declines.
#[test]
fn stats_names_the_reader_that_read_the_clone() {
    let sb = Sandbox::with_files(&["a.js"]);
    expect_code(&sb.tick(&at(0), &[]), 10);
    assert_eq!(sb.stats()["wake"]["reader"], "gix");
    let table = stats(&sb, &[]);
    assert!(table.contains("reader") && table.contains("gix"), "{table}");
    let prom = stats(&sb, &["--format", "prometheus"]);
    assert!(
        prom.contains("sentinel_object_reader{reader=\"gix\"} 1"),
        "{prom}"
    );

    // A grafted history is one gix does not read as git does.
    sb.repo.write(&format!("{WATCHED}/b.js"), "// b\n");
    sb.repo.commit("b");
    let head = sb.repo.head();
    fs::write(git_dir(&sb).join("info/grafts"), format!("{head}\n")).unwrap();
    expect_code(&sb.tick(&at(60), &[]), 12);
    assert_eq!(sb.stats()["wake"]["reader"], "git");
    let table = stats(&sb, &[]);
    assert!(table.contains("git (gix declines this clone"), "{table}");
}

/// A FIFO planted where a loose object lives (the agent's worktree shares
/// the clone's git directory) is refused without being opened: the tick
/// ends instead of waiting for a writer.
#[test]
fn a_fifo_planted_as_a_loose_object_does_not_hold_the_tick() {
    let sb = Sandbox::with_files(&["a.js", "b.js"]);
    let blob = sb.repo.git(&["rev-parse", &format!("HEAD:{WATCHED}/a.js")]);
    let path = loose(&sb, &blob);
    fs::remove_file(&path).unwrap();
    let made = Command::new("mkfifo").arg(&path).status().unwrap();
    assert!(made.success());

    let out = watched(sb.tick_cmd(&at(0)), "a FIFO as a loose object");
    ended_cleanly(&out);
    // The read failed: the files not read wait in the backlog.
    assert!(out.json()["pending"].as_u64() >= Some(1), "{}", out.stdout);
}
