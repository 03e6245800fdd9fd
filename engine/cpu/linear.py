"""FusedLinear: one matmul for several `nn.Linear`s that read the same input, on fast kernels.

q/k/v become one projection and gate/up another, as in vLLM's `QKVParallelLinear` and
`MergedColumnParallelLinear`: one larger matmul streams the same weights with one call
instead of three. The fused weight is packed once for the fastest kernel there is:
- "bf16_panels": a bfloat16 weight on a CPU with AVX512_BF16 and no AMX, the engine's own
  GEMM on vdpbf16ps (csrc/gemm_bf16.c: panels of 32 columns, float32 sums, bfloat16 out),
  faster than oneDNN at the few rows of a decode step; its threads share the work as they
  come free, so a core lost for a while to the server or a client costs it less (oneDNN's
  shares are fixed before it starts).
- "panels": a float32 weight on a CPU with AVX2 or AVX-512, and a bfloat16 one with AVX2
  only, the engine's own GEMM (csrc/gemm.c: weights in panels of two vectors of columns,
  float32 or bfloat16, float32 sums; its threads share the work as they come free too),
  faster than oneDNN at few rows and level at many.
- "onednn": elsewhere on a CPU with oneDNN, its blocked layout
  (`torch.ops.mkldnn._reorder_linear_weight`) run by `torch.ops.mkldnn._linear_pointwise`,
  the pair inductor's CPU weight freezing emits, faster than `torch.mm` at few rows.
- "torch": everywhere else (CUDA, a torch without oneDNN, another dtype), plain `F.linear`.
Where oneDNN or the bfloat16 panels serve, one row of input (a decode step of one sequence)
goes to the engine's split-k GEMV instead (the float32 panels stream their packed weight as
fast at one row) (csrc/gemv.c, `OneRowLinear`): it streams the
model's own weights, in the loader's (in, out) layout, at about the memory bandwidth.
All give the same numbers up to float rounding (bench/RESULTS.md has the measurements, and
docs/performance.md why each kernel is chosen where it is).
"""

import ctypes
import functools

import torch
import torch.nn.functional as F

from engine.cpu import native_build

PACKED_DTYPES = (torch.float32, torch.bfloat16)
PACK_BATCH_HINT = 16  # rows oneDNN picks its blocked layout for; one layout serves every M
PANEL_DTYPES = {"AVX2": PACKED_DTYPES, "AVX512": (torch.float32,)}  # csrc/gemm.c's, by level
BF16_PANEL_WIDTH = 32  # output columns of one panel of csrc/gemm_bf16.c
GEMV_MAX_PARTS = 4  # csrc/gemv.c's MAX_PARTS
GEMV_WIDTH = 16  # each part's outputs a multiple of this (csrc/gemv.c's widest vector)


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


@functools.cache
def gemv_split_k():
    """csrc/gemv.c's gemv_split_k, or None where the library cannot be built."""
    try:
        gemv = native_build.library().gemv_split_k
    except native_build.KernelUnavailable:
        return None
    int_, i64, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    gemv.argtypes = [int_, i64, int_, ptr, ptr, ptr, ptr, ptr, ptr, int_]
    gemv.restype = int_
    return gemv


@functools.cache
def panel_gemm():
    """csrc/gemm.c's panel_gemm, or None where the library has none (no AVX2 and FMA) or
    cannot be built."""
    try:
        gemm = native_build.library().panel_gemm
    except (native_build.KernelUnavailable, AttributeError):
        return None
    int_, i64, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    gemm.argtypes = [int_, i64, i64, i64, ptr, i64, ptr, ptr, ptr, i64, ptr, int_]
    gemm.restype = None
    return gemm


@functools.cache
def panel_width() -> int:
    """Output columns in a panel of csrc/gemm.c as built here: 32 with AVX-512, 16 with AVX2
    (two vectors of float32)."""
    return native_build.library().panel_gemm_width()


@functools.cache
def panel_gemm_bf16():
    """csrc/gemm_bf16.c's panel_gemm_bf16, or None where the library has none (no AVX512_BF16)
    or cannot be built."""
    try:
        gemm = native_build.library().panel_gemm_bf16
    except (native_build.KernelUnavailable, AttributeError):
        return None
    int_, i64, ptr = ctypes.c_int, ctypes.c_int64, ctypes.c_void_p
    gemm.argtypes = [i64, i64, i64, ptr, i64, ptr, ptr, ptr, int_]
    gemm.restype = None
    return gemm


def has_amx() -> bool:
    """Whether the CPU has AMX tiles, where oneDNN's bfloat16 kernels use them."""
    return getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()


