//! A hostile state directory: links planted wherever sentinel writes. Each
//! is refused or replaced, never written through: the file a link points to
//! keeps its bytes, whatever the tick does. And a save keeps the state's
//! mode and owner, which new sidecars take too.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use crate::util::openai::FakeOpenAi;
use crate::util::{Output, Sandbox, WATCHED, at, sidecar};
use crate::{FIVE, expect_code};

const MINE: &str = "not sentinel's\n";

/// A file outside the state directory, and a link to it at `at`.
fn plant(sb: &Sandbox, at: &Path) -> PathBuf {
    let victim = sb.root().join("victim");
    fs::write(&victim, MINE).unwrap();
    fs::create_dir_all(at.parent().unwrap()).unwrap();
    symlink(&victim, at).unwrap();
    victim
}

#[track_caller]
fn untouched(victim: &Path, link: &Path) {
    assert_eq!(fs::read_to_string(victim).unwrap(), MINE, "written through");
    assert!(
        fs::symlink_metadata(link).is_ok_and(|m| m.file_type().is_symlink()),
        "the link `{}` was replaced",
        link.display()
    );
}

#[track_caller]
fn refused(out: &Output, link: &Path) {
    expect_code(out, 1);
    let named = format!("`{}`", link.display());
    assert!(out.stderr.contains(&named), "{}", out.stderr);
    assert!(out.stderr.contains("symbolic link"), "{}", out.stderr);
}

fn edit(sb: &Sandbox) {
    sb.repo
        .write(&format!("{WATCHED}/a.js"), "// a.js, edited\n");
    sb.repo.commit("edit a");
}

#[test]
fn a_planted_noops_link_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let victim = plant(&sb, &sb.journal());
    refused(&sb.tick(&at(2), &[]), &sb.journal());
    untouched(&victim, &sb.journal());
    edit(&sb);
    refused(&sb.tick(&at(4), &[]), &sb.journal());
    untouched(&victim, &sb.journal());
}

#[test]
fn a_planted_start_link_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    let start = sidecar(&sb.state, ".start");
    let victim = plant(&sb, &start);
    refused(&sb.tick(&at(0), &["--trigger", "push"]), &start);
    untouched(&victim, &start);
}

#[test]
fn a_planted_lock_link_is_never_opened() {
    let sb = Sandbox::with_files(&FIVE);
    let victim = plant(&sb, &sb.lock());
    refused(&sb.tick(&at(0), &[]), &sb.lock());
    untouched(&victim, &sb.lock());
}

#[test]
fn a_symlinked_state_is_refused_on_a_noop_and_on_a_save_and_what_it_points_to_is_kept() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let real = sb.state.with_file_name("real.json");
    fs::rename(&sb.state, &real).unwrap();
    symlink(&real, &sb.state).unwrap();
    let before = fs::read(&real).unwrap();
    for (minute, wake) in [(2, false), (4, true)] {
        if wake {
            edit(&sb);
        }
        let out = sb.tick(&at(minute), &[]);
        refused(&out, &sb.state);
        assert!(
            out.stderr.contains("point --state at the real file"),
            "{}",
            out.stderr
        );
        assert_eq!(fs::read(&real).unwrap(), before);
        assert!(!sb.journal().exists(), "no no-op was counted beside it");
    }
}

#[test]
fn a_link_planted_at_the_old_predictable_temp_name_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    let mut child = sb.tick_cmd(&at(0)).spawn_gated();
    // The gate execs sentinel under its own pid: the name the old saves used.
    let tmp = sidecar(&sb.state, &format!(".tmp-{}", child.id()));
    let victim = plant(&sb, &tmp);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = Output::wait(child);
    expect_code(&out, 10);
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        MINE,
        "written through"
    );
    let saved = fs::symlink_metadata(&sb.state).unwrap();
    assert!(saved.is_file(), "the state is a file of its own");
}

#[test]
fn a_planted_codequality_link_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    let report = sb.root().join("out").join("gl-code-quality.json");
    let victim = plant(&sb, &report);
    let out = sb.tick(&at(0), &["--codequality", report.to_str().unwrap()]);
    refused(&out, &report);
    untouched(&victim, &report);
}

