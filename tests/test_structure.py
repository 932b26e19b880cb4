"""The shape of the harness, checked on a CPU: the import direction between the
sub-packages of fixtures/ (layers, features never importing each other, imports at the
top, no re-export module), every isolation target resolves, suites use public names
and no module-scoped fixture, every registered rule quotes its document, and a suite
case without a registered rule is refused at collection."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from seeds import seed

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
RULES, CUDA, VOCAB, BOX, ENGINE, PLUGINS = ("rules", "cuda_layer", "tensormap", "tma_box", "engine",
                                           "plugins")
# The shared layers, lowest first: each imports only the layers below it.
LAYERS = (RULES, CUDA, VOCAB, BOX, ENGINE)
FEATURES = ("host_encode", "tma_load", "device_encode", "fences", "toolchain", "tma_store",
            "library_maps")
# Tools over the features (not plugins): the standalone reproducers.
TOOLS = ("repro",)


def _imports(path: Path, top_level_only: bool = False):
    """(line, imported module) of a file; ``from fixtures import x`` counts as fixtures.x."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in ("fixtures",) or re.fullmatch(r"fixtures\.\w+", node.module):
                for a in node.names:
                    yield node.lineno, f"{node.module}.{a.name}"
            else:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name


def _allowed(pkg: str, target: str) -> bool:
    """May sub-package ``pkg`` of fixtures import module ``target``?"""
    if not target.startswith(("fixtures", "reports")):
        return True
    parts = target.split(".")
    other = parts[1] if parts[0] == "fixtures" and len(parts) > 1 else parts[0]
    if pkg == PLUGINS or other == pkg:
        return True
    if pkg in LAYERS:
        return other in LAYERS[:LAYERS.index(pkg)]
    if pkg in FEATURES:
        return other in LAYERS
    if pkg in TOOLS:
        return other in LAYERS + FEATURES
    return False


def _packages():
    for path in sorted(FIXTURES.rglob("*.py")):
        rel = path.relative_to(FIXTURES)
        if len(rel.parts) >= 2:                       # not fixtures/__init__.py
            yield path, rel, rel.parts[0]


def test_import_direction():
    """The shared layers import only the layers below them (the CUDA layer, the
    tensor-map vocabulary, the box models, the engine); a feature imports the shared
    layers and itself, never another feature; a tool (the reproducers) the layers and the
    features; the plugins anything; reports/ nothing of fixtures at import time."""
    bad = []
    for path, rel, pkg in _packages():
        assert pkg in LAYERS + (PLUGINS,) + FEATURES + TOOLS, f"fixtures/{pkg}: not a known sub-package"
        for line, target in _imports(path):
            if not _allowed(pkg, target):
                bad.append(f"fixtures/{rel}:{line} imports {target}")
    for path in sorted((ROOT / "reports").glob("*.py")):
        for line, target in _imports(path, top_level_only=True):
            if target.startswith("fixtures"):
                bad.append(f"reports/{path.name}:{line} imports {target} at import time")
    assert not bad, "imports against the layering (fixtures/CONVENTIONS.md):\n  " + "\n  ".join(bad)


