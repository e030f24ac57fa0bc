"""The package's shape: imports point one way (cli -> tasks -> train -> nn -> functional -> ops; data and
transforms and loader below nn; utils at the bottom), no import cycles, no private names imported across modules, and
package-internal imports at the top of the file. Read with ``ast``; nothing is imported."""
import ast
import pathlib
from collections import defaultdict

PKG = pathlib.Path(__file__).resolve().parents[1] / "graphattn"

#: rank of each top-level unit of the package: a module may import its own unit or a lower rank
RANKS = {"version": 0, "utils": 0, "ops": 1, "functional": 2, "data": 3, "transforms": 4, "loader": 4, "nn": 5,
         "patterns": 6, "testing": 6, "train": 7, "tasks": 8, "cli": 9, "__init__": 10, "__main__": 10}

#: package-internal imports allowed inside functions, with the reason (everything else at the top)
INNER_ALLOWED = {
    # the Triton module imports triton at its top: only loaded where the Triton path runs
    ("graphattn.ops.fused_triton", "graphattn.ops._triton_kernels"),
    # the command line parses first: --help and bad options answer without importing torch
    ("graphattn.cli.main", "graphattn.cli.commands"),
}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def unit(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_imports(mod: str):
    """Yield ``(target module, imported name or None, line, at top level)`` for every import of
    the package made by ``mod`` (relative imports resolved)."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "graphattn":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    yield sub, None, node.lineno, id(node) in top
                else:
                    yield target, alias.name, node.lineno, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "graphattn":
                    yield alias.name, None, node.lineno, id(node) in top


def import_graph():
    graph = defaultdict(set)
    for mod in MODULES:
        for target, _, _, _ in package_imports(mod):
            if target != mod and target in MODULES:
                graph[mod].add(target)
    return graph


def find_cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def is_upward(mod: str, target: str) -> bool:
    """Whether ``mod`` importing ``target`` goes against the arrows (a lower unit importing a higher one)."""
    return RANKS[unit(target)] > RANKS[unit(mod)]


def upward_imports():
    bad = []
    for mod in sorted(MODULES):
        for target, _, line, _ in package_imports(mod):
            if target in MODULES and is_upward(mod, target):
                bad.append(f"{mod}:{line} imports {target}")
    return bad


def private_imports():
    bad = []
    for mod in sorted(MODULES):
        for target, name, line, _ in package_imports(mod):
            private_module = name is None and target.rsplit(".", 1)[-1].startswith("_") \
                and target.rsplit(".", 1)[0] != mod.rsplit(".", 1)[0]
            if (name and name.startswith("_") and name != "__version__") or private_module:
                bad.append(f"{mod}:{line} imports {target}.{name or ''}".rstrip("."))
    return bad


def inner_imports():
    bad = []
    for mod in sorted(MODULES):
        for target, name, line, top in package_imports(mod):
            if not top and (mod, target) not in INNER_ALLOWED:
                bad.append(f"{mod}:{line} imports {target} inside a function")
    return bad


def test_every_module_has_a_rank():
    assert {unit(m) for m in MODULES} <= set(RANKS), sorted({unit(m) for m in MODULES} - set(RANKS))


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_imports_point_down():
    bad = upward_imports()
    assert not bad, "upward imports (" + " -> ".join(sorted(RANKS, key=RANKS.get)[::-1]) + "):\n" + "\n".join(bad)


def test_no_private_names_across_modules():
    bad = private_imports()
    assert not bad, "private names imported across modules (make them public where they live):\n" + "\n".join(bad)


def test_package_imports_at_top_of_file():
    bad = inner_imports()
    assert not bad, "imports inside functions (move to the top; inner imports are for optional " \
                    "heavy dependencies only):\n" + "\n".join(bad)


def test_checker_finds_a_cycle_and_an_upward_import():
    graph = {"graphattn.ops.a": {"graphattn.nn.b"}, "graphattn.nn.b": {"graphattn.nn.c"},
             "graphattn.nn.c": {"graphattn.ops.a"}, "graphattn.nn.d": {"graphattn.ops.a"}}
    assert find_cycles(graph) == [["graphattn.nn.b", "graphattn.nn.c", "graphattn.ops.a"]]
    assert find_cycles({"graphattn.nn.d": {"graphattn.ops.a"}}) == []
    assert is_upward("graphattn.ops.a", "graphattn.nn.b") and is_upward("graphattn.data.x", "graphattn.train.loop")
    assert not is_upward("graphattn.cli.main", "graphattn.tasks.social.node")
    assert not is_upward("graphattn.nn.attention", "graphattn.data.structural")


def test_checker_reads_relative_and_inner_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "graphattn"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ops" / "__init__.py").write_text("")
    (pkg / "ops" / "a.py").write_text("from . import b\n\ndef f():\n    from graphattn.nn.x import _y\n")
    (pkg / "ops" / "b.py").write_text("")
    monkeypatch.setitem(globals(), "PKG", pkg)  # module_name() and package_imports() read these two
    monkeypatch.setitem(globals(), "MODULES", {module_name(p): p for p in pkg.rglob("*.py")})
    found = list(package_imports("graphattn.ops.a"))
    assert ("graphattn.ops.b", None, 1, True) in found
    assert ("graphattn.nn.x", "_y", 4, False) in found


#: private attributes of other libraries the package reads or sets, each with the reason (no public API)
FOREIGN_PRIVATE = {
    "_version": "torch's in-place version counter: cached views are invalidated when a tensor changes in place",
    "_indices": "torch: the indices of an uncoalesced sparse COO tensor (indices() needs a coalesced one)",
    "_nnz": "torch: the stored entries of a sparse tensor, uncoalesced ones included",
    "_C": "torch's C++ module: the ABI flag the C++ extension is built with",
    "_GLIBCXX_USE_CXX11_ABI": "torch's C++ ABI flag, for the C++ extension build",
    "_option_string_actions": "argparse: the action behind a given option string",
    "_descList": "RDKit's table of descriptor functions (its documented way to list them)",
    "_num_graphs": "PyG Batch: set when a batch is collated from storage as PyG's collate does it",
    "_slice_dict": "PyG Batch: set when a batch is collated from storage as PyG's collate does it",
    "_inc_dict": "PyG Batch: set when a batch is collated from storage as PyG's collate does it",
    "_data": "PyG InMemoryDataset's collated storage, read for batching from storage",
    "_edge_mask": "PyG explain: the mask PyG's set_masks puts on a conv (a local PyG conv of a block)",
    "_loop_mask": "PyG explain: the self-loop mask PyG's set_masks puts on a conv",
    "_apply_sigmoid": "PyG explain: whether a conv applies a sigmoid to its explain mask",
    "_parameters": "torch Module: where set_masks registered an explain mask as a Parameter",
}
#: NamedTuple's public methods, whose names start with an underscore
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}


def defined_private_names(tree: ast.AST) -> set:
    """Private names a module defines: functions, classes, module or class attributes, and
    attributes set on ``self`` / ``cls``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
                    elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) \
                            and n.value.id in ("self", "cls"):
                        names.add(n.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_attribute_uses(tree: ast.AST):
    """``(line, name, text)`` of every private attribute read or set on something other than
    ``self`` / ``cls`` / ``ctx`` / ``super()``, by attribute syntax or by ``getattr``-family calls."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            v = node.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls", "ctx"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            yield node.lineno, node.attr, ast.unparse(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and node.args[1].value.startswith("_") and not node.args[1].value.startswith("__"):
            yield node.lineno, node.args[1].value, ast.unparse(node)


def private_attributes_across_modules():
    """Private attributes used outside the module that defines them (ours), and private
    attributes of other libraries not in :data:`FOREIGN_PRIVATE`."""
    trees = {mod: ast.parse(path.read_text()) for mod, path in MODULES.items()}
    defined = {mod: defined_private_names(t) for mod, t in trees.items()}
    ours = set().union(*defined.values())
    bad = []
    for mod in sorted(trees):
        for line, name, text in private_attribute_uses(trees[mod]):
            if name in NAMEDTUPLE_API or name in defined[mod]:
                continue
            if name in ours:
                owners = sorted(m for m, names in defined.items() if name in names)
                bad.append(f"{mod}:{line} {text}: private to {', '.join(owners)}")
            elif name not in FOREIGN_PRIVATE:
                bad.append(f"{mod}:{line} {text}: another library's private attribute (add it to "
                           "FOREIGN_PRIVATE with the reason, or use its public API)")
    return bad


def test_no_private_attributes_across_modules():
    bad = private_attributes_across_modules()
    assert not bad, "private attributes set or read from another module (make them public where they " \
                    "live, or give the module a public method):\n" + "\n".join(bad)


def test_private_attribute_checker_sees_reads_writes_and_getattr(tmp_path, monkeypatch):
    user = ast.parse("def f(a, b):\n    a._x = 2\n    return getattr(b, '_x'), other._y, p._replace(), "
                     "super()._z, self._w\n")
    assert [(line, name) for line, name, _ in private_attribute_uses(user)] == [
        (2, "_x"), (3, "_x"), (3, "_y"), (3, "_replace")]
    pkg = tmp_path / "graphattn"
    (pkg / "nn").mkdir(parents=True)
    (pkg / "nn" / "layer.py").write_text("class A:\n    _flag = False\n    def __init__(self):\n        self._x = 1\n")
    (pkg / "nn" / "model.py").write_text("def f(layer, t):\n    layer._flag = True\n    return t._version, "
                                         "getattr(layer, '_x'), t._secret\n")
    monkeypatch.setitem(globals(), "PKG", pkg)
    monkeypatch.setitem(globals(), "MODULES", {module_name(p): p for p in pkg.rglob("*.py")})
    bad = private_attributes_across_modules()
    assert len(bad) == 3 and "layer._flag: private to graphattn.nn.layer" in bad[0]
    assert "getattr(layer, '_x')" in bad[1] and "t._secret: another library's" in bad[2]
