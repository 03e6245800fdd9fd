"""Importing gradio without rewriting its type stubs.

As gradio is imported, its ComponentMeta calls `create_or_modify_pyi` for each of its ~80
component classes (and BlocksMeta once more): the function re-reads and parses each
component's source module to compare, and rewrite if it differs, the `.pyi` stub beside it,
an editor's aid that nothing reads at run time. On 2 cores that is 1.3-2.1 s of a 3.3-4.2 s
`import gradio`, a fifth of the playground's start. `skip_stub_writer` makes it a no-op for
this process: it swaps the function as gradio's module is loaded, before the components are
defined (gradio's own modules take it from there by name). Where gradio has no such function
any more, nothing changes. Importing this module calls it; `playground/__init__.py` imports
it first, so every entry point that imports the playground before gradio gets it.
"""

import importlib.abc
import importlib.machinery
import sys

MODULE, FUNCTION = "gradio.component_meta", "create_or_modify_pyi"


def skip_stub_writer() -> None:
    """Make gradio's stub writer a no-op when gradio is imported (too late if it is already)."""
    if MODULE in sys.modules or any(isinstance(f, _StubWriterOff) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _StubWriterOff())


def _no_stubs(*args, **kwargs) -> None:
    """gradio's create_or_modify_pyi, skipped."""


class _StubWriterOff(importlib.abc.MetaPathFinder):
    """Finds gradio.component_meta as Python would, and swaps the function once it ran."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)  # once is enough
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            if hasattr(module, FUNCTION):
                setattr(module, FUNCTION, _no_stubs)

        spec.loader.exec_module = exec_module
        return spec


skip_stub_writer()