def test_project_imports_are_at_the_top():
    """fixtures/ and suites/ import the project's modules at the top of a module, where
    the reader sees the edges (function-level imports hid two import cycles); the one
    exception is the isolated child's entry point (``if __name__ == "__main__"``)."""
    bad = []
    for path in sorted(FIXTURES.rglob("*.py")) + sorted((ROOT / "suites").glob("*.py")):
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in tree.body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                top.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in top or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names]
            if any(n.startswith(("fixtures", "reports")) for n in names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "project imports inside functions:\n  " + "\n  ".join(bad)


def test_no_module_re_exports_another_package():
    """A module passes on only its own package's names: none imports another package's
    names to hand them on (listing them in ``__all__``, or importing them under
    ``# noqa: F401``). A package's ``__init__.py`` re-exports its own modules' names
    (suites import the package), nothing of other packages. (The load feature's
    ``through_map.py`` was such a module: it handed the load feature's model, cases and
    runners to other features.)"""
    bad = []
    for path, rel, pkg in _packages():
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        exported = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                    for t in node.targets):
                exported = set(ast.literal_eval(node.value))
        for node in tree.body:
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("fixtures."):
                continue
            if node.module.split(".")[1] == pkg:
                continue
            handed_on = [a.asname or a.name for a in node.names if (a.asname or a.name) in exported]
            noqa = any("noqa: F401" in lines[i - 1]
                       for i in range(node.lineno, (node.end_lineno or node.lineno) + 1))
            if handed_on or noqa:
                bad.append(f"fixtures/{rel}:{node.lineno} hands on {node.module}: "
                           f"{handed_on or [a.name for a in node.names]}")
    assert not bad, "re-exports of another package's names:\n  " + "\n  ".join(bad)


