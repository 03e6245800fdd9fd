"""Small component helpers shared by the board's sections, and the page's assets."""

from pathlib import Path

import gradio as gr
from gradio.components.plot import PlotData

ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"


def html(value: str = "", js_on_load: str | None = None, **kwargs) -> gr.HTML:
    """gr.HTML without the click handler Gradio attaches on every update by default (or with
    a script of our own, run once when the component mounts)."""
    return gr.HTML(value, js_on_load=js_on_load, **kwargs)


def plot(key: str, first: dict[str, str], **kwargs) -> gr.Plot:
    """A chart's place on the page, `#pg-plot-<key>`. gr.Plot draws only its first figure (and
    loads plotly.js); later ones come as JSON through assets/charts.js, which draws in place."""
    figure = PlotData(type="plotly", plot=first.get(key, '{"data": [], "layout": {}}'))
    return gr.Plot(figure, show_label=False, elem_id=f"pg-plot-{key}", **kwargs)


def load_asset(name: str) -> str:
    """A file of assets/ as text (the page's style.css, the charts' charts.js)."""
    return (ASSETS / name).read_text(encoding="utf-8")
