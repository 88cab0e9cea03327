"""The package's shape: layers import only downward, no import cycles, no private attributes of the
libraries we stand on, and package code never imports the project root's entry points.

Layers, lowest first (spectrum_rft/__init__.py): common < task < rollouts < baselines < tools, training < api
(the public names, imported from their rooms).
A module may import its own layer or a lower one; ``tools`` and ``training`` are siblings (neither imports
the other). Lazy imports inside functions count too: a cycle through a function body is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "spectrum_rft"
RANK = {"common": 0, "task": 1, "rollouts": 2, "baselines": 3, "tools": 4, "training": 4, "api": 5}
ROOT_ENTRIES = {p.stem for p in ROOT.glob("*.py")} | {"spectrum_templates"}
LIBRARIES = ("eval_protocol", "mcp", "litellm", "trl", "transformers", "peft", "accelerate", "datasets")


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(mod: str, path: Path) -> list[tuple[str, int]]:
    """Absolute names of every module imported anywhere in the file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.append((base, node.lineno))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]  # `from pkg import module`
    return out


def _layer(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "spectrum_rft" else None


MODULES = _modules()


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for name, _ in _imports(mod, path):
            if name in MODULES and name != mod:
                g[mod].add(name)
    return g


def test_every_module_is_in_a_known_layer():
    unknown = [m for m in MODULES if m != "spectrum_rft" and m != "spectrum_rft.__main__" and _layer(m) not in RANK]
    assert not unknown, f"modules outside the layers {sorted(RANK)}: {unknown}"


def _bad_imports(modules: dict[str, Path]) -> list[str]:
    """Imports that point up, or into a sibling layer of the same rank."""
    bad = []
    for mod, path in modules.items():
        src = _layer(mod)
        if src not in RANK:
            continue
        for name, line in _imports(mod, path):
            dst = _layer(name)
            if dst is None or dst not in RANK or dst == src:
                continue
            if RANK[dst] >= RANK[src]:  # upward, or into a sibling layer
                bad.append(f"{path.name}:{line}: {src} imports {dst} ({name})")
    return bad


def test_imports_point_down():
    bad = _bad_imports(MODULES)
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


TRAINING_PRODUCTS = ("spectrum_rft.training.spectrum", "spectrum_rft.training.gsm8k")
TRAINING_DISPATCH = "spectrum_rft.training.train_cli"  # `spectrum-rft train` picks the product


def _training_problems(modules: dict[str, Path]) -> list[str]:
    """training/'s two products never import each other; the plumbing they share imports neither (but the
    dispatcher of `spectrum-rft train`)."""
    def product(name: str) -> str | None:
        return next((p for p in TRAINING_PRODUCTS if name == p or name.startswith(p + ".")), None)

    bad = []
    for mod, path in modules.items():
        if not mod.startswith("spectrum_rft.training") or mod == TRAINING_DISPATCH:
            continue
        src = product(mod)
        for name, line in _imports(mod, path):
            dst = product(name)
            if dst and dst != src:
                bad.append(f"{path.name}:{line}: {src or 'training (shared)'} imports {dst} ({name})")
    return bad


def test_training_products_are_siblings():
    bad = _training_problems(MODULES)
    assert not bad, "training/ imports across its products:\n" + "\n".join(bad)


def test_the_training_check_sees_a_crossing(tmp_path):
    bad_file = tmp_path / "x.py"
    bad_file.write_text("from spectrum_rft.training.gsm8k import data\n")
    shared = tmp_path / "y.py"
    shared.write_text("from spectrum_rft.training.spectrum import trl_env\n")
    found = "\n".join(_training_problems({"spectrum_rft.training.spectrum.x": bad_file,
                                           "spectrum_rft.training.y": shared}))
    assert "spectrum_rft.training.spectrum imports spectrum_rft.training.gsm8k" in found
    assert "training (shared) imports spectrum_rft.training.spectrum" in found


def test_no_import_cycles():
    g = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_package_never_imports_the_root_entry_points():
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}" for mod, path in MODULES.items()
           for name, line in _imports(mod, path) if name.split(".")[0] in ROOT_ENTRIES]
    assert not bad, "package code imports the project root's entry points:\n" + "\n".join(bad)