def _project_modules() -> dict[str, Path]:
    """Every module of fixtures/ and reports/, by dotted name (a package by its own)."""
    out = {}
    for d in ("fixtures", "reports"):
        for path in (ROOT / d).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _defined(tree) -> set[str]:
    """The names a module binds itself (def, class, assignment; at the top or under a
    top-level if / try), not by importing them."""
    out = set()
    for node in tree.body:
        for n in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, (ast.Assign, ast.AnnAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    out.update(x.id for x in ast.walk(t) if isinstance(x, ast.Name))
    return out


def test_every_name_is_imported_from_its_own_module():
    """A project name (one a module of fixtures/ or reports/ defines) is imported from,
    or read through, the module that defines it: never through a module that imported it
    (at any depth: a chain of such modules is found link by link). A package's
    ``__init__.py`` may hand on its own modules' names. A module attribute the same file
    assigns (a patch, as a reproducer's stand-ins replace a runner's function) is read
    where it is patched. (GLOBAL_GUARD went engine.pool -> tma_store.cases ->
    tma_store; TRAP_ERROR lived in four namespaces; map_layout kept a REEXPORTED tuple
    so that the one-hop check above passed.)"""
    mods = _project_modules()
    trees = {m: ast.parse(p.read_text()) for m, p in mods.items()}
    defs = {m: _defined(t) for m, t in trees.items()}
    project = set().union(*defs.values())
    imported = {m: {a.asname or a.name: (n.module, a.name) for n in t.body
                    if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
                for m, t in trees.items()}

    def ok(m, name):
        if name in defs[m] or f"{m}.{name}" in mods:
            return True
        src = imported[m].get(name)
        own = src and (src[0].startswith(m + ".") or (src[0] == m and f"{m}.{src[1]}" in mods))
        return bool(mods[m].name == "__init__.py" and own)

    files = [*FIXTURES.rglob("*.py"), *(ROOT / "reports").rglob("*.py"),
             *(ROOT / "suites").glob("*.py"), *(ROOT / "tests").glob("*.py"), ROOT / "conftest.py"]
    bad = []
    for path in files:
        tree = ast.parse(path.read_text())
        alias = {}
        for n in tree.body:
            if isinstance(n, ast.ImportFrom) and n.module:
                alias.update({a.asname or a.name: f"{n.module}.{a.name}" for a in n.names
                              if f"{n.module}.{a.name}" in mods})
            elif isinstance(n, ast.Import):
                alias.update({a.asname: a.name for a in n.names if a.asname and a.name in mods})
        bound = {x.id for x in ast.walk(tree) if isinstance(x, ast.Name) and isinstance(x.ctx, ast.Store)}
        bound |= {a.arg for x in ast.walk(tree) if isinstance(x, ast.arguments)
                  for a in x.args + x.kwonlyargs + x.posonlyargs}
        patched = {(t.value.id, t.attr) for x in ast.walk(tree) if isinstance(x, ast.Assign)
                   for t in x.targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)}
        where = path.relative_to(ROOT)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module in mods:
                bad += [f"{where}:{n.lineno} imports {a.name} from {n.module}" for a in n.names
                        if a.name != "*" and not ok(n.module, a.name)]
            elif (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                  and n.value.id in alias and n.value.id not in bound and n.attr in project
                  and (n.value.id, n.attr) not in patched and not ok(alias[n.value.id], n.attr)):
                bad.append(f"{where}:{n.lineno} reads {n.attr} through {alias[n.value.id]}")
    assert not bad, ("names read through a module that does not define them (import them "
                     "from their own):\n  " + "\n  ".join(sorted(set(bad))))


def test_the_worked_example_is_true_to_the_code():
    """fixtures/CONVENTIONS.md's path of one case: its case exists, with the rule its
    failure message prints; every file it names exists and defines the function or class
    named beside it; the child's entry it names is the function reference the code passes;
    and where it says the case's data is built (``call_isolated``, in the worker, before
    the child is called) the code builds it. (It gave a straddling store the rule tma-store.model, which the code gives
    tma-store.out-of-bounds, and said the child built the data.)"""
    import fnmatch
    from fixtures.tma_store import cases as store_cases
    text = (FIXTURES / "CONVENTIONS.md").read_text()
    start = text.index("## The engine: the path of one case")
    flat = " ".join(text[start:text.index("\n## ", start + 10)].split())
    name = re.search(r"`(tile-[^`.]*)\.\.\.(-[^`]*)` of `suites/test_tma_store.py`", flat)
    found = [c for c in store_cases.generate("standard")
             if fnmatch.fnmatchcase(c.id, f"{name.group(1)}*{name.group(2)}")]
    printed = re.search(r"printed `\[rule ([^\]]+)\] \[case", flat).group(1)
    assert found and {c.rule for c in found} == {printed}, (name.groups(), printed)
    paths = re.findall(r"`((?:fixtures|kernels|suites)/[\w/]+\.(?:py|cu))`", flat)
    assert len(paths) > 10 and all((ROOT / p).is_file() for p in paths), paths
    pairs = re.findall(r"`((?:fixtures|kernels|suites)/[\w/]+\.(?:py|cu))` `(\w+)", flat)
    assert len(pairs) >= 6
    for path, func in pairs:
        src = (ROOT / path).read_text()
        assert re.search(rf"^(def|class) {func}\b|^{func}\(|^{func} = ", src, re.M), (path, func)
    target = re.search(r"run_isolated\((\w+), WRITES", flat).group(1)
    tree = ast.parse((FIXTURES / "engine" / "batches.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "call_isolated")
    calls = {ast.unparse(n.func): n for n in ast.walk(fn) if isinstance(n, ast.Call)}
    assert "call_isolated" in flat and calls["op.tensor"].lineno < calls["run_isolated"].lineno
    assert ast.unparse(calls["run_isolated"].args[0]) == target, "the child's entry, a function"
    assert any(isinstance(n, ast.FunctionDef) and n.name == target for n in tree.body)


_MUTATORS = {"append", "add", "clear", "discard", "extend", "insert", "pop", "popitem",
             "remove", "setdefault", "update"}


MODELS = ("tma_box/*.py", "tma_store/model.py", "tma_store/reduce_model.py",
          "tma_load/im2col_wide_model.py", "fences/model.py")


def test_suites_and_models_keep_no_state_in_their_modules():
    """A suite or a model keeps nothing in a module global: no container bound at the top
    of the module that a function changes (a method that changes it, an item or attribute
    assigned), no ``global``. What a run computes once belongs in a fixture, which the
    every-GPU plugin builds per GPU (test_multicast.py's cluster support was a module dict
    that the first GPU's thread filled for every GPU); how a model reads a load travels
    with the load (the tiled model's switch to seed 004's letter was a thread-local)."""
    bad = []
    models = [p for pattern in MODELS for p in sorted(FIXTURES.glob(pattern))]
    for path in sorted((ROOT / "suites").glob("*.py")) + models:
        tree = ast.parse(path.read_text())
        held = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name) and n.value is not None
                and (isinstance(n.value, (ast.Dict, ast.List, ast.Set, ast.DictComp,
                                          ast.ListComp, ast.SetComp))
                     or (isinstance(n.value, ast.Call) and ast.unparse(n.value.func) in
                         ("dict", "list", "set", "defaultdict", "collections.defaultdict",
                          "threading.local", "OrderedDict")))}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for x in ast.walk(fn):
                name = None
                if isinstance(x, ast.Global):
                    bad.append(f"{path.relative_to(ROOT)}:{x.lineno} global {', '.join(x.names)} in {fn.name}")
                elif (isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute)
                      and isinstance(x.func.value, ast.Name) and x.func.attr in _MUTATORS):
                    name = x.func.value.id
                elif isinstance(x, (ast.Assign, ast.AugAssign)):
                    for t in x.targets if isinstance(x, ast.Assign) else [x.target]:
                        if isinstance(t, (ast.Subscript, ast.Attribute)) and isinstance(t.value, ast.Name):
                            name = t.value.id
                if name in held:
                    bad.append(f"{path.relative_to(ROOT)}:{x.lineno} {fn.name} changes the module's {name}")
    assert len(models) >= 8
    assert not bad, "suites or models keeping state in module globals:\n  " + "\n  ".join(bad)


