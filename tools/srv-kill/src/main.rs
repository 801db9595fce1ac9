use servbench::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("srv-kill", || {
        let Some(args) = cli::parse_args::<srv_kill::Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_kill::run(&args)
    })
}
