//! `genfront`: parse the command line and run it.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = genfront::Cli::parse();
    genfront::init_tracing();
    match genfront::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("genfront: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