def backend(weight: torch.Tensor, dtype: torch.dtype | None = None) -> str:
    """Which kernel serves `weight` (out, in), or its copy in `dtype`: "bf16_panels",
    "panels", "onednn" or "torch". The bfloat16 panels where torch dispatches AVX-512 and the
    library has them (the CPU has AVX512_BF16), but no AMX: oneDNN's AMX kernels were not
    measured against them. The panels for float32 where torch dispatches AVX2 or AVX-512, and
    for bfloat16 weights (float32 sums) where AVX2 is the best: with AVX-512 those go to
    kernels with bfloat16 arithmetic."""
    dtype = dtype or weight.dtype
    if (
        torch.backends.cpu.get_cpu_capability() == "AVX512"
        and weight.device.type == "cpu"
        and dtype == torch.bfloat16
        and weight.shape[0] % BF16_PANEL_WIDTH == 0
        and weight.shape[1] % 2 == 0
        and panel_gemm_bf16() is not None
        and not has_amx()
    ):
        return "bf16_panels"
    if (
        weight.device.type == "cpu"
        and dtype in PANEL_DTYPES.get(torch.backends.cpu.get_cpu_capability(), ())
        and panel_gemm() is not None
        and weight.shape[0] % panel_width() == 0
    ):
        return "panels"
    return "onednn" if can_pack(weight.new_empty(0, dtype=dtype)) else "torch"


