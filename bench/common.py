"""What the benchmark scripts share: the correctness verdict (exact / near-tie / mismatch,
also used by the test suite), transformers' greedy settings and step timer, machine facts."""

import os
import platform
import time

import torch
import transformers
from transformers import GenerationConfig, LogitsProcessor

NEAR_TIE = 1e-3  # reference top-2 logits at most this far apart (docs/ARCHITECTURE.md)


@torch.inference_mode()
def classify(model, prompt: list[int], ref: list[int], got: list[int]) -> str:
    """The correctness criterion (docs/ARCHITECTURE.md): "exact", "near_tie" or "mismatch"
    (a length mismatch too). `model` is the stock reference, `ref` its greedy tokens."""
    if got == ref:
        return "exact"
    k = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
    if k is None:
        return "mismatch"  # one is a prefix of the other: wrong length
    ids = torch.tensor([prompt + ref[:k]], device=model.device)
    logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
    top = logits.topk(2)
    gap = (top.values[0] - top.values[1]).item()
    if gap <= NEAR_TIE and {ref[k], got[k]} == set(top.indices.tolist()):
        return "near_tie"
    return "mismatch"


class StepTimes(LogitsProcessor):
    """Records when each decoding step's logits are ready (that step's token is then chosen)."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def greedy_config(max_new_tokens: int, pad_token_id: int) -> GenerationConfig:
    # eos_token_id=-1: never stop early (ignore_eos) without touching the EOS logit, as
    # min_new_tokens would. The attention mask is always passed explicitly, because
    # transformers infers one from pad tokens when pad != eos, and the pad is a real token here.
    return GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=pad_token_id
    )


# The CPU features that decide which kernels torch (oneDNN) and vLLM run: the bf16 ratios
# between the two moved by 30 % between an AMX Xeon and an EPYC without AMX.
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_facts(cpuinfo: str) -> tuple[str, list[str]]:
    """(model name, the MATMUL_FLAGS it has) from the text of /proc/cpuinfo."""
    name, flags = "", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not name:
            name = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return name, [f for f in MATMUL_FLAGS if f in flags]


def machine_info() -> dict:
    cpu, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo") as f:
            name, flags = cpu_facts(f.read())
        cpu = name or cpu
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_flags": flags,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