#[test]
fn a_planted_dashboard_file_link_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    let page = sb.root().join("out").join("dashboard.md");
    let victim = plant(&sb, &page);
    let out = sb.tick(&at(0), &["--dashboard-file", page.to_str().unwrap()]);
    expect_code(&out, 10);
    assert!(out.stdout.contains("symbolic link"), "{}", out.stdout);
    untouched(&victim, &page);
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_save_keeps_the_state_mode_and_new_journals_take_it() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    fs::set_permissions(&sb.state, fs::Permissions::from_mode(0o600)).unwrap();
    expect_code(&sb.tick(&at(2), &[]), 0);
    assert_eq!(mode(&sb.journal()), 0o600, "the no-op journal");
    edit(&sb);
    expect_code(&sb.tick(&at(4), &[]), 12);
    assert_eq!(mode(&sb.state), 0o600, "0600 stays 0600");
    expect_code(&sb.tick(&at(6), &["--trigger", "push"]), 0);
    assert_eq!(
        mode(&sidecar(&sb.state, ".start")),
        0o600,
        "the start sidecar"
    );
}

#[test]
fn a_save_as_root_keeps_the_state_owner() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // Only root can give a file away; the mode test covers the rest.
    }
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    std::os::unix::fs::chown(&sb.state, Some(65534), Some(65534)).unwrap();
    expect_code(&sb.tick(&at(2), &[]), 0);
    let owner = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner(&sb.journal()), (65534, 65534), "the no-op journal");
    edit(&sb);
    expect_code(&sb.tick(&at(4), &[]), 12);
    assert_eq!(
        owner(&sb.state),
        (65534, 65534),
        "the state keeps its owner"
    );
}

#[test]
fn only_well_formed_journal_lines_count_as_noops_and_the_rest_are_counted_as_malformed() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    expect_code(&sb.tick(&at(2), &[]), 0);
    expect_code(&sb.tick(&at(4), &[]), 0);
    let mut journal = fs::OpenOptions::new()
        .append(true)
        .open(sb.journal())
        .unwrap();
    journal
        .write_all(b"garbage\n\n2026-99-99T00:00:00Z abc\nnot a time abc\n\xff\xfe\n")
        .unwrap();
    let wake = &sb.stats()["wake"];
    assert_eq!(wake["unsaved_noops"], 2, "{wake}");
    assert_eq!(wake["malformed_noop_lines"], 5, "{wake}");
    edit(&sb);
    expect_code(&sb.tick(&at(6), &[]), 12);
    let wake = &sb.stats()["wake"];
    assert_eq!(wake["noops"], 2, "two real no-ops, never seven: {wake}");
}

#[test]
fn a_failed_codequality_write_after_the_save_says_the_state_was_saved_and_exits_1() {
    let sb = Sandbox::with_files(&FIVE);
    let report = sb.root().join("no-such-dir").join("gl-code-quality.json");
    let out = sb.tick(&at(0), &["--codequality", report.to_str().unwrap()]);
    expect_code(&out, 1);
    let said = &out.stderr;
    assert!(
        said.contains(&format!("the state `{}` was saved", sb.state.display())),
        "{said}"
    );
    assert!(said.contains("Code Quality report"), "{said}");
    assert!(said.contains(&format!("`{}`", report.display())), "{said}");
    assert!(!said.contains("previous state was kept"), "{said}");
    assert!(sb.state.is_file(), "the state was saved");
    expect_code(&sb.tick(&at(2), &[]), 0);
}

#[test]
fn a_failed_dashboard_file_write_names_the_dashboard_and_the_state_is_saved() {
    let sb = Sandbox::with_files(&FIVE);
    let page = sb.root().join("no-such-dir").join("dashboard.md");
    let out = sb.tick(&at(0), &["--dashboard-file", page.to_str().unwrap()]);
    expect_code(&out, 10);
    let said = &out.stdout;
    assert!(
        said.contains("the dashboard file was not written"),
        "{said}"
    );
    assert!(said.contains(&page.display().to_string()), "{said}");
    assert!(!said.contains("previous state was kept"), "{said}");
    assert!(sb.state.is_file(), "the state was saved");
}

