"""Imports run one way: commands -> recipes/experiments -> (tasks, serve, embeddings) -> features -> model -> leaves.

Every ``import`` in src/bertkit, function-local ones included, is read with ``ast``; a module may import from its
own layer or a lower one, never a higher one. A new top-level module or package must be given a layer here."""

from __future__ import annotations

import ast
from pathlib import Path

import bertkit

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "bertkit"

# lowest first; a top-level module or package of bertkit -> its layer
LAYERS: list[tuple[str, set[str]]] = [
    # small utilities every layer uses; ``bertkit`` itself only names its lazy exports (resolved below)
    ("leaves", {"__init__", "console", "errors", "files", "options", "outputs", "precision", "ops"}),
    # the models, their files and what they read: configs, checkpoints, tokenizer, corpus and task readers
    (
        "model",
        {
            "config",
            "modeling",
            "modeling_modernbert",
            "variants",  # an architecture's variants, each a small modeling module (bertkit/variants/__init__.py)
            "models",
            "modeldir",  # a model directory read once (config, architecture, head, weights, tokenizer)
            "checkpoint",
            "resize",
            "tf_checkpoint",
            "export",
            "quantize",
            "tokenization",
            "data",
        },
    ),
    # what runs a model: the inference runtime (forward pass and batch loop), the Encoder and its batches, the
    # sentence-transformers format, the training core
    ("features", {"features", "runtime", "batches", "st_format", "training"}),
    ("tasks, serve, embeddings", {"tasks", "pipelines", "serve", "embeddings"}),
    # one layer in the issue's order, split so that the pair points one way too: experiments drive recipes' runs
    ("recipes", {"recipes"}),
    ("experiments", {"experiments"}),
    ("commands", {"commands", "cli"}),
]
RANK = {unit: rank for rank, (_name, units) in enumerate(LAYERS) for unit in units}

