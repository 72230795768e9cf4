"""`launch --capture` files only what Triton wrote inside the cache (issue 29 item 4), against a real Triton.

The job itself is the attacker: it replaces `$TRITON_CACHE_DIR` with a link to a folder outside the cache before
Triton writes there, hard-links a file of its entry from outside, or puts a file past the entry cap into it. Each
entry is reported, named, and not filed in the index, so pack never ships it.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap

from click.testing import CliRunner
from test_triton_capture import _clean_env, job, needs_triton  # noqa: F401  (fixtures)

from dgprecompile.cache.store import CacheStore
from dgprecompile.cli.main import cli

MIB = 1 << 20

# what the job does around Triton's compile (child.py, test_triton_capture.CHILD): before it, "link" puts a link to
# OUTSIDE in place of the area; after it, "hardlink" links each new entry's files from OUTSIDE, "big" adds a
# sparse 65 MiB file to each new entry
WRAP = textwrap.dedent("""
    import os, shutil, subprocess, sys
    how, outside = sys.argv[1], sys.argv[2]
    area = os.environ["TRITON_CACHE_DIR"]
    os.makedirs(outside, exist_ok=True)
    if how == "link":
        os.makedirs(os.path.dirname(area), exist_ok=True)
        shutil.rmtree(area, ignore_errors=True)
        os.symlink(outside, area)
    subprocess.run([sys.executable, "child.py", "add_kernel"], check=True)
    for entry in os.listdir(area):
        for name in os.listdir(os.path.join(area, entry)):
            if how == "hardlink":
                os.link(os.path.join(area, entry, name), os.path.join(outside, name))
        if how == "big":
            with open(os.path.join(area, entry, "big.bin"), "wb") as f:
                f.truncate(65 << 20)
""")


def capture(job, how: str, *extra: str):  # noqa: F811
    (job / "wrap.py").write_text(WRAP)
    return CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "cache", "--allow-missing",
                                    "--capture", *extra, "--", sys.executable, "wrap.py", how, str(job / "outside")],
                              catch_exceptions=False)


def filed(job) -> list[str]:  # noqa: F811
    return sorted(r.entry for r in CacheStore(job / "cache").read_index().extra.values() if r.area == "triton")


@needs_triton
def test_an_area_replaced_by_a_link_outside_is_not_filed(job):  # noqa: F811
    r = capture(job, "link")
    assert r.exit_code == 0, r.output
    (entry,) = os.listdir(job / "outside")  # Triton wrote its entry through the link, outside the cache
    assert filed(job) == []
    text = " ".join(r.output.split())
    assert f"Triton entry {entry} not filed: {job / 'cache' / 'triton'} is a symbolic link (to {job / 'outside'})" \
        in text, r.output


@needs_triton
def test_an_entry_hard_linked_from_outside_is_not_filed(job):  # noqa: F811
    r = capture(job, "hardlink")
    assert r.exit_code == 0, r.output
    (entry,) = os.listdir(job / "cache" / "triton")
    assert filed(job) == []
    assert f"Triton entry {entry} not filed" in r.output and "hard links" in r.output, r.output


@needs_triton
def test_an_entry_past_the_cap_is_not_filed_unless_raised(job):  # noqa: F811
    r = capture(job, "big")
    assert r.exit_code == 0, r.output
    (entry,) = os.listdir(job / "cache" / "triton")
    assert filed(job) == []
    text = " ".join(r.output.split())
    assert f"Triton entry {entry} not filed: triton/{entry} holds more than 64 MiB" in text, r.output
    assert "--max-entry-mib" in text
    shutil.rmtree(job / "cache")  # a fresh capture, the cap raised
    r = capture(job, "big", "--max-entry-mib", "80")
    assert r.exit_code == 0, r.output
    assert filed(job) == [entry]


@needs_triton
def test_a_moved_cache_whose_area_links_outside_is_not_rewritten_there(job):  # noqa: F811
    """launch points a moved cache's filed Triton entries at where they lie, rewriting their group files; where the
    area is a link to a folder outside the cache, those files are not the cache's and are left as they are."""
    r = capture(job, "none")
    assert r.exit_code == 0, r.output
    assert len(filed(job)) == 1
    shutil.move(job / "cache", job / "moved")
    shutil.move(job / "moved" / "triton", job / "elsewhere")
    os.symlink(job / "elsewhere", job / "moved" / "triton")
    before = {p: p.read_bytes() for p in (job / "elsewhere").rglob("*") if p.is_file()}
    r = CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "moved", "--allow-missing",
                                 "--", sys.executable, "-c", "pass"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "filed Triton entries pointed at" not in r.output
    assert {p: p.read_bytes() for p in (job / "elsewhere").rglob("*") if p.is_file()} == before
