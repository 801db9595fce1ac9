//! collbench: parsing and wiring only (the flags and their configs are `args/`).

mod args;

use args::{Cli, Command};
use servbench::cli::{self, Exit};
use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main("collbench", || {
        // mpirun spells it -np; clap's long flags take two dashes.
        let argv: Vec<OsString> = std::env::args_os()
            .map(|a| {
                if a == "-np" {
                    OsString::from("--np")
                } else {
                    a
                }
            })
            .collect();
        let Some(cli) = cli::parse_args_from::<Cli, _>(&argv)? else {
            return Ok(Exit::Ok);
        };
        let rest: Vec<OsString> = argv[1..].to_vec();
        match cli.command {
            None => args::bench(cli.bench, rest),
            Some(Command::Decode(d)) => args::decode(*d, rest),
            Some(Command::Gemm(g)) => args::gemm(g),
            Some(Command::Limits(l)) => args::limits(l),
            Some(Command::P2p(p)) => args::p2p(*p, rest),
        }
    })
}
