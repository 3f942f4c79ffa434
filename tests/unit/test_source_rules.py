"""The house's size and layering targets (issue 21), checked by reading src/: so the CI enforces them.

- no function longer than 100 logical lines, no file longer than 750 (the model files excepted), counted as
  logical lines so that the rules do not depend on how `ruff format` wraps a call;
- every file of a recipe (recipes/, embeddings/recipe.py) at most 350 lines, as written;
- no argparse private names (a parser upgrade must not break the CLI);
- no recipe calls clip_grad_norm_ / unscale_ or creates a GradScaler itself: training/ does, once;
- no run of 6 lines written twice in src/, but in the model files (their BertFor* / ModernBertFor* heads are alike
  by design: one readable file per architecture). The `duplicates` tool also finds pairs alike in shape only; the
  ones it lists today are declarations (the two config dataclasses' fields, the command table, task_config dicts,
  signatures, conlleval's two rules), listed in the closing note of issue 21.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "bertkit"
MAX_FUNCTION, MAX_FILE = 100, 750
# files allowed over MAX_FILE lines, each with the reason
LONG_FILES = {
    "modeling.py": "THE model: one readable file, top to bottom (docs/design.md, habit 1)",
    # a second architecture gets its own one-file model, as docs/design.md says (habit 1 and "Where things live")
    "modeling_modernbert.py": "ModernBERT's one modeling file: the same reason as modeling.py",
}
ARGPARSE_PRIVATE = (
    "_actions",
    "_add_action",
    "_StoreTrueAction",
    "_StoreFalseAction",
    "_StoreConstAction",
    "_action_groups",
    "_negative_number_matcher",
    "_option_string_actions",
    "_get_optional_actions",
)


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line of code: a statement continued over several physical lines
    inside brackets is one, with its whitespace collapsed, so the rules below do not depend on how ``ruff format``
    wraps a call. Comments and blank lines are left out."""
    out, parts, start = [], [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if tok.type == tokenize.NEWLINE:
            if parts:
                out.append((start, " ".join(parts)))
            parts, start = [], None
            continue
        if start is None:
            start = tok.start[0]
        parts.append(tok.string)
    return out


def test_no_file_over_750_lines_except_the_model_files():
    long = {
        str(p.relative_to(SRC)): n
        for p in _sources()
        if (n := len(logical_lines(p.read_text(encoding="utf-8")))) > MAX_FILE
    }
    assert set(long) <= set(LONG_FILES), {k: v for k, v in long.items() if k not in LONG_FILES}


MAX_RECIPE_FILE = 350  # issue 34: a recipe reads top to bottom; what every recipe repeats lives in training/


def _recipe_files() -> list[Path]:
    return [*sorted((SRC / "recipes").rglob("*.py")), SRC / "embeddings" / "recipe.py"]


def test_every_recipe_file_is_at_most_350_lines():
    assert len(_recipe_files()) > 5
    long = {str(p.relative_to(SRC)): n for p in _recipe_files() if (n := p.read_text().count("\n")) > MAX_RECIPE_FILE}
    assert not long


def _function_length(lines: list[tuple[int, str]], node: ast.AST) -> int:
    return sum(1 for n, _ in lines if node.lineno <= n <= node.end_lineno)


def test_no_function_over_100_lines():
    long = []
    for p in _sources():
        text = p.read_text(encoding="utf-8")
        lines = logical_lines(text)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = _function_length(lines, node)
                if length > MAX_FUNCTION:
                    long.append(f"{p.relative_to(SRC)}:{node.lineno} {node.name} ({length} lines)")
    assert not long


def test_no_argparse_private_names():
    pattern = re.compile(r"\.(" + "|".join(ARGPARSE_PRIVATE) + r")\b")
    found = [
        f"{p.relative_to(SRC)}:{i}: {line.strip()}"
        for p in _sources()
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found


def test_recipes_leave_the_optimizer_step_to_the_training_core():
    recipes = [SRC / "recipes" / "pretrain" / "recipe.py", SRC / "recipes" / "finetune.py"]
    recipes.append(SRC / "embeddings" / "recipe.py")
    pattern = re.compile(r"clip_grad_norm_|\.unscale_\(|GradScaler\(")
    found = [
        f"{p.relative_to(SRC)}:{i}"
        for p in recipes
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found


def test_the_rules_catch_what_they_name(tmp_path):
    """The checks above see a long function and a private name when there is one (they are not vacuous)."""
    body = "\n".join(f"    x{i} = f(\n        {i},\n    )" for i in range(MAX_FUNCTION + 1))
    text = f"def f():\n{body}\n"
    fn = ast.parse(text).body[0]
    assert _function_length(logical_lines(text), fn) == MAX_FUNCTION + 2  # the def, then one per wrapped call
    pattern = re.compile(r"\.(" + "|".join(ARGPARSE_PRIVATE) + r")\b")
    assert pattern.search("groups = {g.title: g for g in parser._action_groups}")
    assert not pattern.search("parser.add_argument_group('x')")


MODEL_FILES = {"modeling.py", "modeling_modernbert.py"}
RUN = 6


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of the lines that carry code: no imports, blank lines or comments."""
    imports = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(range(node.lineno, node.end_lineno + 1))
    return [(i, s) for i, s in logical_lines(text) if i not in imports]


def duplicate_runs(sources: dict[str, str], allowed: set[str] = frozenset()) -> list[str]:
    """Places where RUN consecutive code lines stand again elsewhere, to the letter, except between two files of
    ``allowed``."""
    seen: dict[tuple[str, ...], tuple[str, int]] = {}
    found = []
    for name, text in sorted(sources.items()):
        lines = _code_lines(text)
        last = {}  # a run's repeats within a long duplicate are one finding
        for k in range(len(lines) - RUN + 1):
            window = tuple(s for _, s in lines[k : k + RUN])
            line = lines[k][0]
            if window not in seen:
                seen[window] = (name, line)
                continue
            other, other_line = seen[window]
            if (other == name and other_line == line) or (other in allowed and name in allowed):
                continue
            if last.get(other) == k - 1:
                last[other] = k
                continue
            last[other] = k
            found.append(f"{name}:{line} repeats {other}:{other_line}")
    return found


def test_the_duplicate_finder_finds_a_copied_block():
    block = "\n".join(f"x{i} = compute({i}, y)" for i in range(7))
    body = "\n".join("    " + line for line in block.splitlines())
    sources = {"a.py": "def f():\n" + body, "b.py": "z = 1\n" + block + "\nw = 2", "c.py": block[:40]}
    assert duplicate_runs(sources) == ["b.py:2 repeats a.py:2"]
    assert duplicate_runs(sources, allowed={"a.py", "b.py"}) == []


def test_no_code_written_twice_outside_the_model_files():
    sources = {str(p.relative_to(SRC)): p.read_text(encoding="utf-8") for p in _sources()}
    assert duplicate_runs(sources, allowed=MODEL_FILES) == []


def test_every_test_file_is_in_the_tests_readme():
    """tests/README.md's table names every test file (what each covers, so no behaviour is tested twice at one
    level), and nothing that is gone."""
    tests = SRC.parents[1] / "tests"
    table = set(
        re.findall(r"^\| (\w+) \| `(test_\w+\.py)` \|", (tests / "README.md").read_text(encoding="utf-8"), re.M)
    )
    files = {(p.parent.name, p.name) for p in tests.glob("*/test_*.py")}
    assert files == table, {"missing": sorted(files - table), "gone": sorted(table - files)}


# --------------------------------------------------------------------------------------------- the registry

# the files that may ask "which architecture is this?": the registry, the configs and the modeling files, the
# variants' modeling modules and their transformers code (bertkit/variants/__init__.py)
ARCHITECTURE_FILES = {"models.py", "config.py", "modeling.py", "modeling_modernbert.py"}
ARCHITECTURE_DIRS = ("variants/", "resources/remote_code/")


def architecture_asks(text: str, names: set[str], classes: set[str]) -> list[int]:
    """Lines that ask which architecture a model is: an ``isinstance`` on a class of an architecture other than the
    default one (``classes``, or any ``ModernBert*``), a comparison of a ``model_type`` (or of the registry's
    ``DEFAULT``) with anything but a string that names no architecture, or a string that is an architecture's name
    (``names``: ``"bert"``, ``"modernbert"``, a hard-coded list of them) other than a ``base_model_prefix``."""

    def name(node: ast.AST) -> str:
        return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""

    tree = ast.parse(text)
    prefixes = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(name(t) == "base_model_prefix" for t in node.targets)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and name(node.func) == "isinstance" and len(node.args) == 2:
            if any(name(n) in classes or name(n).startswith("ModernBert") for n in ast.walk(node.args[1])):
                found.append(node.lineno)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            other_strings = [o for o in operands if isinstance(o, ast.Constant) and o.value not in names]
            if any(name(o) in ("model_type", "DEFAULT") for o in operands) and not other_strings:
                found.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value in names and id(node) not in prefixes:
            found.append(node.lineno)
    return sorted(set(found))


def _registry_names() -> tuple[set[str], set[str]]:
    from bertkit import models

    others = [a for a in models.REGISTRY.values() if a.model_type != models.DEFAULT]
    return set(models.REGISTRY), {n for a in others for n in (*a.class_names(), a.config_name)}


def test_only_the_registry_the_configs_and_the_modeling_files_ask_which_architecture():
    names, classes = _registry_names()
    allowed = ARCHITECTURE_FILES
    found = [
        f"{rel}:{line}"
        for p in _sources()
        if (rel := p.relative_to(SRC).as_posix()) not in allowed and not rel.startswith(ARCHITECTURE_DIRS)
        for line in architecture_asks(p.read_text(encoding="utf-8"), names, classes)
    ]
    assert not found
    assert all((SRC / name).is_file() for name in allowed)  # no stale exemption
    assert all((SRC / name).is_dir() for name in ARCHITECTURE_DIRS)


def test_the_architecture_rule_sees_each_kind_of_ask():
    names, classes = _registry_names()
    asks = {
        'if data.get("model_type") == "modernbert": pass',
        "if arch.model_type != models.DEFAULT: pass",
        "if config.model_type == other.model_type: pass",
        "ok = isinstance(bert, ModernBertModel)",
        "ok = isinstance(bert, (BertModel, ModernBertForMaskedLM))",
        'ARCHS = ("bert", "modernbert")',
        'encoder = getattr(model, "bert", None)',
    }
    for text in asks:
        assert architecture_asks(text, names, classes) == [1], text
    fine = {
        'if self.model_type != "BPE": pass',  # a tokenizer's model, not an architecture
        "ok = isinstance(bert, BertModel)",
        'class Tagger:\n    base_model_prefix = "bert"',
        'x = "BERT"',
        "arch = models.of_directory(path)",
    }
    for text in fine:
        assert architecture_asks(text, names, classes) == [], text


# --------------------------------------------------------------------------------------------- function-local imports

MAX_LOCAL_IMPORTS = 60  # issue 52: a function-local import of bertkit is the exception, with its reason beside it
# files not counted for now, with the reason (their imports move with them)
LOCAL_IMPORT_FILES_FOR_NOW: dict[str, str] = {}


def _comment_lines(text: str) -> set[int]:
    return {
        tok.start[0] for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT
    }


def _is_bertkit_import(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module == "bertkit" or (node.module or "").startswith("bertkit."))
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == "bertkit" for a in node.names)


def local_imports(text: str) -> list[tuple[int, bool]]:
    """(line, has a reason) of each import of a bertkit module inside a function body. The reason is a comment on
    the import, on the line above it, or on (or above) an import before it in the same run of import statements."""
    comments = _comment_lines(text)
    found = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(node, field, None)
                run_start, reason = None, False
                for stmt in body if isinstance(body, list) else []:
                    if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                        run_start, reason = None, False
                        continue
                    if run_start is None:
                        run_start, reason = stmt.lineno, stmt.lineno - 1 in comments
                    reason = reason or any(n in comments for n in range(stmt.lineno - 1, stmt.end_lineno + 1))
                    if _is_bertkit_import(stmt):
                        found.append((stmt.lineno, reason))
    # a function nested in another is walked twice
    return sorted(set(found))


def test_function_local_imports_are_few_and_give_their_reason():
    counted, silent = [], []
    for p in _sources():
        rel = p.relative_to(SRC).as_posix()
        if rel.startswith(tuple(LOCAL_IMPORT_FILES_FOR_NOW)):
            continue
        for line, reason in local_imports(p.read_text(encoding="utf-8")):
            counted.append(f"{rel}:{line}")
            if not reason:
                silent.append(f"{rel}:{line}")
    assert not silent, "say why each function-local import is not at the top (torch, onnx, -h light, a cycle)"
    assert len(counted) <= MAX_LOCAL_IMPORTS, len(counted)
    assert all(
        any(p.as_posix().startswith(f"{SRC.as_posix()}/{name}") for p in _sources())
        for name in LOCAL_IMPORT_FILES_FOR_NOW
    )


def test_the_local_import_rule_sees_a_reason_and_its_absence():
    text = """
from bertkit import models


def f():
    import torch  # heavy

    from bertkit.features import Encoder
    from bertkit import runtime

    x = 1
    from bertkit.tasks import get_task
    # onnx: only the export path needs it
    from bertkit.export import onnx_name
    from bertkit.pipelines import load_pipeline  # torch: kept out of -h
    import bertkit.config


class A:
    def g(self):
        if True:
            from bertkit import ops
"""
    assert local_imports(text) == [(8, True), (9, True), (12, False), (14, True), (15, True), (16, True), (22, False)]
