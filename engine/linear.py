"""FusedLinear: one matmul for several `nn.Linear`s that read the same input, on fast kernels.

q/k/v become one projection and gate/up another, as in vLLM's `QKVParallelLinear` and
`MergedColumnParallelLinear`: one larger matmul streams the same weights with one call
instead of three. On a CPU with oneDNN the fused weight is pre-packed once into oneDNN's
blocked layout (`torch.ops.mkldnn._reorder_linear_weight`) and run by
`torch.ops.mkldnn._linear_pointwise`, the pair inductor's CPU weight freezing emits; on these
2 cores that halves an fp32 decode step's matmuls at batch 1 and nearly triples them at batch
16-64 (bench/RESULTS.md). Elsewhere (CUDA, a torch without oneDNN, another dtype) the fused
weight goes through plain `F.linear`. Both give the same numbers up to float rounding.
"""

import torch
import torch.nn.functional as F

PACKED_DTYPES = (torch.float32, torch.bfloat16)
PACK_BATCH_HINT = 16  # rows oneDNN picks its blocked layout for; one layout serves every M


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN's packed linear is there for this weight's device and dtype. Its
    bfloat16 kernels want AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: an AVX2-only CPU refuses
    a bfloat16 weight (FusedLinear then packs its float32 upcast)."""
    return (
        weight.device.type == "cpu"
        and weight.dtype in PACKED_DTYPES
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and (weight.dtype != torch.bfloat16 or torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


class FusedLinear:
    """`linears` side by side: y = x @ [W_0; W_1; ...]^T + [b_0; b_1; ...], one call.

    The weights are copied (the model's own modules stay as they were, for `generate` and
    the transformers path); `pack=False` keeps the copy for `F.linear`.
    """

    def __init__(self, linears: list[torch.nn.Linear], pack: bool = True):
        with torch.no_grad():
            weight = torch.cat([m.weight for m in linears]).contiguous()  # (out, in)
            biases = [m.bias for m in linears]
            if any(b is not None for b in biases):
                biases = [b if b is not None else weight.new_zeros(m.out_features)
                          for m, b in zip(linears, biases, strict=True)]  # fmt: skip
                bias = torch.cat(biases).to(weight.dtype)
            else:
                bias = None
        self.out_features, self.in_features = weight.shape
        self.sizes = [m.out_features for m in linears]  # how the output splits back
        # bfloat16 where oneDNN has no bfloat16 kernels (AVX2): the float32 kernels on the exact
        # upcast. A bf16 product is exact in float32, and bf16 GEMMs accumulate in float32 too,
        # so only the order of the sums differs; torch's own bf16 matmul there was 6x slower
        # at 64 rows. One row (a batch-1 decode) reads the weight once: torch's bf16 GEMV on
        # the bf16 copy reads half the bytes (18 against 35 ms for a SmolLM2 step).
        self.upcast = (
            pack
            and weight.dtype == torch.bfloat16
            and not can_pack(weight)
            and can_pack(weight.new_empty(0, dtype=torch.float32))
        )
        if self.upcast:
            self.gemv_weight, self.gemv_bias = weight, bias
            weight = weight.float()
            bias = bias.float() if bias is not None else None
        self.bias = bias
        self.is_packed = pack and can_pack(weight)
        if self.is_packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)
        else:
            self.weight = weight

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(T, in) -> (T, out)."""
        if self.upcast:
            if x.shape[0] == 1:
                return F.linear(x, self.gemv_weight, self.gemv_bias)
            y = torch.ops.mkldnn._linear_pointwise(
                x.float(), self.weight, self.bias, "none", [], ""
            )
            return y.to(x.dtype)
        if self.is_packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """residual + self(x), fused into the matmul in float32. In bfloat16 the fused add
        would round once where transformers rounds twice (after the matmul, after the add),
        and bf16 greedy output is checked against transformers', so it is not fused there."""
        if self.is_packed and residual.dtype == torch.float32:
            return torch.ops.mkldnn._linear_pointwise.binary(
                x, residual, self.weight, self.bias, "add"
            )
        return residual + self(x)