#[test]
fn a_planted_decisions_link_is_never_written_through_and_no_call_is_made() {
    let sb = Sandbox::new();
    sb.repo
        .write("src/auth.js", "// auth\nmodule.exports = 1;\n");
    sb.repo.commit("initial files");
    let decisions = sidecar(&sb.state, ".decisions");
    let victim = plant(&sb, &decisions);
    let ai = FakeOpenAi::start();
    let out = sb.advisor_tick_cmd(&ai, &at(0)).output();
    expect_code(&out, 10);
    assert_eq!(ai.posts(), 0, "no call without the journal");
    assert!(
        out.stdout.contains(&format!("`{}`", decisions.display())),
        "{}",
        out.stdout
    );
    untouched(&victim, &decisions);
}

/// `<state>.d`, where the records' shards live.
fn shard_dir(sb: &Sandbox) -> PathBuf {
    sidecar(&sb.state, ".d")
}

/// What a directory holds: names and bytes.
fn listing(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_planted_shard_directory_link_is_never_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    // The shard directory moved elsewhere, a link left in its place.
    let victim = sb.root().join("victim-dir");
    fs::rename(shard_dir(&sb), &victim).unwrap();
    symlink(&victim, shard_dir(&sb)).unwrap();
    let before = listing(&victim);
    let state = fs::read(&sb.state).unwrap();
    edit(&sb);
    refused(&sb.tick(&at(2), &[]), &shard_dir(&sb));
    assert_eq!(listing(&victim), before, "written through");
    assert_eq!(fs::read(&sb.state).unwrap(), state);

    // A first run finds the link too, and writes nothing through it.
    fs::remove_file(&sb.state).unwrap();
    refused(&sb.tick(&at(4), &[]), &shard_dir(&sb));
    assert_eq!(listing(&victim), before, "written through on a first run");
    assert!(!sb.state.exists());
}

#[test]
fn a_planted_shard_link_is_never_read_or_written_through() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let shard = crate::util::layout::shard_paths(&sb.state).pop().unwrap();
    // The same bytes, elsewhere, and a link to them at the shard's name.
    let victim = sb.root().join("victim");
    fs::rename(&shard, &victim).unwrap();
    symlink(&victim, &shard).unwrap();
    let mine = fs::read(&victim).unwrap();
    let state = fs::read(&sb.state).unwrap();
    edit(&sb);
    let out = sb.tick(&at(2), &[]);
    expect_code(&out, 1);
    assert!(
        out.stderr.contains(&format!("`{}`", shard.display())),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("symbolic link"), "{}", out.stderr);
    assert_eq!(fs::read(&victim).unwrap(), mine, "written through");
    assert!(
        fs::symlink_metadata(&shard)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read(&sb.state).unwrap(), state);
}

#[test]
fn a_new_shard_takes_the_state_mode() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    fs::set_permissions(&sb.state, fs::Permissions::from_mode(0o600)).unwrap();
    edit(&sb);
    expect_code(&sb.tick(&at(2), &[]), 12);
    for shard in crate::util::layout::shard_paths(&sb.state) {
        assert_eq!(mode(&shard), 0o600, "{}", shard.display());
    }
}

/// The temp files of ticks killed mid-save, the decision journal's and the
/// other sidecars' included, are swept by the next save; a link planted
/// under such a name is removed, never followed, and what it points to keeps
/// its bytes. A no-op writes nothing, so it sweeps nothing.
#[test]
fn leftover_temp_files_of_the_state_and_its_sidecars_are_swept_by_the_next_save() {
    let sb = Sandbox::with_files(&FIVE);
    expect_code(&sb.tick(&at(0), &[]), 10);
    let leftovers = [
        sidecar(&sb.state, ".tmp-Ab12Cd"),
        sidecar(&sb.state, ".decisions.tmp-Ef34Gh"),
        sidecar(&sb.state, ".start.tmp-Ij56Kl"),
    ];
    for temp in &leftovers {
        fs::write(temp, "half a save\n").unwrap();
    }
    let link = sidecar(&sb.state, ".decisions.tmp-Mn78Op");
    let victim = plant(&sb, &link);
    expect_code(&sb.tick(&at(2), &[]), 0);
    assert!(
        leftovers.iter().all(|t| t.exists()),
        "a no-op removed a file"
    );
    edit(&sb);
    expect_code(&sb.tick(&at(4), &[]), 12);
    for temp in leftovers.iter().chain([&link]) {
        assert!(
            fs::symlink_metadata(temp).is_err(),
            "`{}` was left behind",
            temp.display()
        );
    }
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        MINE,
        "written through"
    );
}
