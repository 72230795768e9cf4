"""Install only the `deep_gemm/` package of a downloaded wheel into a site-packages (what `make setup` uses).

The legacy Python-JIT DeepGEMM that sglang 0.5.0-0.5.1.x runs ships inside sgl-kernel 0.3.5: a 294 MiB wheel
(1.1 GB installed) of which dgprecompile needs the 27 MB `deep_gemm/` package. This copies that package out of
the wheel and writes a small `<dist>-<version>.dist-info` beside it (METADATA, INSTALLER, and a RECORD listing
only the files copied, with the wheel's own hashes), so `importlib.metadata` reports the same distribution and
version as a full install: the cache fingerprint (and every key derived from it) is the one a job with the
whole sgl-kernel computes, and `pip uninstall sgl-kernel` removes exactly these files.

With --fetch it first downloads the wheel (`pip download --no-deps`) into a scratch directory and deletes it
afterwards, so set-up keeps only the package, never the wheel (six of them were 2.0 GB inside .venv).
The device scripts (tests/gpu/fetch_generation_wheels.sh) take the same package out of a wheel as a tarball
of `deep_gemm/` alone (--tgz; --no-so leaves out the compiled extensions, rebuilt from source on the device):
this is the one place that knows which members of a wheel are the package.

    python tools/unpack_deep_gemm.py --fetch REQUIREMENT SITE_PACKAGES
    python tools/unpack_deep_gemm.py [--tgz [--no-so]] WHEEL SITE_PACKAGES|OUT.tgz
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

PACKAGE = "deep_gemm/"


def package_members(zf: zipfile.ZipFile, wheel: Path, with_so: bool = True) -> list[str]:
    """The files of the wheel's deep_gemm/ package (without its .so files unless ``with_so``)."""
    members = [n for n in zf.namelist() if n.startswith(PACKAGE) and not n.endswith("/")
               and (with_so or not n.endswith(".so"))]
    if not members:
        raise SystemExit(f"{wheel} holds no {PACKAGE} package")
    return members


def to_tarball(wheel: Path, out: Path, with_so: bool = True) -> int:
    """deep_gemm/ alone as a gzip tarball (what the device scripts untar into a site-packages)."""
    with zipfile.ZipFile(wheel) as zf, tarfile.open(out, "w:gz") as tar:
        members = package_members(zf, wheel, with_so)
        for name in members:
            data = zf.read(name)
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755 if name.endswith(".so") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return len(members)


def unpack(wheel: Path, site: Path) -> tuple[str, str, int]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info_dir = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        meta = Parser().parsestr(zf.read(f"{info_dir}/METADATA").decode())
        dist, version = meta["Name"], meta["Version"]
        record = {row[0]: row for row in csv.reader(io.StringIO(zf.read(f"{info_dir}/RECORD").decode())) if row}
        members = package_members(zf, wheel)
        if (site / PACKAGE).exists():
            shutil.rmtree(site / PACKAGE)
        for name in members:
            target = site / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    out_info = site / info_dir
    if out_info.exists():
        shutil.rmtree(out_info)
    out_info.mkdir()
    (out_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        f"Summary: only the {PACKAGE} package of {wheel.name}, unpacked by dgprecompile's `make setup`\n")
    (out_info / "INSTALLER").write_text("dgprecompile-make-setup\n")
    rows = [record.get(n, [n, "", ""]) for n in members]
    rows += [[f"{info_dir}/{n}", "", ""] for n in ("METADATA", "INSTALLER", "RECORD")]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (out_info / "RECORD").write_text(buf.getvalue())
    return dist, version, len(members)


def fetch_and_unpack(requirement: str, site: Path) -> tuple[str, str, int]:
    """Download ``requirement``'s wheel into a scratch directory, unpack its deep_gemm/ into ``site``, delete it."""
    with tempfile.TemporaryDirectory(prefix="dgprecompile-wheel-") as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                        "-d", scratch, requirement], check=True)
        wheels = sorted(Path(scratch).glob("*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"pip download {requirement}: expected one wheel, got {[w.name for w in wheels]}")
        return unpack(wheels[0], site)


def main(argv: list[str]) -> int:
    flags = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    fetch = "--fetch" in flags
    if (len(args) != 2 or flags - {"--tgz", "--no-so", "--fetch"} or ("--no-so" in flags and "--tgz" not in flags)
            or (fetch and flags != {"--fetch"})):
        print("\n".join(line.strip() for line in __doc__.strip().splitlines()[-2:]), file=sys.stderr)
        return 2
    if "--tgz" in flags:
        count = to_tarball(Path(args[0]), Path(args[1]), with_so="--no-so" not in flags)
        print(f"wrote {PACKAGE} only ({count} files) of {Path(args[0]).name} to {args[1]}")
        return 0
    site = Path(args[1])
    dist, version, count = fetch_and_unpack(args[0], site) if fetch else unpack(Path(args[0]), site)
    print(f"installed {PACKAGE} only ({count} files) from {dist} {version} into {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
