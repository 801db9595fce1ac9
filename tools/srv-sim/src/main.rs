use servbench::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("srv-sim", || {
        let Some(config) = cli::parse_args::<srv_sim::Config>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_sim::run(config)
    })
}