# The skips a suite may take in a test's body: each an answer only the run gets (the GPU,
# the driver or a library, asked while the case runs), never what a marker can say
# before it (a compute capability, a driver entry point, a tool, an installed package).
RUNTIME_SKIPS = {
    "test_fence_multi_gpu.py::test_two_gpu": "peer access between the pair: the driver's answer for those two GPUs",
    "test_fence_multi_gpu.py::test_proxy_fence_two_gpu": "peer access between the pair; a hand-off "
                                                         "without the proxy fence: an observation",
    "test_fence_scopes.py::_observe": "a report-only observation: no outcome is right or wrong",
    "test_fence_scopes.py::_judged": "what no document decides (a hand-off without the proxy fence, a "
                                     "barrier told fewer bytes than come): an observation, counted",
    "test_toolchain.py::test_ptx_newer_than_the_driver_is_an_environment_answer":
        "a driver that knows PTX 9.9 (CUDA 13.9 or later) loads it: nothing to classify",
    "test_host_encode.py::test_rule_case": "a replace case's base map that the rules and this driver both reject",
    "test_host_encode.py::test_cuda_core_matches_encode_tiled": "cuda.core in the child cannot make tensor maps",
    "test_host_encode.py::test_encoder_route": "the child has no CUDA runtime or no cuda-python for the route; "
                                               "a deprecated lookup's refusal is an observation",
    "test_host_encode.py::test_encoder_lookup": "the child has no CUDA runtime for the runtime's lookup",
    "test_tma_prefetch.py::test_prefetch_tensormap_of_a_global_map": "an observation: no document gives "
                                                                     "the prefetch an effect there",
    "test_library_maps.py::_result": "Triton in the child cannot run the case (its launcher's API differs)",
    "test_library_maps.py::_unavailable": "cuda.core in the child cannot make tensor maps",
    "test_library_maps.py::test_cuda_core_replace_address": "a host array taken where the GPU reaches "
                                                           "pageable memory: an observation",
    "test_library_maps.py::test_triton_host_map": "this Triton's host map bytes cannot be read",
    "test_library_maps.py::test_triton_device_map_reused": "Triton in the child cannot run the kernel",
    "test_multicast.py::test_multicast": "the GPU refused the cluster launch (measured in the child)",
    "test_multicast.py::test_cluster_size_runs": "a non-portable cluster size the occupancy query refuses",
    "test_node.py::test_usable_gpus": "the node's own case: the node has no usable GPU",
}


