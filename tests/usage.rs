//! Keeps docs/usage.md in step with the binary's --help, and that help grouped by heading.
//!
//! The expected document is rebuilt here exactly as scripts/usage-doc writes
//! it: the long help of `sentinel` and of every subcommand `sentinel --help`
//! lists (less clap's own `help`), each run with an emptied environment,
//! spaces at line ends cut and blank lines at the end dropped. Change the two
//! together.

use std::process::Command;

const DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/usage.md");

/// Everything before the first section, as scripts/usage-doc prints it.
const INTRO: &str = "# Usage

The full `--help` of `sentinel` and of every subcommand, as the binary prints it.
Regenerate it after changing a flag or a help text (`tests/usage.rs` fails until you do):

```sh
scripts/usage-doc
```
";

/// `sentinel ARGS... --help` as the script takes it.
fn help(args: &[&str]) -> String {
    run(&[args, &["--help"]].concat())
}

/// The output of `sentinel ARGS...` run with an emptied environment, spaces
/// at line ends cut and blank lines at the end dropped.
fn run(args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sentinel"));
    cmd.env_clear();
    for keep in ["PATH", "HOME"] {
        if let Some(v) = std::env::var_os(keep) {
            cmd.env(keep, v);
        }
    }
    let out = cmd.args(args).output().expect("run sentinel");
    assert!(out.status.success(), "sentinel {args:?} failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("output is UTF-8");
    let mut text = text
        .split('\n')
        .map(|l| l.trim_end_matches(' '))
        .collect::<Vec<_>>()
        .join("\n");
    text.truncate(text.trim_end_matches('\n').len());
    text.push('\n');
    text
}

/// The subcommands the top-level help lists under `Commands:`, less `help`.
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn section(doc: &mut String, title: &str, help: &str) {
    doc.push_str(&format!("\n## {title}\n\n```text\n{help}```\n"));
}

#[test]
fn docs_usage_matches_the_help_of_every_subcommand() {
    let top = help(&[]);
    let subs = subcommands(&top);
    for known in [
        "tick", "stats", "explain", "simulate", "costs", "reset", "record",
    ] {
        assert!(
            subs.iter().any(|s| s == known),
            "`sentinel --help` lists no {known} (read {subs:?}); has its Commands: section changed shape?\n{top}"
        );
    }
    let mut expected = String::from(INTRO);
    section(&mut expected, "sentinel", &top);
    for sub in &subs {
        section(&mut expected, &format!("sentinel {sub}"), &help(&[sub]));
    }

    let actual = std::fs::read_to_string(DOC)
        .unwrap_or_else(|e| panic!("cannot read {DOC} ({e}): run scripts/usage-doc"));
    if actual != expected {
        let want: Vec<&str> = expected.split('\n').collect();
        let got: Vec<&str> = actual.split('\n').collect();
        let i = (0..want.len().max(got.len()))
            .find(|&i| want.get(i) != got.get(i))
            .expect("the texts differ, so some line does");
        panic!(
            "docs/usage.md is out of step with the binary's --help: run scripts/usage-doc \
             and commit the result.\nFirst difference, line {}:\n  binary: {:?}\n  doc:    {:?}",
            i + 1,
            want.get(i),
            got.get(i)
        );
    }
}

#[test]
fn tick_help_is_grouped_under_the_seven_headings() {
    for flag in ["--help", "-h"] {
        let help = run(&["tick", flag]);
        // A heading is a single word ending in a colon, alone on its line
        // ("Exit codes:" and the crontab example below the flags are not).
        let headings: Vec<&str> = help
            .lines()
            .filter(|l| l.ends_with(':') && !l.contains(' '))
            .collect();
        assert_eq!(
            headings,
            [
                "Options:",
                "Source:",
                "State:",
                "Fleet:",
                "Work:",
                "Advisor:",
                "Reports:",
                "Scheduling:"
            ],
            "sentinel tick {flag}:\n{help}"
        );
        let options: Vec<&str> = help
            .lines()
            .skip_while(|l| *l != "Options:")
            .skip(1)
            .take_while(|l| !l.is_empty())
            .filter(|l| l.trim_start().starts_with('-'))
            .collect();
        assert!(
            options.len() == 1 && options[0].trim_start().starts_with("-h, --help"),
            "only -h belongs under Options, the flags under the seven headings; found {options:?}"
        );
    }
}
