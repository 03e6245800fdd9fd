"""Modules the command line reads before anything heavy is imported.

The flags are built from `engine/config.py` (EngineConfig's fields) and from a few constants
of the driver. Importing them the usual way runs their packages' `__init__`: `engine` loads
torch first (engine/cpu/openmp.py) and `playground.driver` loads the engine, seconds before
`--help` could answer. `import_leaf` executes one module whose own imports are light under
stand-ins for those packages, then takes the stand-ins and everything loaded under them out of
`sys.modules` again: a later `import engine` loads the real package as always. The copy runs
the same source (EngineConfig's copy checks values exactly as the real class does); app.py
builds the real objects once the engine is imported.
"""

import importlib
import importlib.util
import sys
from types import ModuleType


def import_leaf(name: str) -> ModuleType:
    """Module `name`, without running the `__init__` of those of its packages that are not
    imported yet (the real module when its package is)."""
    package = name.rpartition(".")[0]
    if package in sys.modules:
        return importlib.import_module(name)
    before = set(sys.modules)
    try:
        _stand_in(package)
        return importlib.import_module(name)
    finally:
        for loaded in set(sys.modules) - before:
            del sys.modules[loaded]


def _stand_in(package: str) -> None:
    """An empty module for `package` (and its unimported parents) that finds submodules in
    the package's folder."""
    parent = package.rpartition(".")[0]
    if parent and parent not in sys.modules:
        _stand_in(parent)
    spec = importlib.util.find_spec(package)
    module = ModuleType(package)
    module.__path__ = list(spec.submodule_search_locations)
    sys.modules[package] = module
