"""Every KFP component is a spec: after its docstring, its body is one import from
``components.launchers.<its file>`` and one call that passes each parameter on by name, to a function with the
same parameters and defaults. The launch logic is then in the image, not serialised into the compiled YAML."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from tests.support.paths import ROOT

COMPONENTS = ROOT / "components"


def _components() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for path in sorted(COMPONENTS.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            decorated = isinstance(node, ast.FunctionDef) and any(
                "dsl.component" in ast.unparse(d) for d in node.decorator_list
            )
            if decorated:
                found.append((path.stem, node))
    return found


def spec_problem(module: str, fn: ast.FunctionDef) -> str | None:
    """Why ``fn`` is not a spec calling ``components.launchers.<module>``; None when it is one."""
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) else fn.body
    if len(body) != 2 or not isinstance(body[0], ast.ImportFrom) or not isinstance(body[1], ast.Return):
        return f"{fn.name}: the body is not one import and one return"
    imported, ret = body[0], body[1]
    if imported.module != f"components.launchers.{module}" or len(imported.names) != 1:
        return f"{fn.name}: imports {imported.module}, not components.launchers.{module}"
    call = ret.value
    name = imported.names[0].name
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == name):
        return f"{fn.name}: does not return {name}(...)"
    params = [a.arg for a in fn.args.args]
    passed = [(k.arg, k.value.id if isinstance(k.value, ast.Name) else None) for k in call.keywords]
    if call.args or passed != [(p, p) for p in params]:
        return f"{fn.name}: does not pass each parameter on by name"
    return None


def test_the_components_were_found():
    names = {fn.name for _, fn in _components()}
    assert {"data_op", "sft_op", "rl_op", "eval_op", "report_op", "sft_trainjob_op"} <= names
    assert len(names) == 15


@pytest.mark.parametrize(("module", "fn"), _components(), ids=lambda v: getattr(v, "name", v))
def test_each_component_is_a_spec(module, fn):
    assert spec_problem(module, fn) is None
    component = getattr(importlib.import_module(f"components.{module}"), fn.name).python_func
    launcher = getattr(importlib.import_module(f"components.launchers.{module}"), fn.body[-2].names[0].name)
    ours, theirs = inspect.signature(component).parameters, inspect.signature(launcher).parameters
    assert [(p.name, p.default) for p in ours.values()] == [(p.name, p.default) for p in theirs.values()]


def test_the_check_refuses_a_body_with_logic():
    source = (
        "def x_op(a: str, b: int = 1) -> str:\n"
        '    """Doc."""\n'
        "    from components.launchers.x import x_step\n\n"
        "    return x_step(a=a, b=b)\n"
    )
    assert spec_problem("x", ast.parse(source).body[0]) is None
    logic = source.replace("    return", "    a = a.strip()\n    return")
    assert spec_problem("x", ast.parse(logic).body[0]) == "x_op: the body is not one import and one return"
    dropped = source.replace("x_step(a=a, b=b)", "x_step(a=a)")
    assert spec_problem("x", ast.parse(dropped).body[0]) == "x_op: does not pass each parameter on by name"
    elsewhere = source.replace("components.launchers.x", "paravt_core.x")
    assert spec_problem("x", ast.parse(elsewhere).body[0]) == (
        "x_op: imports paravt_core.x, not components.launchers.x"
    )
