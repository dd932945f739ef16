"""The shape of the package: who imports whom, how long the command line's functions are.

The import graph is read from the source with :mod:`ast`, not by importing:
every ``import`` counts, at module level or inside a function (a lazy import
still makes the importer depend on the imported module, it only hides a
circle until run time). The command line is the top layer: nothing beneath
it imports it, and its own modules import one another one way only. And a
file named in a docstring or comment is a file of the repository.
"""

import ast
import pathlib
import re

import pytest

import skfed

PACKAGE = pathlib.Path(skfed.__file__).parent
ROOT = PACKAGE.parent
CLI = "skfed.cli"

#: ``python -m skfed``: the entry point, above the command line rather than beneath it.
ENTRY_POINTS = {"skfed.__main__"}

#: Modules outside ``skfed.cli`` that import it: none (issue 27: the core never imports
#: the command line; what runs at a site lives in ``skfed.data.steps``,
#: ``skfed.preprocessing`` and ``skfed.model_selection``). The set may only shrink.
KNOWN_CORE_TO_CLI = set()

#: The imports that close an import circle, each ``(importer, imported)``: none (issue
#: 35: site operations are declared beside their functions, so ``skfed.sites`` names no
#: estimator and sits below them). The set may only shrink.
KNOWN_CIRCLE_EDGES = set()

#: Circles among the command line's modules left today, each sorted. Issue 27 removes
#: this one: ``cli/inputs.py`` imports ``CLIError`` from ``cli/fit.py``, which imports
#: ``inputs``; importing it from ``cli/errors.py`` instead breaks it.
KNOWN_CLI_CIRCLES = []

#: The longest a function of these files may be, in lines (``def`` to its last line).
MAX_FUNCTION_LINES = 80
SHORT_FUNCTION_FILES = ("cli/describe.py", "cli/main.py", "cli/table1.py", "cli/fit.py",
                        "cli/remote.py", "cli/boosting_report.py", "cli/boosting_fit.py",
                        "cli/analyses.py", "cli/meta.py", "cli/mixed.py", "cli/km.py")


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules():
    """``{module name: path}`` of every module of the package."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _known(name, modules):
    """The longest prefix of the dotted ``name`` that is a module of the package
    (``skfed.cli.fit.CLIError`` -> ``skfed.cli.fit``), or ``None``."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imported(node, module, is_package, modules):
    """The package's modules an ``import`` or ``from ... import`` node names."""
    if isinstance(node, ast.Import):
        return {_known(alias.name, modules) for alias in node.names} - {None}
    if node.level:  # relative: from the module's own package, one step up per extra dot
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
    found = {_known(f"{source}.{alias.name}", modules) for alias in node.names}
    return found - {None}