def pack_panels(weight: torch.Tensor) -> torch.Tensor:
    """(out, in) -> (out / w, in, w): panels of w = panel_width() columns, contiguous along
    k. In bfloat16 the w columns of one k go in the order 0, w/2, 1, w/2 + 1, ... (csrc/gemm.c's
    widen)."""
    width = panel_width()
    panels = weight.view(-1, width, weight.shape[1]).transpose(1, 2)  # (out/w, in, w)
    if weight.dtype == torch.bfloat16:
        panels = panels.unflatten(-1, (2, width // 2)).transpose(-1, -2).flatten(-2)
    return panels.contiguous()


def pack_bf16_panels(weight: torch.Tensor) -> torch.Tensor:
    """(out, in) -> (out / 32, in / 2, 32, 2): panels of 32 columns, each k pair's two weights
    of a column side by side (the operand layout of vdpbf16ps), contiguous along k."""
    out_features, in_features = weight.shape
    pairs = weight.view(out_features // BF16_PANEL_WIDTH, BF16_PANEL_WIDTH, in_features // 2, 2)
    return pairs.transpose(1, 2).contiguous()


class OneRowLinear:
    """y = x [W_0; W_1; ...]^T + bias (+ residual) for one row of x, on csrc/gemv.c, reading
    `linears`' own weights (not a copy: the row path adds no memory). `create` returns None
    where it cannot serve: no C library, a device or dtype it does not take, weights not in the
    loader's (in, out) layout (engine/loader.py's transpose_linear_weights), widths not a
    multiple of GEMV_WIDTH."""

    def __init__(self, weights: list[torch.Tensor]):
        self.weights = weights  # (in, out) each, contiguous: kept alive for the pointers
        self.in_features = weights[0].shape[0]
        self.out_features = sum(w.shape[1] for w in weights)
        self.dtype = weights[0].dtype
        self.bf16 = int(self.dtype == torch.bfloat16)
        self.pointers = (ctypes.c_void_p * len(weights))(*[w.data_ptr() for w in weights])
        self.widths = (ctypes.c_int64 * len(weights))(*[w.shape[1] for w in weights])

    @classmethod
    def create(cls, linears: list[torch.nn.Linear]) -> "OneRowLinear | None":
        weights = [m.weight.detach().t() for m in linears]  # (in, out) views
        first = weights[0]
        if (
            len(weights) > GEMV_MAX_PARTS
            or first.device.type != "cpu"
            or first.dtype not in PACKED_DTYPES
            or any(w.dtype != first.dtype or not w.is_contiguous() for w in weights)
            or any(w.shape[1] % GEMV_WIDTH for w in weights)
            or gemv_split_k() is None
        ):
            return None
        return cls(weights)

    def __call__(
        self, x: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x (1, in) in the weights' dtype, bias (out) likewise or None, residual (1, out)
        float32 or None -> (1, out)."""
        x = x.contiguous()
        if residual is not None:
            residual = residual.contiguous()
        y = x.new_empty(1, self.out_features)
        failed = gemv_split_k()(
            self.bf16,
            self.in_features,
            len(self.weights),
            self.pointers,
            self.widths,
            x.data_ptr(),
            None if bias is None else bias.data_ptr(),
            None if residual is None else residual.data_ptr(),
            y.data_ptr(),
            torch.get_num_threads(),
        )
        if failed:
            raise MemoryError(f"gemv_split_k: no memory for sums {self.out_features} wide")
        return y


class FusedLinear:
    """`linears` side by side: y = x @ [W_0; W_1; ...]^T + [b_0; b_1; ...], one call.

    The weights are copied (the model's own modules stay as they were, for `generate` and
    the transformers path); `pack=False` keeps the copy for `F.linear`. The one-row path
    (`OneRowLinear`) reads the modules' own weights, which the engine never changes.
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
        # bfloat16 where oneDNN has no bfloat16 kernels (AVX2) and the panels cannot serve (no
        # C compiler): oneDNN's float32 kernels on the exact upcast. A bf16 product is exact in
        # float32, and bf16 GEMMs accumulate in float32 too, so only the order of the sums
        # differs; torch's own bf16 matmul there is much slower. One row (a batch-1 decode)
        # reads the weight once: torch's bf16 GEMV on the bf16 copy reads half the bytes.
        self.upcast = (
            pack
            and weight.dtype == torch.bfloat16
            and backend(weight) == "torch"
            and backend(weight, torch.float32) != "torch"
        )
        if self.upcast:
            self.gemv_weight, self.gemv_bias = weight, bias
            weight = weight.float()
            bias = bias.float() if bias is not None else None
        self.bias = bias
        self.backend = backend(weight) if pack else "torch"
        if self.backend == "panels":
            self.weight = pack_panels(weight)
            self.bias = bias.float() if bias is not None else None  # the sums are float32
        elif self.backend == "bf16_panels":
            self.weight = pack_bf16_panels(weight)
            # added to the float32 sums; the one-row GEMV takes self.bias in bfloat16
            self.bias_f32 = bias.float() if bias is not None else None
        elif self.backend == "onednn":
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight, PACK_BATCH_HINT)
        else:
            self.weight = weight
        one_row = self.backend in ("onednn", "bf16_panels")
        self.one_row = OneRowLinear.create(linears) if one_row else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(T, in) -> (T, out)."""
        if self.upcast:
            if x.shape[0] == 1:
                return F.linear(x, self.gemv_weight, self.gemv_bias)
            return self._forward(x.float()).to(x.dtype)
        if self._one_row(x):
            return self.one_row(x, self.bias)
        return self._forward(x)

    def add(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """residual + self(x), fused into the matmul in float32. In bfloat16 the fused add
        would round once where transformers rounds twice (after the matmul, after the add),
        and bf16 greedy output is checked against transformers', so it is not fused there."""
        if self.backend != "torch" and residual.dtype == torch.float32:
            if self._one_row(x):
                return self.one_row(x, self.bias, residual)
            return self._forward(x, residual)
        return residual + self(x)

    def _one_row(self, x: torch.Tensor) -> bool:
        return self.one_row is not None and x.shape[0] == 1 and x.dtype == self.one_row.dtype

    def _forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if self.backend == "panels":
            if residual is not None and x.dtype != torch.float32:  # as the bfloat16 panels:
                return residual + self._panels(x, None)  # y rounded, then the float32 sum
            return self._panels(x, residual)
        if self.backend == "bf16_panels":
            y = self._bf16_panels(x)
            return y if residual is None else residual + y
        if self.backend == "onednn":
            if residual is None:
                return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
            return torch.ops.mkldnn._linear_pointwise.binary(
                x, residual, self.weight, self.bias, "add"
            )
        y = F.linear(x, self.weight, self.bias)
        return y if residual is None else residual + y

    def _panels(self, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        """Float32 in and out (a bfloat16 x is widened, y rounded back), float32 residual."""
        dtype = x.dtype
        x = x.float() if dtype != torch.float32 else x
        if x.stride(-1) != 1:
            x = x.contiguous()
        if residual is not None and residual.stride(-1) != 1:
            residual = residual.contiguous()
        y = x.new_empty(x.shape[0], self.out_features)
        panel_gemm()(
            int(self.weight.dtype == torch.bfloat16),
            *self._gemm_operands(x, self.bias),
            None if residual is None else residual.data_ptr(),
            0 if residual is None else residual.stride(0),
            y.data_ptr(),
            torch.get_num_threads(),
        )
        return y if dtype == torch.float32 else y.to(dtype)

    def _bf16_panels(self, x: torch.Tensor) -> torch.Tensor:
        """Bfloat16 in and out (another dtype is rounded to bfloat16 and back)."""
        dtype = x.dtype
        x = x.to(torch.bfloat16)
        if x.stride(-1) != 1 or x.stride(0) % 2:  # the kernel reads x's k pairs as 32 bits
            x = x.contiguous()
        y = x.new_empty(x.shape[0], self.out_features)
        panel_gemm_bf16()(
            *self._gemm_operands(x, self.bias_f32),
            y.data_ptr(),
            torch.get_num_threads(),
        )
        return y.to(dtype)

    def _gemm_operands(self, x: torch.Tensor, bias: torch.Tensor | None) -> tuple:
        """The panel GEMMs' M, N, K, x, x's row stride, the packed weight and the bias."""
        n, k = self.out_features, self.in_features
        bias_ptr = None if bias is None else bias.data_ptr()
        return x.shape[0], n, k, x.data_ptr(), x.stride(0), self.weight.data_ptr(), bias_ptr
