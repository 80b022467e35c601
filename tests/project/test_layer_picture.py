"""The maps of the code stay true (issue 12 point 7): the README's layer picture names every
module of the Python package, the binding and the engine, and lib.rs's layer sentence names
every module of the crate. A new file that neither names fails here, not in a reader's head."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layer_picture() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layers\n", 1)[1]
    return section.split("```", 2)[1]


def words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


# The folders whose files the picture lists by file name; the engine's sub-folders (log/,
# segment/, record/, server/...) are listed as `folder/{a,b}.rs` or by their modules' names.
LISTED_BY_FILE = [
    "python/kafkalite",
    *(
        f"python/kafkalite/{sub}"
        for sub in ("producer", "consumer", "groups", "transactions", "cli", "spark")
    ),
    "rust/src",
    "rust/src/py",
]


def test_the_readme_layer_picture_names_every_module():
    picture = layer_picture()
    named, missing = words(picture), []
    for path in sorted(
        [*(ROOT / "python" / "kafkalite").rglob("*.py"), *(ROOT / "rust" / "src").rglob("*.rs")]
    ):
        if path.name in ("__init__.py", "mod.rs"):
            continue
        folder = str(path.parent.relative_to(ROOT))
        if folder in LISTED_BY_FILE and not re.search(rf"(?<![\w/]){re.escape(path.name)}\b", picture):
            missing.append(f"{folder}/{path.name}")
        elif folder not in LISTED_BY_FILE and path.stem not in named:
            missing.append(f"{folder}/{path.name}")
    assert not missing, f"README.md's layer picture does not name {missing}"


def test_the_crate_layer_sentence_names_every_module():
    lib = (ROOT / "rust" / "src" / "lib.rs").read_text(encoding="utf-8")
    doc = "\n".join(line[3:] for line in lib.splitlines() if line.startswith("//!"))
    declared = re.findall(r"^(?:pub )?mod (\w+);", lib, re.MULTILINE)
    for layer in ("storage", "coordination"):  # and the modules each layer folder declares
        text = (ROOT / "rust" / "src" / layer / "mod.rs").read_text(encoding="utf-8")
        declared += re.findall(r"^(?:pub )?mod (\w+);", text, re.MULTILINE)
    assert "segment" in declared and "py" in declared  # the pattern reads the declarations
    named = set(re.findall(r"`(\w+)`", doc))
    missing = [m for m in declared if m not in named]
    assert not missing, f"lib.rs's layer sentence does not name the modules {missing}"


# The server's import graph: the modules of rust/src/server/ and the `use`s and paths between
# them (crate::server::..., super::..., a child named bare), test modules left out.
SERVER = ROOT / "rust" / "src" / "server"
LARGEST_SERVER_CYCLE = 4  # broker with the pieces of state that take it whole (offsets, txn ends, creations)


def _module(path: Path, server: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(server.parent).with_suffix("").parts)
    return tuple(parts[:-1] if parts[-1] == "mod" else parts)


def _expand(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    if "{" not in tree:
        return [tree]
    i = tree.index("{")
    prefix, inner, items, item, depth = tree[:i], tree[i + 1 : tree.rindex("}")], [], "", 0
    for ch in inner:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    return [path for item in items if item for path in _expand(prefix + item)]


def _paths(text: str) -> list[str]:
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", re.sub(r"//[^\n]*", "", text))[0]
    uses = re.findall(r"\buse\s+([^;]+);", text)
    rest = re.sub(r"\buse\s+[^;]+;", "", text)
    return [p for use in uses for p in _expand(use)] + re.findall(r"(?<![\w:])\w+(?:::\w+)+", rest)


def server_imports(server: Path = SERVER) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    modules = {_module(p, server) for p in server.rglob("*.rs")}
    graph: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in modules}
    for path in server.rglob("*.rs"):
        here = _module(path, server)
        for ref in _paths(path.read_text(encoding="utf-8")):
            parts = [p for p in ref.split("::") if p]
            if parts[0] == "crate":
                full = parts[1:]
            elif parts[0] in ("super", "self") or here + (parts[0],) in modules:
                base = list(here)
                while parts[0] in ("super", "self"):
                    base = base[:-1] if parts.pop(0) == "super" else base
                    if not parts:
                        break
                full = base + parts
            else:
                continue
            target = next(
                (tuple(full[:n]) for n in range(len(full), 0, -1) if tuple(full[:n]) in modules), None
            )
            if target and target != here:
                graph[here].add(target)
    return graph


def largest_cycle(graph: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[tuple[str, ...]]:
    """The largest strongly connected component (Tarjan's algorithm, iterative)."""
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    largest: list[tuple[str, ...]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    component.append(w)
                    if w == v:
                        break
                largest = max(largest, component, key=len)
    return largest


def test_the_servers_largest_import_cycle_is_a_few_files():
    graph = server_imports()
    assert ("server", "state", "broker") in graph[
        ("server", "handlers", "produce")
    ]  # the parser reads imports
    cycle = largest_cycle(graph)
    names = sorted("::".join(m[1:]) for m in cycle)
    assert len(cycle) <= LARGEST_SERVER_CYCLE, (
        f"{len(cycle)} server modules import each other in a cycle: {names}"
    )


def upward_imports(server: Path = SERVER) -> list[str]:
    """Imports against the server's layers: state never imports a handler, security (the ACL model,
    principals, credentials) neither a handler nor the network nor state, the network no handler
    (it reaches them through `dispatch`)."""
    below = {"state": {"handlers"}, "security": {"handlers", "network", "state"}, "network": {"handlers"}}
    return [
        f"{'::'.join(m[1:])} -> {'::'.join(t[1:])}"
        for m, targets in server_imports(server).items()
        for t in targets
        if len(m) > 2 and len(t) > 2 and t[1] in below.get(m[1], set())
    ]


def test_the_servers_state_and_security_never_import_a_handler_nor_the_network_a_handler():
    wrong = upward_imports()
    assert ("server", "state") in {m[:2] for m in server_imports()}  # the folders are read
    assert not wrong, f"the server's layers are imported upwards: {wrong}"


# The crate's layers (rust/src's folders) and the layers each must never import: storage knows
# nothing above it, coordination (Kafka's coordinators' state) builds on storage alone, the
# embedded producer and the Spark rows on storage alone, the server on all but the binding.
SRC = ROOT / "rust" / "src"
NEVER_IMPORTS = {
    "storage": {"coordination", "producer", "server", "spark", "py"},
    "coordination": {"producer", "server", "spark", "py"},
    "producer": {"coordination", "server", "spark", "py"},
    "spark": {"coordination", "producer", "server", "py"},
    "server": {"producer", "spark", "py"},
}


def layer_imports(src: Path = SRC) -> set[tuple[str, str]]:
    """(layer, layer it imports) for every `crate::<layer>::...` path (use trees too) in a
    folder's files, test modules left out."""
    layers = {p.name for p in src.iterdir() if p.is_dir()}
    edges = set()
    for path in src.rglob("*.rs"):
        here = path.relative_to(src).parts[0]
        if here not in layers:
            continue
        for ref in _paths(path.read_text(encoding="utf-8")):
            parts = [p for p in ref.split("::") if p]
            if parts[0] == "crate" and len(parts) > 1 and parts[1] in layers and parts[1] != here:
                edges.add((here, parts[1]))
    return edges


def test_the_crates_layers_never_import_a_layer_above_them():
    edges = layer_imports()
    assert ("py", "storage") in edges and ("server", "coordination") in edges  # the parser reads the layers
    assert set(NEVER_IMPORTS) | {"py"} == {
        p.name for p in SRC.iterdir() if p.is_dir()
    }  # every layer has its rule
    wrong = sorted(f"{a} -> {b}" for a, b in edges if b in NEVER_IMPORTS.get(a, set()))
    assert not wrong, f"the crate's layers are imported upwards: {wrong}"
