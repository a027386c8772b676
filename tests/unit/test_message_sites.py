"""The differential suite's message sites (read from sonic's source) and the mutation tool's changes to them."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from tests.integration.differential.calls import Outcome
from tests.integration.differential.reach import SiteHits, checked
from tests.integration.differential.sites import SONIC_ROOT, Site, SiteTable, find_sites

pytestmark = pytest.mark.unit

TOOL = Path(__file__).parents[2] / "tools" / "mutate_messages.py"
BATCH = "inference request batch-size must be <= {} for '{}'"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutate_messages", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch_site() -> Site:
    return next(s for s in find_sites() if BATCH in s.template)


def test_sites_are_read_with_their_words_and_classes() -> None:
    sites = find_sites()
    site = _batch_site()
    assert (site.path, site.error) == ("server/models/version.py", "InvalidArgumentError")
    # A message given through a local name is read from its assignment.
    assert any(s.template == "malformed protobuf message: truncated varint" for s in sites)
    assert len({s.id for s in sites}) == len(sites)


def test_a_message_is_placed_at_its_site_and_not_at_a_vaguer_one() -> None:
    table = SiteTable(find_sites())
    message = "model 'batched' version 1 input 'X': inference request batch-size must be <= 4 for 'batched'"
    assert [s.template for s in table.sites_of(message)] == [f"{{}}: {BATCH}"]
    assert table.sites_of("something sonic never says") == []


def test_hits_count_a_message_as_checked_only_where_it_was_compared() -> None:
    hits = SiteHits()
    message = "model 'm' input 'X': inference request batch-size must be <= 4 for 'm'"
    triton = Outcome(
        "INVALID_ARGUMENT", "[request id: <id_unknown>] inference request batch-size must be <= 4 for 'm'"
    )
    sonic = Outcome("INVALID_ARGUMENT", message)
    hits.record("t1", triton, sonic, "error-context")
    hits.record("t2", triton, sonic, "validation-order")
    site = next(s for s in hits.report()["by_site"] if BATCH in s["template"])
    assert (site["checked"], site["unchecked"], site["tests"]) == (1, 1, ["t1", "t2"])
    assert checked(sonic, sonic, None)
    assert not checked(triton, sonic, "validation-order")


def test_mutants_change_the_words_or_the_status_and_still_compile() -> None:
    tool = _tool()
    site = _batch_site()
    source = (SONIC_ROOT / "server" / "models" / "version.py").read_text(encoding="utf-8")
    text = tool.mutant_source(site, "text", source)
    assert "INFERENCE request batch-size must be <=" in text
    compile(text, "model.py", "exec")
    status = tool.mutant_source(site, "status", source)
    assert "raise NotFoundError(f" in status
    assert "from sonic.protocol.errors import NotFoundError" in status
    compile(status, "model.py", "exec")


@pytest.mark.parametrize(
    ("text", "swapped"),
    [
        ("': inference request", "': INFERENCE request"),
        (" of a b ITEMS", " of a b items"),
        ("a b c", None),
    ],
)
def test_the_swapped_word_has_four_letters_or_more(text: str, swapped: str | None) -> None:
    assert _tool()._swap_word(text) == swapped
