"""Write dgprecompile/data/sglang_args/<version>.json: SGLang's server options, read from each release's wheel.

usage:
  python scripts/update_sglang_args.py [VERSION ...] [--check]
  python scripts/update_sglang_args.py --specforge-patch PATH   # SpecForge's patches/sglang/v0.5.14/spec-capture.patch
  python scripts/update_sglang_args.py --fetch VERSION ...        # only download the wheels (what `make setup` does)

The wheels are fetched with `pip download --no-deps` into .cache/sglang-wheels/ (kept for the next run and for the
tests). Nothing of sglang is imported: dgprecompile.planning.sglang_args reads the source with ast. Without VERSION
every bundled table is rewritten; --check only reports tables that differ from the wheel (exit 1).

The spec-capture table holds the options SpecForge 0.2.0's patch adds to sglang 0.5.14's ServerArgs
(--enable-spec-capture ...): the added lines of its server_args.py hunk, read the same way.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dgprecompile.planning.sglang_args import (  # noqa: E402
    OptionTable,
    dump_table,
    extract_options,
    sources_from_wheel,
)

DATA = REPO / "dgprecompile" / "data" / "sglang_args"
WHEELS = REPO / ".cache" / "sglang-wheels"
# one release per profile at least (profiles.yaml); 0.5.14 is SpecForge 0.2.0's pin
DEFAULT_VERSIONS = ["0.5.1", "0.5.3", "0.5.4", "0.5.9", "0.5.14", "0.5.18", "0.5.20", "0.5.23"]
# from 0.5.14 the wheels are built for one CPython; the files we read are the same in every build
BINARY_WHEEL = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--only-binary", ":all:"]


def local_wheel(version: str, wheels: Path = WHEELS) -> Path | None:
    """The sglang wheel of ``version`` already in ``wheels`` (no download), or None."""
    found = sorted((wheels / version).glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def wheel(version: str, wheels: Path = WHEELS) -> Path:
    """The sglang wheel of ``version`` in ``wheels``, downloaded with pip when absent."""
    folder = wheels / version
    found = local_wheel(version, wheels)
    if found is not None:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), f"sglang=={version}"]
    proc = subprocess.run(base, capture_output=True, text=True)
    if proc.returncode != 0:  # no pure-Python wheel for this interpreter: ask for the cp311 build explicitly
        proc = subprocess.run(base + BINARY_WHEEL, capture_output=True, text=True)
    found = sorted(folder.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"pip download sglang=={version} failed: {proc.stderr.strip()[-500:]}")
    return found[0]


def table_for(version: str, wheels: Path = WHEELS) -> OptionTable:
    path = wheel(version, wheels)
    return OptionTable(version, f"wheel:{path.name}", extract_options(sources_from_wheel(str(path))))


def patch_table(patch: Path) -> OptionTable:
    """The options a unified diff adds to sglang's srt/server_args.py (its '+' lines, inside class ServerArgs)."""
    added: list[str] = []
    in_file = False
    for line in patch.read_text().splitlines():
        if line.startswith("diff --git"):
            in_file = line.rstrip().endswith("srt/server_args.py")
        elif in_file and line.startswith("+") and not line.startswith("+++"):
            added.append(line[1:])
    if not added:
        raise SystemExit(f"{patch}: no lines added to srt/server_args.py")
    source = "class ServerArgs:\n" + "\n".join(added) + "\n"
    options = extract_options({"srt/server_args.py": source})
    for o in options:
        o.where = f"{patch.name} (server_args.py hunk)"
    return OptionTable("0.5.14+spec-capture", f"patch:{patch.parent.name}/{patch.name}", options)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("versions", nargs="*")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--specforge-patch", type=Path)
    ap.add_argument("--fetch", action="store_true", help="only download the VERSIONs' wheels into .cache/sglang-wheels")
    args = ap.parse_args(argv)
    if args.fetch:
        for version in args.versions:
            print(f"{wheel(version).relative_to(REPO)}")
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    if args.specforge_patch:
        (DATA / "specforge-spec-capture.json").write_text(dump_table(patch_table(args.specforge_patch)))
        return 0
    stale = []
    for version in args.versions or DEFAULT_VERSIONS:
        text = dump_table(table_for(version))
        target = DATA / f"{version}.json"
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(version)
        else:
            target.write_text(text)
            print(f"{target.relative_to(REPO)}: {text.count(chr(10)) - 1} options")
    if stale:
        print("differ from their wheels: " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
