"""Random-weight models from committed configs, and a word-level tokenizer sized to them.

The GPU check (bench/gpu_check.sh) runs where no weights can travel: it builds each model
from its config, on the device, with seeded random weights. The configs copy the shapes of
SmolLM2-135M (read from the default model's converted config.json) and of a ~1B Llama
(Llama-3.2-1B's shapes, plain RoPE); "tiny" is a 2-layer stand-in for a CPU dry run.
"""

import copy

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

EOS_TOKEN_ID = 2
SPECIAL_TOKENS = ["<unk>", "<s>", "<eos>"]  # ids 0, 1, 2, as in SmolLM2's vocabulary
# Bigger weights than the init's 0.02 spread the logits, so exact ties stay rare (as in
# tests/engine/kit.py). Speed does not depend on the values.
WEIGHT_SCALE = 4.0

CONFIGS = {
    "smollm2-135m": dict(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
    ),
    "llama-1b": dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
    ),
    "tiny": dict(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
        tie_word_embeddings=True,
    ),
}  # fmt: skip


def llama_config(name: str) -> LlamaConfig:
    if name not in CONFIGS:
        raise ValueError(f"model must be one of {sorted(CONFIGS)}, got {name!r}")
    values = dict(CONFIGS[name])
    rope_theta = values.pop("rope_theta", 10000.0)
    return LlamaConfig(
        **values,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        bos_token_id=1,
        eos_token_id=EOS_TOKEN_ID,
        pad_token_id=EOS_TOKEN_ID,
    )


@torch.no_grad()
def random_model(name: str, device: str | torch.device, dtype: torch.dtype, seed: int = 0):
    """A LlamaForCausalLM with config `name` and seeded random weights, made on `device` in
    float32 and then cast to `dtype` (so a bf16 model is the fp32 one, rounded)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(llama_config(name))
    for p in model.parameters():
        if p.dim() > 1:
            p.mul_(WEIGHT_SCALE)
    return model.to(dtype).eval()


def reference_copy(model):
    """An identical model with its own config: the engine switches its model's attention
    implementation, and two models built from one config object share it."""
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa")
    return reference


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A fast tokenizer with one word per id ("w3", "w4", ...) and `<eos>` = 2: the engine's
    detokenizer runs the same Rust decode it runs on a real vocabulary of that size."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update((f"w{i}", i) for i in range(len(SPECIAL_TOKENS), vocab_size))
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<eos>",
        pad_token="<eos>",
    )
