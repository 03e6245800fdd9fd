"""bench_matmuls.py times each kernel on the same product: each gives F.linear's numbers."""

import pytest
import torch

from bench import bench_matmuls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_kernel_it_times_computes_the_same_product(dtype):
    kernels = bench_matmuls.kernels(dtype)
    # oneDNN packs float32 on every x86 CPU; bfloat16 only where it has its kernels (AVX-512)
    if dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert "onednn" in kernels
    torch.manual_seed(0)
    weight, x = torch.randn(96, 64, dtype=dtype), torch.randn(5, 64, dtype=dtype)
    want = (x.float() @ weight.float().t()).to(dtype)
    tolerance = {} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-4}
    for name in kernels:
        matmul = bench_matmuls.fused(weight, name)
        assert matmul.backend == name
        torch.testing.assert_close(matmul(x).to(dtype), want, **tolerance)
