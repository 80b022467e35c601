"""The maps of the code stay true (issue 12 point 7): the README's layer picture names every
module of the Python package, the binding and the engine, and lib.rs's layer sentence names
every module of the crate. A new file that neither names fails here, not in a reader's head."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layer_picture() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layers\n", 1)[1]
    return section.split("```", 2)[1]


def words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


# The folders whose files the picture lists by file name; the engine's sub-folders (log/,
# segment/, record/, server/...) are listed as `folder/{a,b}.rs` or by their modules' names.
LISTED_BY_FILE = ["python/kafkalite", "python/kafkalite/spark", "rust/src", "rust/src/py"]


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
    assert "segment" in declared and "py" in declared  # the pattern reads the declarations
    named = set(re.findall(r"`(\w+)`", doc))
    missing = [m for m in declared if m not in named]
    assert not missing, f"lib.rs's layer sentence does not name the modules {missing}"
