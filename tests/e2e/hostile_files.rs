//! A hostile state directory: links planted wherever sentinel writes. Each
//! is refused or replaced, never written through: the file a link points to
//! keeps its bytes, whatever the tick does.

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

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
