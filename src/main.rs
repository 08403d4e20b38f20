//! The `sentinel` binary: parse, run, print `error: ...`, exit with the code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = sentinel::cli::Cli::parse();
    match sentinel::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let message = sentinel::redact::text(&format!("{err:#}"));
            eprintln!("error: {}", sentinel::report::escape::terminal(&message));
            ExitCode::from(sentinel::exit::for_error(&err))
        }
    }
}