def test_suites_skip_by_marker():
    """What a case needs of the node is a marker on it (``requires_sm``,
    ``requires_driver_api``, ``requires_tool``: fixtures/plugins/run_control/capabilities.py; ``skipif``
    for an installed package), decided before the case runs: a suite's function calls
    ``pytest.skip`` only for an answer the run gets (RUNTIME_SKIPS, each with why), and
    every such entry still skips."""
    found = set()
    for path in sorted((ROOT / "suites").glob("*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and any(
                    isinstance(x, ast.Call) and ast.unparse(x.func) in ("pytest.skip", "pytest.importorskip")
                    for x in ast.walk(fn)):
                found.add(f"{path.name}::{fn.name}")
    assert found - set(RUNTIME_SKIPS) == set(), (
        "skips in a suite's function that a marker should say: "
        f"{sorted(found - set(RUNTIME_SKIPS))}")
    assert set(RUNTIME_SKIPS) - found == set(), f"no longer skip: {sorted(set(RUNTIME_SKIPS) - found)}"


def _isolation_targets() -> dict[str, str]:
    found = {}
    for d in ("fixtures", "suites", "reports"):
        for path in (ROOT / d).rglob("*.py"):
            for m in re.finditer(r"[\"'](fixtures\.[\w.]+:\w+)[\"']", path.read_text()):
                found.setdefault(m.group(1), str(path.relative_to(ROOT)))
    return found


def test_every_isolation_target_resolves():
    """A renamed target would fail only on a GPU, in the child: resolve each here."""
    from fixtures.cuda_layer.isolated_child import resolve_target
    from fixtures.cuda_layer.isolation import target_name
    targets = _isolation_targets()
    assert len(targets) >= 8, targets
    for name, where in targets.items():
        try:
            fn = resolve_target(name)
        except ModuleNotFoundError as e:
            # a target module that imports its library at the top (cute_dsl_kernels: the
            # CuTe DSL) resolves only where the library is: read its definitions instead
            assert not (e.name or "").startswith(("fixtures", "reports")), e
            module, _, func = name.partition(":")
            tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
            assert func in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, \
                f"{name} (named in {where}) is not a module-level function of {module}"
            continue
        assert callable(fn), f"{name} (named in {where}) is not callable"
        assert target_name(fn) == name, f"{name} (named in {where}) is not a module-level function"


def test_suites_use_public_names():
    """Suites import features from their packages, never a module's private name."""
    bad = []
    for path in sorted((ROOT / "suites").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fixtures"):
                bad += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                        if a.name.startswith("_")]
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and isinstance(node.value, ast.Name)
                    and node.value.id in ("ml", "de", "he", "tl", "fences", "enc", "st", "sweep")):
                bad.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not bad, "\n".join(bad)


def test_suite_fixtures_live_for_the_worker():
    """A suite's fixtures are function- or session-scoped, never module-, class- or
    package-scoped. Under xdist a worker runs units of several suite files in turn (the
    scheduler sends the largest first), and pytest tears a module fixture down whenever
    the next test is in another file: a module-scoped batch object was rebuilt on every
    return, its finished batches forgotten (the device-encoding fixture ~100 times a run,
    0.6 s each, on one H100)."""
    bad = []
    for path in sorted((ROOT / "suites").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None)
            if not isinstance(node, ast.Call) or getattr(func, "attr", getattr(func, "id", "")) != "fixture":
                continue
            for kw in node.keywords:
                value = getattr(kw.value, "value", None)
                if kw.arg == "scope" and value not in ("function", "session"):
                    bad.append(f"{path.name}:{node.lineno} scope={value!r}")
    assert not bad, "\n".join(bad)


