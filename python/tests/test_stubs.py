"""The shipped type stubs describe the extension exactly: every public name and member has a stub."""
import ast
from pathlib import Path

import attn
from attn import _core


def stub_tree():
    path = Path(attn.__file__).with_name("_core.pyi")
    assert path.exists() and Path(attn.__file__).with_name("py.typed").exists()
    return ast.parse(path.read_text())


def public(names):
    return {n for n in names if not n.startswith("__")}


def test_every_name_and_member_has_a_stub():
    tree = stub_tree()
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            found = set()
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found.add(item.name)
                elif isinstance(item, ast.AnnAssign):
                    found.add(item.target.id)
            members[node.name] = found
    module_names = {n for n in public(dir(_core)) if not n.startswith("_") or n == "_data_address"}
    assert module_names == top
    for cls, found in members.items():
        runtime = {n for n in public(dir(getattr(_core, cls))) if not n.startswith("_")}
        if cls == "Error":
            continue  # a ValueError subclass: its members are Python's
        assert runtime - found == set(), f"{cls}: members without stubs"
        assert found - runtime - {"__init__", "__eq__", "__hash__", "__len__"} == set(), f"{cls}: stubs without members"
