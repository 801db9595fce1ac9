use servbench::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("srv-sim", || {
        let Some(args) = cli::parse_args::<srv_sim::Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_sim::run(args)
    })
}
