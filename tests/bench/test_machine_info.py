"""The machine facts every benchmark records: the CPU model and the ISA flags that decide
which matmul and attention kernels run (AMX or not moved the bf16 ratio against vLLM by 30 %)."""

from bench.common import MATMUL_FLAGS, cpu_facts, machine_info

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse avx2
"""

EPYC = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni
"""


def test_cpu_facts_reads_the_first_core_and_keeps_only_the_matmul_flags_in_order():
    assert cpu_facts(XEON) == (
        "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
        ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"],
    )
    assert cpu_facts(EPYC) == ("AMD EPYC", ["avx2", "avx512f", "avx512_bf16"])


def test_cpu_facts_of_a_cpuinfo_without_those_lines():
    assert cpu_facts("processor\t: 0\nBogoMIPS\t: 50.00\n") == ("", [])


def test_machine_info_names_this_machine():
    info = machine_info()
    assert info["cores"] >= 1 and info["torch_threads"] >= 1
    assert set(info["cpu_flags"]) <= set(MATMUL_FLAGS)
    with open("/proc/cpuinfo") as f:
        text = f.read()
    if "model name" in text:
        assert info["cpu"] and info["cpu"] in text