def _library_names(tree: ast.AST) -> set[str]:
    """Local names bound to the LIBRARIES' modules or objects by imports."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in LIBRARIES:
                    names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            names |= {a.asname or a.name for a in node.names}
    return names


# McpGym's documented extension points (eval-protocol's own examples implement and call them).
MCPGYM_HOOKS = {"_register_tools", "_get_or_create_session", "_execute_session_environment_step"}
STDLIB_PRIVATE_OK = {"os._exit"}


def _library_bases(path: Path, class_name: str) -> list[type]:
    """The LIBRARIES' classes in the MRO of ``class_name`` (the module is imported)."""
    import importlib  # noqa: PLC0415

    mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    cls = getattr(importlib.import_module(mod), class_name, None)
    return [b for b in getattr(cls, "__mro__", ())[1:] if b.__module__.split(".")[0] in LIBRARIES]


def _private_uses(path: Path) -> list[str]:
    """Private attributes this file touches on objects that are not its own:

    * ``x._name`` for any ``x`` but ``self``/``cls`` (another object's private state, ours or a library's);
    * in a class deriving from a LIBRARIES class (eval-protocol, mcp, litellm, TRL, transformers, ...): a ``_name`` method it overrides or a
      ``self._name`` it reads that its own class body does not define (the base class's privates),
      McpGym's documented hooks excepted.
    """
    tree = ast.parse(path.read_text())
    lib = _library_names(tree)
    rel = path.relative_to(ROOT)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            bad += [f"{rel}:{node.lineno}: imports {a.name}" for a in node.names if a.name.startswith("_")]
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base not in ("self", "cls") and f"{base}.{node.attr}" not in STDLIB_PRIVATE_OK:
                bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b).split(".")[0] for b in node.bases}
            if not bases & lib:
                continue
            own = set()
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    own.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.ctx, ast.Store):
                    own.add(item.attr)
            lib_bases = _library_bases(path, node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("_") \
                        and not item.name.startswith("__") and item.name not in MCPGYM_HOOKS \
                        and any(item.name in vars(b) for b in lib_bases):
                    bad.append(f"{rel}:{item.lineno}: overrides {node.name}.{item.name} of a library class")
            for item in ast.walk(node):
                if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self" \
                        and item.attr.startswith("_") and not item.attr.startswith("__") \
                        and item.attr not in own and item.attr not in MCPGYM_HOOKS:
                    bad.append(f"{rel}:{item.lineno}: reads {node.name}'s inherited self.{item.attr}")
    return bad


def test_no_private_attributes_of_other_libraries():
    bad = [b for path in MODULES.values() for b in _private_uses(path)]
    assert not bad, "private attributes of other objects or libraries:\n" + "\n".join(bad)


# Ideas defined once: the module that may bind each name. Another module binding the name at its top
# level, or writing one of their values out again as a literal (under any name), is a second definition.
ONE_DEFINITION = {
    "FAILURE_CAUSES": "spectrum_rft.rollouts.failures", "MODEL_FAILURE": "spectrum_rft.rollouts.failures",
    "FAULT_OF_CAUSE": "spectrum_rft.rollouts.failures", "CAUSE_OF_FAULT": "spectrum_rft.rollouts.failures",
}


def _one_definition_values() -> dict[str, object]:
    import importlib  # noqa: PLC0415

    return {name: getattr(importlib.import_module(mod), name) for name, mod in ONE_DEFINITION.items()}


def _second_definitions(modules: dict[str, Path], values: dict[str, object]) -> list[str]:
    literals = {repr(v): name for name, v in values.items() if isinstance(v, (str, tuple))}
    bad = []
    for mod, path in modules.items():
        tree = ast.parse(path.read_text())
        rel = path.relative_to(path.parents[len(mod.split(".")) - 1])
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and ONE_DEFINITION.get(n.id, mod) != mod:
                        bad.append(f"{rel}:{node.lineno}: defines {n.id} again ({ONE_DEFINITION[n.id]} has it)")
        if any(ONE_DEFINITION[name] == mod for name in ONE_DEFINITION):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.Tuple)):
                try:
                    key = repr(ast.literal_eval(node))
                except ValueError:
                    continue
                if key in literals:
                    bad.append(f"{rel}:{node.lineno}: writes out {literals[key]} again")
    return bad


