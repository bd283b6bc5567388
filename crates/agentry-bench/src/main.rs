//! `agentry-bench <w1|w2|w3|w4|floor|cancel|parallel|durable|durable-w2|sandbox|idle> [options]`: runs one
//! benchmark and prints exactly one JSON line. Exit status 0 when every check
//! passed, 1 when one failed (`ok: false`) or the workload could not run.

use std::process::ExitCode;

use agentry_bench::cli::Args;
use agentry_bench::report::Report;
use clap::Parser;

#[cfg(all(feature = "mimalloc", not(feature = "count-alloc")))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "count-alloc")]
#[global_allocator]
static ALLOCATOR: agentry_bench::alloc_count::Counting = agentry_bench::alloc_count::Counting;

/// Which global allocator this build uses (reported with every figure).
const ALLOCATOR_NAME: &str = if cfg!(feature = "count-alloc") {
    "system, counted"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

fn main() -> ExitCode {
    #[cfg(feature = "count-alloc")]
    ALLOCATOR.installed();
    let args = Args::parse();
    let opts = args.options();
    let mut report = agentry_bench::cli::run(args.workload, &opts).unwrap_or_else(|e| {
        let mut r = Report::new(&args.workload.name());
        r.ok = false;
        r.note(format!("[ERROR] {e}"));
        r
    });
    report.param("allocator", ALLOCATOR_NAME);
    println!("{}", report.to_line());
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
