use servbench::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("srv-launch", || {
        let Some(args) = cli::parse_args::<srv_launch::Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_launch::run(&args)
    })
}
