"""Imports go downward only (docs/ARCHITECTURE.md, "Layers"). Each rule lists the files that
break it and what they import."""

import ast
from pathlib import Path

from tests.source_tree import ROOT, rel, statements, tree

# The core modules that use the CPU speed layer, and only through the package's own names.
CPU_SEAM_USERS = {"engine/__init__.py", "engine/llm_engine.py", "engine/model_runner.py",
                  "engine/sampler.py"}  # fmt: skip
# What the CPU layer may take from the core: the attention it plugs into, the field errors.
CPU_LAYER_USES = ("engine.attention", "engine.validation")
# Where the web frameworks may be imported.
GRADIO_MODULES = ("playground/ui/", "playground/board/views.py", "playground/gradio_import.py")
HTTP_MODULES = ("playground/server/",)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every absolute import in `path`; `import x.y`
    gives ("x.y", [])."""
    found = []
    for node in statements(tree(path)):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _targets(module: str, names: list[str]) -> list[str]:
    """The modules an import may load: `from engine import cpu` may load engine.cpu."""
    return [module] + [f"{module}.{name}" for name in names]


def _offenders(files, forbidden) -> list[str]:
    return sorted(
        f"{rel(path)} imports {module}"
        for path in files
        for module, names in _imports(path)
        if any(forbidden(path, target) for target in _targets(module, names))
    )


def _py(*parts: str) -> list[Path]:
    return sorted(ROOT.joinpath(*parts).rglob("*.py"))


def test_the_engine_never_imports_the_playground_the_app_or_gradio():
    def forbidden(_, target):
        return any(_under(target, p) for p in ("playground", "app", "gradio", "fastapi"))

    assert not _offenders(_py("engine"), forbidden)


def test_the_engine_core_reaches_the_cpu_layer_only_through_its_package():
    exported = _cpu_exports()
    bad = []
    for path in sorted((ROOT / "engine").glob("*.py")):  # the core, not engine/cpu/
        for module, names in _imports(path):
            uses = [t for t in _targets(module, names) if _under(t, "engine.cpu")]
            if not uses:
                continue
            through_seam = module == "engine" or (module == "engine.cpu" and set(names) <= exported)
            if rel(path) not in CPU_SEAM_USERS or not through_seam:
                bad.append(f"{rel(path)} imports {module} {names}")
    assert not bad, f"only {sorted(CPU_SEAM_USERS)} use engine.cpu, by its own names: {bad}"


def _cpu_exports() -> set[str]:
    init = ast.parse((ROOT / "engine" / "cpu" / "__init__.py").read_text())
    for node in init.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return set(ast.literal_eval(node.value))
    raise AssertionError("engine/cpu/__init__.py has no __all__")


def test_the_cpu_layer_builds_only_on_the_cores_attention():
    def forbidden(_, target):
        return (
            _under(target, "engine")
            and target != "engine"
            and not _under(target, "engine.cpu")
            and not any(_under(target, allowed) for allowed in CPU_LAYER_USES)
        )

    assert not _offenders(_py("engine", "cpu"), forbidden)


def test_the_playground_leaves_the_cpu_layer_to_the_engine():
    assert not _offenders(_py("playground"), lambda _, t: _under(t, "engine.cpu"))


def test_only_the_app_imports_the_board_ui():
    def forbidden(path, target):
        return _under(target, "playground.ui") and not rel(path).startswith("playground/ui/")

    assert not _offenders(_py("playground"), forbidden)


def test_handles_and_workload_import_nothing_else_of_the_playground():
    files = [ROOT / "playground" / "handles.py", *_py("playground", "workload")]

    def forbidden(path, target):
        own = "playground.handles" if path.name == "handles.py" else "playground.workload"
        return _under(target, "playground") and target != "playground" and not _under(target, own)

    assert not _offenders(files, forbidden)


def test_gradio_and_the_http_framework_stay_in_their_packages():
    def forbidden(path, target):
        name = rel(path)
        if _under(target, "gradio"):
            return not name.startswith(GRADIO_MODULES)
        if _under(target, "fastapi") or _under(target, "starlette"):
            return not name.startswith(HTTP_MODULES)
        return False

    assert not _offenders(_py("playground"), forbidden)


def test_the_rules_catch_a_forbidden_import(tmp_path):
    bad = tmp_path / "engine" / "x.py"
    bad.parent.mkdir()
    bad.write_text("from playground.board import charts\n")
    assert _imports(bad) == [("playground.board", ["charts"])]
    assert _under(_targets("playground.board", ["charts"])[1], "playground")
