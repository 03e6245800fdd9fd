"""gradio imported after the playground skips its type-stub writer, and still works."""

import subprocess
import sys
from pathlib import Path

from playground import gradio_import

ROOT = Path(__file__).resolve().parents[2]
WRITERS = """
from gradio import blocks_events, component_meta
print(component_meta.create_or_modify_pyi.__name__, blocks_events.create_or_modify_pyi.__name__)
"""


def fresh_python(code: str) -> str:
    """stdout of `code` in a new interpreter (gradio not imported yet)."""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.split()


def test_gradio_after_the_playground_skips_the_stub_writer_and_builds_a_board():
    board = """
import gradio as gr
with gr.Blocks() as demo:
    box = gr.Textbox()
    box.change(lambda text: text.upper(), box, box)
print(len(demo.config["components"]), demo.fns[0].fn("ok"))
"""
    out = fresh_python("import playground\n" + WRITERS + board)
    assert out[:2] == ["_no_stubs", "_no_stubs"]
    assert int(out[2]) >= 1 and out[3] == "OK"


def test_gradio_alone_keeps_its_stub_writer():
    assert fresh_python("import gradio\n" + WRITERS) == ["create_or_modify_pyi"] * 2


def test_too_late_once_gradio_is_loaded():
    import gradio  # noqa: F401 - loaded in this process

    before = list(sys.meta_path)
    gradio_import.skip_stub_writer()
    assert sys.meta_path == before