def test_one_definition_per_idea():
    bad = _second_definitions(MODULES, _one_definition_values())
    assert not bad, "ideas defined twice:\n" + "\n".join(bad)


# Statistics are computed in spectrum_rft.common.stats alone: no other module defines a function of these names.
STATISTICS = {"mean", "_mean", "mean_or", "mean_se", "_summary", "stdev", "pstdev", "_sd", "standard_error", "linear_fit", "first_last",
              "halves", "thirds", "trailing_mean"}


def _statistics_defined(modules: dict[str, Path]) -> list[str]:
    return [f"{mod}:{node.lineno}: defines {node.name}" for mod, path in modules.items()
            if mod != "spectrum_rft.common.stats" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in STATISTICS]


def test_statistics_come_from_common_stats(tmp_path):
    bad = _statistics_defined(MODULES)
    assert not bad, "statistics outside spectrum_rft.common.stats:\n" + "\n".join(bad)
    probe = tmp_path / "probe.py"
    probe.write_text("def report():\n    def _mean(xs):\n        return sum(xs) / len(xs)\n")
    assert _statistics_defined({"spectrum_rft.tools.probe": probe}) == ["spectrum_rft.tools.probe:2: defines _mean"]


# The model <-> env loop is written once: only the episode driver builds what a model is sent (a call of
# spectrum_rft.task.window.window) and hands its tool calls to an env. The verifiers harness (its own package)
# is held to the same rule.
HARNESS = ROOT / "environments" / "spectrum_memory" / "spectrum_memory"
OPENENV = ROOT / "environments" / "spectrum_openenv" / "spectrum_openenv"  # the OpenEnv transport


def _model_loops(files: dict[str, Path]) -> list[str]:
    out = []
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (getattr(node.func, "id", None) == "window"
                                               or getattr(node.func, "attr", None) == "window"):
                out.append(f"{name}:{node.lineno}")
    return out


def test_one_model_loop(tmp_path):
    files = {**MODULES, **{f"spectrum_memory.{p.stem}": p for p in HARNESS.glob("*.py")},
             **{f"spectrum_openenv.{p.stem}": p for p in OPENENV.glob("*.py")}}
    assert any(name.startswith("spectrum_openenv.") for name in files)
    loops = _model_loops(files)
    assert [x.split(":")[0] for x in loops] == ["spectrum_rft.rollouts.driver"], loops
    probe = tmp_path / "second_loop.py"
    probe.write_text("from spectrum_rft.task.window import window\n\nasync def play(env, model, transcript):\n"
                     "    while not env.done:\n        reply = await model(window(transcript, 'none'))\n")
    assert _model_loops({"spectrum_rft.tools.second_loop": probe}) == ["spectrum_rft.tools.second_loop:5"]


# a scripted policy driven through an episode outside the driver: a loop that asks a policy for a report
# (``act``) and hands it to the env (``step``, ``call_tool``, a TRL tool method)
POLICY_CALLS, ENV_CALLS = {"act", "act_on"}, {"step", "call_tool", "submit_report", "call"}


def _policy_loops(files: dict[str, Path]) -> list[str]:
    out = []
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
                called = {getattr(c.func, "attr", getattr(c.func, "id", None)) for c in ast.walk(node)
                          if isinstance(c, ast.Call)}
                if called & POLICY_CALLS and called & ENV_CALLS:
                    out.append(f"{name}:{node.lineno}")
    return out


def test_scripted_policies_play_through_the_driver(tmp_path):
    """The audit, bench90 and the TRL data builders play their scripted policies through the episode driver
    (``rollouts.driver.drive_now`` with ``baselines.policies.ScriptedModel``): no module loops over an
    episode asking a policy for reports itself."""
    files = {**MODULES, **{f"spectrum_memory.{p.stem}": p for p in HARNESS.glob("*.py")},
             **{f"spectrum_openenv.{p.stem}": p for p in OPENENV.glob("*.py")}}
    assert _policy_loops(files) == []
    probe = tmp_path / "second_loop.py"
    probe.write_text("def run(env, policy, obs):\n    while not obs['done']:\n        policy.observe(obs)\n"
                     "        obs, *_ = env.step(policy.act())\n")
    assert _policy_loops({"spectrum_rft.baselines.second_loop": probe}) == ["spectrum_rft.baselines.second_loop:2"]


