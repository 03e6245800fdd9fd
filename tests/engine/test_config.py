"""EngineConfig: defaults and validation (every bad value names its field)."""

import pytest

from engine.config import EngineConfig


def test_defaults_match_the_contract():
    c = EngineConfig()
    assert c.max_num_seqs == 32
    assert c.max_num_batched_tokens == 512
    assert c.block_size == 16
    assert c.num_kv_blocks is None
    assert c.max_model_len is None
    assert c.batching == "continuous"
    assert c.scheduling_policy == "fcfs"
    assert c.kv_backend == "paged"
    assert c.enable_chunked_prefill is True
    assert c.enable_prefix_caching is True
    assert c.max_waiting == 1024
    assert c.torch_compile is False
    assert c.model_impl == "auto"
    assert c.attention_backend == "auto"


def test_field_names_are_the_contract_names():
    assert EngineConfig.field_names() == {
        "max_num_seqs", "max_num_batched_tokens", "block_size", "num_kv_blocks",
        "max_model_len", "batching", "scheduling_policy", "kv_backend", "enable_chunked_prefill",
        "enable_prefix_caching", "max_waiting", "torch_compile", "model_impl", "attention_backend",
    }  # fmt: skip


def test_small_valid_config_as_tests_use_it():
    c = EngineConfig(
        max_num_seqs=1, max_num_batched_tokens=1, block_size=4, num_kv_blocks=1,
        max_model_len=2, batching="static", scheduling_policy="priority", kv_backend="hf_cache",
        enable_chunked_prefill=False, enable_prefix_caching=False, max_waiting=1,
    )  # fmt: skip
    assert (c.block_size, c.num_kv_blocks, c.max_model_len) == (4, 1, 2)
    assert (c.batching, c.scheduling_policy, c.kv_backend) == ("static", "priority", "hf_cache")


BAD_INTS = [0, -1, -16, True, False, 1.0, 4.5, "4", None]


@pytest.mark.parametrize("name", ["max_num_seqs", "block_size", "max_waiting"])
@pytest.mark.parametrize("value", BAD_INTS)
def test_positive_int_fields_refuse_bad_values(name, value):
    if name == "max_waiting" and value is None:  # no limit, as vLLM's max_num_queued_reqs
        assert EngineConfig(max_waiting=None).max_waiting is None
        return
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        EngineConfig(**{name: value})


@pytest.mark.parametrize("value", BAD_INTS)
def test_max_num_batched_tokens_refuses_bad_values(value):
    with pytest.raises(ValueError, match=r"\bmax_num_batched_tokens\b"):
        EngineConfig(max_num_seqs=1, max_num_batched_tokens=value)


@pytest.mark.parametrize("value", [0, -1, True, False, 2.0, "8"])
def test_num_kv_blocks_refuses_bad_values(value):
    with pytest.raises(ValueError, match=r"\bnum_kv_blocks\b"):
        EngineConfig(num_kv_blocks=value)


@pytest.mark.parametrize("value", [1, 0, -5, True, 64.0, "64"])
def test_max_model_len_refuses_bad_values(value):
    with pytest.raises(ValueError, match=r"\bmax_model_len\b"):
        EngineConfig(max_model_len=value)


def test_error_message_shows_the_bad_value():
    with pytest.raises(ValueError, match=r"block_size.*-3"):
        EngineConfig(block_size=-3)


def test_batched_tokens_below_max_num_seqs_refused():
    with pytest.raises(ValueError, match=r"\bmax_num_batched_tokens\b") as info:
        EngineConfig(max_num_seqs=8, max_num_batched_tokens=7)
    assert "max_num_seqs" in str(info.value)
    EngineConfig(max_num_seqs=8, max_num_batched_tokens=8)  # equal is fine


@pytest.mark.parametrize("value", ["dynamic", "Continuous", "", None, 1])
def test_batching_refuses_unknown(value):
    with pytest.raises(ValueError, match=r"^batching\b"):
        EngineConfig(batching=value)


@pytest.mark.parametrize("value", ["FCFS", "lifo", "", None, 1, "continuous", "static"])
def test_scheduling_policy_refuses_unknown(value):
    with pytest.raises(ValueError, match=r"^scheduling_policy\b"):
        EngineConfig(scheduling_policy=value)


def test_a_batching_mode_given_as_scheduling_policy_points_to_batching():
    with pytest.raises(ValueError, match=r"is set by batching="):
        EngineConfig(scheduling_policy="static")


@pytest.mark.parametrize("value", ["flash", "Paged", "", None, 0])
def test_kv_backend_refuses_unknown(value):
    with pytest.raises(ValueError, match=r"\bkv_backend\b"):
        EngineConfig(kv_backend=value)


@pytest.mark.parametrize(
    "name", ["enable_chunked_prefill", "enable_prefix_caching", "torch_compile"]
)
@pytest.mark.parametrize("value", [1, 0, "true", "False", None])
def test_bool_fields_refuse_non_bools(name, value):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        EngineConfig(**{name: value})


@pytest.mark.parametrize("value", ["flash", "SDPA", "", None, 1])
def test_attention_backend_refuses_unknown(value):
    with pytest.raises(ValueError, match=r"\battention_backend\b"):
        EngineConfig(attention_backend=value)