def _registry():
    import fixtures.device_encode  # noqa: F401  (each feature registers its rules)
    import fixtures.fences  # noqa: F401
    import fixtures.host_encode  # noqa: F401
    import fixtures.plugins.run_control.harness  # noqa: F401
    import fixtures.tma_load  # noqa: F401
    import fixtures.tma_store  # noqa: F401
    import fixtures.toolchain  # noqa: F401
    from fixtures.rules import registry
    return registry.all_rules()


def _normalize(t: str) -> str:
    t = re.sub(r"\[([^\]]*)\]\(<[^>]*>(?: \"[^\"]*\")?\)", r"\1", t)     # [text](<target> "title")
    t = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", t)                       # [text](target)
    t = t.replace("`", "").replace("*", " ").replace("\\-", "-").replace("\\_", "_")
    t = t.replace("\u00c2\u00a0", " ").replace("\xa0", " ")
    return " ".join(t.split())


def test_the_registry_has_every_suite_rule():
    rules = _registry()
    assert len(rules) >= 60
    for r in rules.values():
        assert r.id and r.document and (r.quote or r.document.startswith(("measured", "fixtures/"))), r


def _readme_section(title: str) -> str:
    """The text of README.md's section (## or ###) of that title, up to the next heading."""
    m = re.search(rf"^#{{2,3}} {re.escape(title)}\n(.*?)(?=^#{{1,3}} |\Z)", (ROOT / "README.md").read_text(),
                  flags=re.M | re.S)
    assert m, f"README.md has no section '{title}', which a rule cites"
    return m.group(1)


@pytest.mark.parametrize("rule_id", sorted(_registry()))
def test_registered_rule_quotes_its_document(rule_id):
    """A rule from a seed document, or from this README (the harness's own rules), quotes
    it verbatim (its parts around "..." in order)."""
    r = _registry()[rule_id]
    import fixtures.host_encode as he
    if rule_id in he.RULES_BY_ID:
        pytest.skip("the host-encoding catalogue's sentences are checked by tests/test_rules.py")
    readme = re.match(r"this suite's README\.md, '([^']+)'", r.document)
    m = re.match(r"seed (\d{3})", r.document)
    if readme:
        text, m_name = _normalize(_readme_section(readme.group(1))), f"README.md, '{readme.group(1)}'"
    elif m:
        text, m_name = _normalize(seed(m.group(1))), f"seed {m.group(1)}"
    else:
        pytest.skip(f"{rule_id}: from {r.document}, not a seed document")
    at = 0
    for part in [p.strip() for p in _normalize(r.quote).split("...") if p.strip()]:
        i = text.find(part, at)
        assert i >= 0, f"{rule_id}: {part!r} is not in {m_name} (after offset {at})"
        at = i + len(part)


SUITE = """
import pytest

{marker}
def test_case():
    pass
"""


@pytest.mark.parametrize("marker,problem", [
    ("", "tests without a rule"),
    ('@pytest.mark.rule("no.such-rule")', "rules not in the registry"),
])
def test_a_suite_case_without_a_registered_rule_is_refused(tmp_path, marker, problem):
    from nested_run import make_tree, pytest_run
    root = make_tree(tmp_path / "t", "", name="placeholder.py")
    (root / "placeholder.py").unlink()
    (root / "suites").mkdir()
    (root / "suites" / "test_x.py").write_text(SUITE.format(marker=marker))
    cp = pytest_run(root, "--collect-only", "-q")
    assert cp.returncode == 4, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert problem in cp.stdout + cp.stderr
    # under xdist a usage error in a worker would be an INTERNALERROR: the case fails
    # in its setup instead, naming the problem
    cp = pytest_run(root, "-n", "2", "-q", f"--report-dir={tmp_path / 'out'}")
    assert cp.returncode == 1 and "INTERNALERROR" not in cp.stdout, cp.stdout[-3000:]
    assert "fix the suite" in cp.stdout and ("no rule" in cp.stdout or "not in the registry" in cp.stdout)