def import_graph():
    """``{module: set of the package's modules it imports}``, lazy imports included."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imported(node, name, is_package, modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def circles(graph):
    """The import circles: each strongly connected component of more than one module,
    sorted (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _in_cli(module):
    return module == CLI or module.startswith(CLI + ".")


def _show(components):
    return "\n".join(f"  {len(c)} modules: " + ", ".join(c) for c in components) or "  none"


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_the_graph_sees_lazy_and_relative_imports(graph):
    # main imports describe inside main(), describe imports the site services inside a
    # function, html_report imports fit at module level: all three are edges
    assert "skfed.cli.describe" in graph["skfed.cli.main"]
    assert "skfed.sites" in graph["skfed.cli.describe"]
    assert "skfed.cli.fit" in graph["skfed.cli.html_report"]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _cli_circles(graph):
    return circles({m: {t for t in targets if _in_cli(t)}
                    for m, targets in graph.items() if _in_cli(m)})


def _core_to_cli(graph):
    """The modules outside the command line (and its entry point) that import it."""
    return {m for m, targets in graph.items()
            if not _in_cli(m) and m not in ENTRY_POINTS and any(_in_cli(t) for t in targets)}


def test_no_new_import_circle_among_the_command_line_modules(graph):
    found = _cli_circles(graph)
    new = [c for c in found if c not in KNOWN_CLI_CIRCLES]
    elsewhere = [c for c in circles(graph) if c not in found]
    assert not new, (
        f"import circles among the {CLI} modules (lazy imports count):\n{_show(new)}\n"
        "move what both sides need to a lower module.\n"
        f"Circles remaining in the rest of the package (issue 27):\n{_show(elsewhere)}")


def test_describe_and_its_html_report_import_one_way(graph):
    # both lay out Table 1 from skfed.cli.table1; the report never imports describe
    assert "skfed.cli.table1" in graph["skfed.cli.describe"]
    assert "skfed.cli.table1" in graph["skfed.cli.html_report"]
    assert "skfed.cli.describe" not in graph["skfed.cli.html_report"]
    assert not [c for c in circles(graph)
                if {"skfed.cli.describe", "skfed.cli.html_report"} <= set(c)]


def test_only_known_core_modules_import_the_command_line(graph):
    new = sorted(_core_to_cli(graph) - KNOWN_CORE_TO_CLI)
    assert not new, (
        f"{', '.join(new)} import(s) {CLI}: the core never imports the command line; move "
        f"what it needs out of {CLI}.\nCircles in the package today:\n"
        f"{_show(circles(graph))}")


def _without_known_edges(graph):
    return {m: targets - {t for source, t in KNOWN_CIRCLE_EDGES if source == m}
            for m, targets in graph.items()}


def test_no_import_circle_in_the_package_but_the_known_one(graph):
    new = circles(_without_known_edges(graph))
    assert not new, (
        f"import circles in the package (lazy imports count):\n{_show(new)}\n"
        "move what both sides need to a lower module.")


def test_the_known_exceptions_only_shrink(graph):
    gone = sorted(KNOWN_CORE_TO_CLI - _core_to_cli(graph))
    assert not gone, (f"{', '.join(gone)} no longer import(s) {CLI}: remove it from "
                      "KNOWN_CORE_TO_CLI so that it cannot come back")
    found = _cli_circles(graph)
    broken = [c for c in KNOWN_CLI_CIRCLES if c not in found]
    assert not broken, (f"{_show(broken)}\nis no longer a circle: remove it from "
                        "KNOWN_CLI_CIRCLES so that it cannot come back")
    components = [set(c) for c in circles(graph)]
    closed = sorted(edge for edge in KNOWN_CIRCLE_EDGES
                    if edge[1] not in graph.get(edge[0], ())
                    or not any(set(edge) <= c for c in components))
    assert not closed, (f"{closed} no longer close(s) an import circle: remove them from "
                        "KNOWN_CIRCLE_EDGES so that the circle cannot come back")


def _functions(path, code_only=False):
    """``(name, line, length)`` of every function of ``path``; ``code_only``: its lines
    after the docstring (the documentation of a public function is not its size)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = node.lineno
            if code_only and ast.get_docstring(node) is not None:
                start = node.body[0].end_lineno + 1
            yield node.name, node.lineno, node.end_lineno - start + 1


@pytest.mark.parametrize("relative", SHORT_FUNCTION_FILES)
def test_command_line_functions_are_short(relative):
    path = PACKAGE / relative
    long = [f"{name} (line {line}): {n} lines" for name, line, n in _functions(path)
            if n > MAX_FUNCTION_LINES]
    assert not long, (f"skfed/{relative}: functions over {MAX_FUNCTION_LINES} lines: "
                      + "; ".join(long))


def test_every_function_is_short():
    """No function of the package has more than MAX_FUNCTION_LINES lines of code (its
    docstring aside)."""
    long = [f"{path.relative_to(PACKAGE.parent)}: {name} (line {line}): {n} lines"
            for path in sorted(PACKAGE.rglob("*.py"))
            for name, line, n in _functions(path, code_only=True) if n > MAX_FUNCTION_LINES]
    assert not long, "functions over the limit:\n" + "\n".join(long)


#: a file of the repository named in a docstring or comment: ``docs/privacy.md``,
#: ``tests/_sites.py``, ``README.md`` (not ``results/NAME.csv``, an output)
_CITED = re.compile(r"(?<![\w./-])("
                    r"(?:skfed|tests|benchmarks|docs|examples)/[\w./-]*\w\.(?:py|md|rst)"
                    r"|[A-Z][A-Z_]+\.md)\b")


def test_cited_files_exist():
    if not (ROOT / "tests").is_dir():
        pytest.skip("an installed package: no repository around it")
    missing = []
    for top in ("skfed", "tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                missing += [f"{path.relative_to(ROOT)}:{k}: {m}" for m in _CITED.findall(line)
                            if not (ROOT / m).exists()]
    assert not missing, "files cited but absent:\n" + "\n".join(missing)


#: the packages of estimators and analyses, which declare their own site operations:
#: the site service (``skfed.sites``) sits below them and imports none (issue 35)
ESTIMATOR_PACKAGES = ("skfed.linear_model", "skfed.survival", "skfed.ensemble", "skfed.mixed",
                      "skfed.gee", "skfed.formula", "skfed.stats", "skfed.preprocessing",
                      "skfed.model_selection", "skfed.svm", "skfed.low_rank", "skfed.base",
                      "skfed.cli")


def test_the_site_service_imports_no_estimator(graph):
    """Everything ``skfed.sites`` imports, directly or not, lies below the estimators: it
    runs the operations they declare (``skfed.federation.operations``) and names none."""
    reached, stack = set(), [m for m in graph if m.startswith("skfed.sites")]
    while stack:
        for target in graph.get(stack.pop(), ()):
            if target not in reached:
                reached.add(target)
                stack.append(target)
    above = sorted(m for m in reached if m.startswith(ESTIMATOR_PACKAGES) or m == "skfed")
    assert not above, f"skfed.sites reaches {above}"
