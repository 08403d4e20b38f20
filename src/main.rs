//! The `sentinel` binary: parse, run, print `error: ...`, exit with the code.

use std::process::ExitCode;

fn main() -> ExitCode {
    // First, while sentinel has one thread: the keys leave the environment
    // block other processes can read, and what an agent starts stays below.
    sentinel::llm::withhold::secrets(&sentinel::redact::SECRET_VARS);
    sentinel::llm::contain::become_subreaper();
    let cli = sentinel::cli::Cli::from_process();
    match sentinel::app::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if let Some(stopped) = err.downcast_ref::<sentinel::llm::contain::Interrupted>() {
                // One line: what was running and that nothing was lost.
                eprintln!("{}", sentinel::redact::text(&stopped.to_string()));
                return ExitCode::from(stopped.exit_code());
            }
            let message = sentinel::redact::text(&format!("{err:#}"));
            eprintln!("error: {}", sentinel::report::escape::terminal(&message));
            ExitCode::from(sentinel::exit::for_error(&err))
        }
    }
}
