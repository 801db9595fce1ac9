use servbench::cli::{self, Exit};
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("loadgen", || {
        let Some(args) = cli::parse_args::<loadgen::Args>()? else {
            return Ok(Exit::Ok);
        };
        loadgen::run::entry::main(args)
    })
}