# (importing file relative to src/bertkit, imported module) pairs allowed against the order, each with its reason.
# Empty: keep it so. An entry needs a reason a reviewer accepts.
ALLOWED: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imported(path: Path) -> list[tuple[int, str]]:
    """(line, dotted bertkit module) of every import in ``path``, at any depth."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                dotted = f"{module}.{alias.name}"
                if _is_module(dotted):
                    found.append((node.lineno, dotted))
                elif module == "bertkit" and alias.name in bertkit._EXPORTS:  # a lazy export: its real module
                    found.append((node.lineno, bertkit._EXPORTS[alias.name]))
                else:
                    found.append((node.lineno, module))
    return [(line, m) for line, m in found if m == "bertkit" or m.startswith("bertkit.")]


def _unit(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_module_has_a_layer():
    units = {p.stem for p in PACKAGE.glob("*.py")} | {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    missing = sorted(units - set(RANK))
    assert not missing, f"give these a layer in LAYERS: {missing}"


def test_imports_point_down():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        here = _unit(_module_name(path))
        for line, module in _imported(path):
            there = _unit(module)
            if RANK[there] > RANK[here] and (rel, module) not in ALLOWED:
                wrong.append(f"{rel}:{line} imports {module} ({LAYERS[RANK[here]][0]} -> {LAYERS[RANK[there]][0]})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_check_sees_function_local_and_lazy_imports(tmp_path, monkeypatch):
    """The parser itself: a function-local import and a lazy export are both found (so the test above can fail)."""
    source = PACKAGE / "pipelines" / "loading.py"
    found = dict((m, line) for line, m in _imported(source))
    assert "bertkit.tasks" in found  # only its function-local imports name it
    text = "def f():\n    from bertkit.commands import finetune\n    from bertkit import BertModel\n"
    fake = tmp_path / "bertkit" / "ops.py"
    fake.parent.mkdir()
    fake.write_text(text)
    monkeypatch.setattr(f"{__name__}.SRC", tmp_path)
    monkeypatch.setattr(f"{__name__}._is_module", lambda dotted: dotted == "bertkit.commands.finetune")
    assert [m for _line, m in _imported(fake)] == ["bertkit.commands.finetune", "bertkit.modeling"]


def command_imports(paths) -> list[str]:
    """``file:line imports module`` for each import of a ``bertkit.commands`` module (or of the package) by a file
    other than cli.py."""
    return [
        f"{path.relative_to(PACKAGE).as_posix()}:{line} imports {module}"
        for path in paths
        if path.name != "cli.py" or path.parent != PACKAGE
        for line, module in _imported(path)
        if module == "bertkit.commands" or module.startswith("bertkit.commands.")
    ]


def test_only_cli_imports_a_command(tmp_path, monkeypatch):
    """Commands are the edge (issue 52): a command imports no other command and no library module imports one;
    what two commands share lives in a library module. cli.py names its commands by string."""
    assert command_imports(sorted(PACKAGE.rglob("*.py"))) == []
    # the check sees a command importing another, function-local or not
    fake = tmp_path / "bertkit" / "commands" / "predict.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        "from bertkit.commands.evaluate import configure\ndef run():\n    from bertkit.commands import glue\n"
    )
    monkeypatch.setattr(f"{__name__}.SRC", tmp_path)
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "bertkit")
    monkeypatch.setattr(f"{__name__}._is_module", lambda dotted: dotted.count(".") == 2)
    assert command_imports([fake]) == [
        "commands/predict.py:1 imports bertkit.commands.evaluate",
        "commands/predict.py:3 imports bertkit.commands.glue",
    ]


def _top_level_imports(path: Path) -> set[str]:
    """The top-level packages ``path`` imports, at any depth (``fastapi`` for ``from fastapi.responses import X``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_serving_core_imports_no_web_framework():
    """serve/core (checks, limits, service, batching) is TEI's ``core``: FastAPI and Starlette stay in serve/http."""
    core = sorted((PACKAGE / "serve" / "core").glob("*.py"))
    assert len(core) >= 4
    wrong = {p.name: sorted(_top_level_imports(p) & {"fastapi", "starlette"}) for p in core}
    assert {name: found for name, found in wrong.items() if found} == {}
    assert "fastapi" in _top_level_imports(PACKAGE / "serve" / "http" / "routing.py")  # the check sees imports


def test_no_prometheus_text_is_written_by_hand():
    """/metrics comes from prometheus_client: no exposition-format line (``# TYPE``, ``# HELP``) is spelled in src."""
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "# TYPE " in node.value or "# HELP " in node.value:
                    wrong.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert wrong == []
    assert "prometheus_client" in _top_level_imports(PACKAGE / "serve" / "http" / "metrics.py")


def import_graph() -> dict[str, set[str]]:
    """module -> the bertkit modules it imports, function-local and TYPE_CHECKING imports included (a name
    imported from a package resolves to the package's module)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        me = _module_name(path)
        deps = set()
        for _line, module in _imported(path):
            while module and not _is_module(module):
                module = module.rpartition(".")[0]
            if module and module != me:
                deps.add(module)
        graph[me] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    """No two modules import each other, directly or round a longer circle, lazy imports included."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]  # the finder finds one
    assert circles(import_graph()) == []


def test_task_readers_import_nothing_of_the_pretraining_pipeline():
    """data/ is two subsystems joined one way: the corpus pipeline reads task files with the task readers
    (data/pretraining/task_text.py), and the task readers, shared by tasks/ and embeddings/, need no corpus code."""
    graph = import_graph()
    readers = {m for m in graph if m.startswith("bertkit.data.tasks")}
    assert len(readers) >= 6  # the package and its readers: the check sees them
    wrong = {m: sorted(d for d in graph[m] if d.startswith("bertkit.data.pretraining")) for m in sorted(readers)}
    assert {m: found for m, found in wrong.items() if found} == {}
    assert "bertkit.data.tasks.readers" in graph["bertkit.data.pretraining.task_text"]  # the one way it runs


def _layout_names(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of ``tree``, docstrings aside, that name pre-training's data directories."""
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in prose
        if n.value == "data" or "shards" in n.value
    ]


def test_the_training_core_imports_nothing_of_a_recipe():
    """training/ is the generic core every recipe uses: none of its modules imports a recipe, the pre-training
    data pipeline (data/pretraining), or a pre-training error type, lazy imports included; nor does its code name
    pre-training's directory layout (its ``data`` and ``data/shards``: the recipe passes what it prepares)."""
    core = sorted((PACKAGE / "training").glob("*.py"))
    assert len(core) >= 8  # the check sees the package
    wrong = []
    for path in core:
        for line, module in _imported(path):
            if module.startswith(("bertkit.recipes", "bertkit.data.pretraining")):
                wrong.append(f"training/{path.name}:{line} imports {module}")
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any(a.name == "PretrainError" for a in node.names):
                wrong.append(f"training/{path.name}:{node.lineno} imports PretrainError")
        wrong += [f"training/{path.name}:{n.lineno} names {n.value!r}" for n in _layout_names(tree)]
    assert wrong == []
    fake = ast.parse('"""data"""\nrun.clear(keep=("data",), sub="data/shards")')
    assert sorted(n.value for n in _layout_names(fake)) == [
        "data",
        "data/shards",
    ]  # what the layout check reads (a docstring is prose, not a path)
    fake = "from bertkit.errors import PretrainError\nfrom bertkit.data.pretraining.feed import Feed\n"
    found = [n for n in ast.walk(ast.parse(fake)) if isinstance(n, ast.ImportFrom)]
    assert [a.name for n in found for a in n.names] == ["PretrainError", "Feed"]  # what the check reads


def test_every_name_the_docs_import_from_bertkit_is_exported():
    """``from bertkit import NAME`` in the README and docs/ works for every NAME they show (``load_pipeline``, the
    inference entry point, included)."""
    import re

    root = SRC.parent
    shown = set()
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for names in re.findall(r"^\s*from bertkit import ([\w, ]+)$", doc.read_text(encoding="utf-8"), re.M):
            shown.update(n.strip() for n in names.split(","))
    assert "load_pipeline" in shown and "Encoder" in shown
    assert sorted(n for n in shown if n not in bertkit._EXPORTS) == []
    assert callable(bertkit.load_pipeline)
