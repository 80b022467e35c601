"""Where benchmark scripts leave their figures: ``<name>.json`` (raw) and ``<name>.md`` (the
table quoted in the README and the issue notes), in ``benches/results`` by default."""

from __future__ import annotations

import json
import os


def write_report(out_dir: str, name: str, results: dict, lines: list[str]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out_dir, f"{name}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
