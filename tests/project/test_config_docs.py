"""Configuration is discoverable (issue 11 point 7): the class docstrings list every config key
from the tables, docs/configuration.md is generated from the same tables and is up to date, and
every public class and method has a docstring that help() shows."""

from __future__ import annotations

import inspect
from pathlib import Path

import kafkalite
import pytest
from kafkalite import _docs
from kafkalite.client_config import CONSUMER_CONFIG, LOG_CONFIG, PRODUCER_CONFIG
from kafkalite.datadir import DIR_CONFIG_DEFS, TOPIC_CONFIG_DEFS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_reference_page_is_up_to_date():
    assert PAGE.read_text(encoding="utf-8") == _docs.render(), (
        "docs/configuration.md is stale: run `python -m kafkalite._docs`"
    )


def test_the_check_mode_reports_a_stale_page(tmp_path):
    page = tmp_path / "configuration.md"
    assert _docs.main(["--out", str(page), "--check"]) == 1
    assert _docs.main(["--out", str(page)]) == 0
    assert _docs.main(["--out", str(page), "--check"]) == 0


@pytest.mark.parametrize(
    "cls,table",
    [
        (kafkalite.Producer, PRODUCER_CONFIG),
        (kafkalite.Consumer, CONSUMER_CONFIG),
        (kafkalite.Log, LOG_CONFIG),
    ],
)
def test_class_docstrings_list_every_config_key(cls, table):
    doc = " ".join((inspect.getdoc(cls) or "").split())
    for key in table.keys.values():
        assert f"{key.name} ({key.type})" in doc and f"Default: {key.default!r}" in doc, key.name


def test_the_admin_docstring_lists_topic_and_data_directory_config():
    doc = " ".join((inspect.getdoc(kafkalite.Admin) or "").split())
    for d in [*TOPIC_CONFIG_DEFS, *DIR_CONFIG_DEFS]:
        assert f"{d['name']} ({d['type']})" in doc, d["name"]
    for d in TOPIC_CONFIG_DEFS:
        assert d["broker_name"] is None or d["broker_name"] in doc


def test_the_tables_are_what_the_clients_use():
    """Log's signature and the table agree; Producer and Consumer take their defaults from theirs."""
    params = inspect.signature(kafkalite.Log.__init__).parameters
    own = {n: p.default for n, p in params.items() if n not in ("self", "path")}
    assert own == LOG_CONFIG.defaults()
    from kafkalite import consumer, producer

    assert producer.DEFAULTS == PRODUCER_CONFIG.defaults()
    assert consumer.DEFAULTS == CONSUMER_CONFIG.defaults()


def test_log_defaults_are_the_topic_defaults_of_the_engine():
    """Log's size limits and clean()'s compaction settings default to the engine's topic table,
    written once in rust/src/storage/topic_config/mod.rs (Log used to write 1048588 and 1 << 30 itself)."""
    topic = {d["name"]: d["default"] for d in TOPIC_CONFIG_DEFS}
    log = inspect.signature(kafkalite.Log.__init__).parameters
    assert log["segment_bytes"].default == topic["segment.bytes"]
    assert log["max_message_bytes"].default == topic["max.message.bytes"]
    clean = inspect.signature(kafkalite.Log.clean).parameters
    assert clean["delete_retention_ms"].default == topic["delete.retention.ms"]
    assert clean["min_compaction_lag_ms"].default == topic["min.compaction.lag.ms"]


def _public_members(obj: object) -> list[tuple[str, object]]:
    if not inspect.isclass(obj):
        return []
    members = []
    for name, member in vars(obj).items():
        if name.startswith("_") and name not in ("__init__", "__call__"):
            continue
        if name == "__init__":
            continue  # documented by the class docstring
        if inspect.isfunction(member) or inspect.ismethoddescriptor(member) or isinstance(member, property):
            members.append((name, member))
    return members


def test_every_public_class_and_method_has_a_docstring():
    missing = []
    for name in kafkalite.__all__:
        obj = getattr(kafkalite, name)
        if name == "__version__":
            continue
        if not (inspect.getdoc(obj) or "").strip():
            missing.append(name)
        for member_name, member in _public_members(obj):
            if not (inspect.getdoc(member) or "").strip():
                missing.append(f"{name}.{member_name}")
    assert not missing, f"no docstring: {missing}"