def test_the_one_definition_check_sees_a_copy(tmp_path):
    values = _one_definition_values()
    probe = tmp_path / "spectrum_rft" / "tools"
    probe.mkdir(parents=True)
    (probe / "a.py").write_text("FAILURE_CAUSES = ('x',)\n")
    (probe / "b.py").write_text(f"WHY = {values['MODEL_FAILURE']!r}\nCAUSES = {values['FAILURE_CAUSES']!r}\n")
    bad = "\n".join(_second_definitions({"spectrum_rft.tools.a": probe / "a.py",
                                          "spectrum_rft.tools.b": probe / "b.py"}, values))
    assert "defines FAILURE_CAUSES again" in bad
    assert "writes out MODEL_FAILURE again" in bad and "writes out FAILURE_CAUSES again" in bad


@pytest.mark.parametrize("folder", ["env", "build", "dist", "vendor", "coverage"])
def test_no_folder_the_uploader_drops(folder):
    """eval-protocol's uploader silently leaves out folders with these names, at any depth."""
    assert not [p for p in PKG.rglob(folder) if p.is_dir()]


def test_the_checker_sees_a_violation(monkeypatch, tmp_path):
    """The checks can fail: an upward import, a sideways import, another object's private attribute, a
    library base class's private method overridden and its private attribute read, all in synthetic modules."""
    from mcp.server.fastmcp import FastMCP  # noqa: PLC0415

    private = next(n for n, v in vars(FastMCP).items() if n.startswith("_") and not n.startswith("__")
                   and callable(v))
    src = ("import litellm\nfrom mcp.server.fastmcp import FastMCP\nfrom spectrum_rft.tools import cli\n"
           "def f():\n    return litellm._private_thing\n"
           f"class S(FastMCP):\n    def {private}(self, *a, **k):\n        return self._tool_manager\n")
    probe = tmp_path / "spectrum_rft" / "task"
    probe.mkdir(parents=True)
    (probe / "m.py").write_text(src)
    sibling = tmp_path / "spectrum_rft" / "tools"
    sibling.mkdir()
    (sibling / "t.py").write_text("from spectrum_rft.training import loss\n")
    bad = "\n".join(_bad_imports({"spectrum_rft.task.m": probe / "m.py", "spectrum_rft.tools.t": sibling / "t.py"}))
    assert "task imports tools" in bad and "tools imports training" in bad
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("spectrum_rft.task.m", probe / "m.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(__import__("sys").modules, "spectrum_rft.task.m", module)
    found = "\n".join(_private_uses(probe / "m.py"))
    assert "litellm._private_thing" in found and "self._tool_manager" in found
    assert f"overrides S.{private} of a library class" in found


def _readme_layout() -> dict[str, list[str]]:
    """The layout table (docs/ARCHITECTURE.md): layer -> the names in its ``modules`` column (in backticks)."""
    import re  # noqa: PLC0415

    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"`\w+`", cells[0]):
            rows[cells[0].strip("`")] = re.findall(r"`([\w/]+)`", cells[1])
    return rows


def _layout_problems(rows: dict[str, list[str]]) -> list[str]:
    bad = [f"layer {layer} has no row in the layout table" for layer in RANK if layer not in rows]
    for layer, names in rows.items():
        folder = PKG / layer
        if layer in RANK and (PKG / f"{layer}.py").is_file():  # a layer of one module (api)
            bad += [] if names[:1] == [layer] else [f"the layout row of {layer} must name its module {layer}"]
            continue
        if layer not in RANK or not folder.is_dir():
            bad.append(f"the layout table names a layer {layer!r} that does not exist")
            continue
        have = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} \
            | {f"{p.parent.name}/" for p in folder.glob("*/__init__.py")}
        bad += [f"{layer}: {name} is not in the layout table" for name in sorted(have - set(names))]
        bad += [f"{layer}: the layout table names {name}, which is not there" for name in names
                if name not in have and not (folder / name.rstrip("/")).is_dir()]
    return bad


