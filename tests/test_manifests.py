"""The checked-in manifests under shapes/ are exactly what the code plans today."""

from __future__ import annotations

from conftest import REPO

from dgprecompile.planning.bundled import render_all


def test_checked_in_manifests_are_current():
    rendered = render_all(REPO / "shapes")
    on_disk = {p.name for p in (REPO / "shapes").glob("*.yaml") if p.name != "index.yaml"}
    assert set(rendered) == on_disk, "shapes/ and shapes/index.yaml disagree: run `make shapes`"
    stale = [name for name, text in rendered.items() if (REPO / "shapes" / name).read_text() != text]
    assert not stale, f"manifests differ from the code's plan (run `make shapes` and review): {stale}"
