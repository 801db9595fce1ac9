"""Parses engine command lines with the engine's own argument parser, as it would at start.

Usage: python engine_args.py sglang|vllm < COMMANDS
  COMMANDS: one JSON array of command lines, each an array of arguments:
  sglang: what follows `python3 -m sglang.launch_server` (SGLang's ServerArgs parser);
  vllm:   what follows `vllm` (`serve MODEL ...`: vLLM's `vllm serve` parser and its checks of
          the parsed arguments).
Prints one JSON array on stdout, one object per command line: {"ok": true, "parsed": {the
parallelism and serving values as the engine read them}} or {"ok": false, "error": the
engine's own message}. One interpreter start for them all (importing an engine takes seconds).
Starts nothing. Run through scripts/setup/sglang.sh's wrapper by tools/srv-launch/tests.
"""

import contextlib
import io
import json
import sys

SGLANG_KEYS = ["model_path", "host", "port", "tp_size", "pp_size", "dp_size", "ep_size",
               "pp_max_micro_batch_size", "speculative_algorithm", "speculative_num_steps",
               "enable_metrics", "enable_mfu_metrics", "enable_request_time_stats_logging",
               "disaggregation_mode", "disaggregation_bootstrap_port"]
VLLM_KEYS = ["model_tag", "host", "port", "tensor_parallel_size", "pipeline_parallel_size",
             "data_parallel_size", "enable_expert_parallel", "speculative_config",
             "enable_per_request_metrics", "enable_logging_iteration_details", "enable_mfu_metrics",
             "kv_transfer_config"]


def sglang_parser():
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)

    def parse(argv):
        ns = parser.parse_args(argv)
        return {k: getattr(ns, k, None) for k in SGLANG_KEYS}

    return parse


def vllm_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def parse(argv):
        # A parser per line: vLLM's parser keeps state between parse_args calls.
        parser = FlexibleArgumentParser(prog="vllm")
        subparsers = parser.add_subparsers(dest="subparser")
        serve = ServeSubcommand()
        serve.subparser_init(subparsers)
        ns = parser.parse_args(argv)
        if ns.subparser != "serve":
            parser.error("only `vllm serve` is checked")
        serve.validate(ns)
        return {k: getattr(ns, k, None) for k in VLLM_KEYS}

    return parse


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("sglang", "vllm"):
        print("usage: engine_args.py sglang|vllm < COMMANDS.json", file=sys.stderr)
        sys.exit(2)
    parse = {"sglang": sglang_parser, "vllm": vllm_parser}[sys.argv[1]]()
    results = []
    for argv in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                results.append({"ok": True, "parsed": parse(argv)})
        except SystemExit:
            results.append({"ok": False, "error": err.getvalue().strip()})
        except Exception as e:  # a check of the parsed values (vLLM's validate)
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()
