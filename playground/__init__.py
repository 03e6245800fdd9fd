"""The playground: the driver thread, simulated users, scenarios, charts and the Gradio board.

Only `app.py` wires it to the engine; engine/ never imports anything from here.
"""

from playground import gradio_import  # noqa: F401 - first: gradio then skips its stub writer
