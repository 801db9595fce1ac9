use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    servbench::cli::main("loadgen", || loadgen::run::main(loadgen::Args::parse()))
}
