//! `genfront`: parse the command line and run it.

use clap::Parser;

/// The allocator: jemalloc, which gives freed memory back to the OS (glibc's malloc keeps a
/// fragmented heap: after six ~160 MB unary answers to clients that never read them were
/// dropped, 1.1 GB stayed resident; with jemalloc's background purge 40 MB —
/// `scripts/soak.py`, step `neverread`).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // jemalloc's background thread purges freed pages (after its 10 s decay) even when no
    // thread allocates; without it a quiet process keeps them. A failure leaves the default.
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
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