def test_readme_layout_table_lists_every_module():
    """The layout table (docs/ARCHITECTURE.md) cannot drift: every module and sub-package of a layer is in its row, and
    every name in a row exists (a data folder such as ``templates/`` may be named too)."""
    bad = _layout_problems(_readme_layout())
    assert not bad, "docs/ARCHITECTURE.md, ## Layout:\n" + "\n".join(bad)


def test_the_layout_check_sees_a_missing_and_a_stale_name():
    rows = _readme_layout()
    rows["task"] = [n for n in rows["task"] if n != "window"] + ["gone"]
    bad = "\n".join(_layout_problems(rows))
    assert "task: window is not in the layout table" in bad
    assert "task: the layout table names gone, which is not there" in bad


# The names of memory modes and rewards are spelled in task/ alone: everything else acts on the objects
# (task.memory, task.reward) or on the names task/ exports (NO_MEMORY, REAL_ECHO, CONTROL_ECHO, TOOL_SETS,
# task.bench90.SYSTEMS / REWARD, config.default_memory_mode). ``default`` is left out: it is the alias every
# layer may name ("whatever the default is", of a preset and of a reward alike).
# A string that only looks like a name is allowed here, with what it is.
NOT_A_NAME = {
    ("spectrum_rft.rollouts.row_result", "none"): "the text of an empty list",
    ("spectrum_rft.tools.evaluation.render", "none"): "the text of an empty list",
    ("spectrum_rft.tools.bench90", "none"): "OpenAI's tool_choice value",
    ("spectrum_rft.tools.launch.plan", "none"): "a Fireworks job field's value",
    ("spectrum_rft.tools.launch.tarball", "none"): "a word the secret scan ignores",
    ("spectrum_rft.training.gsm8k.card", "none"): "TRL's scale_rewards value",
}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def _name_literals(files: dict[str, Path]) -> list[str]:
    from spectrum_rft.task.memory import MEMORY_MODES
    from spectrum_rft.task.reward import REWARDS

    names = (set(MEMORY_MODES) | set(REWARDS)) - {"default"}
    out = []
    for mod, path in files.items():
        if mod.startswith("spectrum_rft.task"):
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        out += [f"{mod}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
                and id(node) not in docs and (mod, node.value) not in NOT_A_NAME]
    return out


def test_mode_and_reward_names_are_spelled_in_task_alone(tmp_path):
    files = {**MODULES, **{f"spectrum_memory.{p.stem}": p for p in HARNESS.glob("*.py")},
             **{f"spectrum_openenv.{p.stem}": p for p in OPENENV.glob("*.py")}}
    bad = _name_literals(files)
    assert not bad, "memory mode or reward names outside task/ (act on task's objects):\n" + "\n".join(bad)
    probe = tmp_path / "probe.py"
    probe.write_text('"""A docstring may say scaffold."""\n\ndef arm(mode):\n    return mode == "scrambled" or "match_iou"\n')
    assert sorted(_name_literals({"spectrum_rft.tools.probe": probe})) == [
        "spectrum_rft.tools.probe:4: 'match_iou'", "spectrum_rft.tools.probe:4: 'scrambled'"]


MAX_FUNCTION_LINES = 80  # a function a reader takes in at once; past it, its parts get names


def _long_functions(files: dict[str, Path]) -> list[str]:
    return [f"{mod}:{node.lineno}: {node.name} has {node.end_lineno - node.lineno + 1} lines"
            for mod, path in files.items() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def test_no_function_over_80_lines(tmp_path):
    bad = _long_functions(MODULES)
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(bad)
    probe = tmp_path / "probe.py"
    probe.write_text("def long():\n" + "    x = 1\n" * 80)
    assert _long_functions({"spectrum_rft.tools.probe": probe}) == ["spectrum_rft.tools.probe:1: long has 81 lines"]
