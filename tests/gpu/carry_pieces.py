"""Carry files larger than one device call allows (64 MiB of git-ignored paths per call) in back-to-back calls.

Issue 32: the torch 2.14.1 wheel (555 MB) and the sgl-deep-gemm wheels travel as one byte stream cut into pieces
of under 60 MiB. Driven by tests/gpu/carry_torch.sh, which documents the subcommands:

  split FILE...     here: .carry/pNN/{piece,MANIFEST.json} (git-ignored); prints which path each call carries
  keep              there, in each carry call: moves the piece(s) that call carried into .carry-held/ (never named
                    in a carry, so the next call leaves it alone), checks each piece's sha256, says what is held;
                    a call that carries every piece of another split replaces what is held (a lease's next artifact),
                    one that carries part of another split is refused
  join DEST         there: checks that every piece is held and whole, rebuilds each file into DEST and checks
                    each file's sha256 (and the stream's) against the manifest

Exit codes: 0 done, 1 a check failed (a piece missing or corrupt, a file's sha256 wrong), 2 bad usage.
Folders: CARRY_DIR (default .carry) and HELD_DIR (default .carry-held), relative to the working directory;
PIECE_BYTES (default 52 MiB) sets the piece size for split.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

MANIFEST = "MANIFEST.json"
# 52 MiB: the 64 MiB a call carries holds the working tree too (5.7 MB on 2026-12-02: 60 MiB pieces were refused;
# 9.7 MB on 2026-12-07: 57 MiB pieces would be too; tests/gpu/stack_0523.yaml piece_bytes is the same)
PIECE_BYTES = 52 * 1024 * 1024
BLOCK = 1 << 20


class Refusal(Exception):
    def __init__(self, code: int, message: str, hint: str) -> None:
        super().__init__(message)
        self.code, self.hint = code, hint


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()


def _dirs() -> tuple[str, str]:
    return os.environ.get("CARRY_DIR", ".carry"), os.environ.get("HELD_DIR", ".carry-held")


def _write_json(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _cut(files: list[str], carry: str, size: int) -> tuple[list[dict], str]:
    """Write FILE... (in order, as one stream) into pieces of at most ``size`` bytes: carry/pNN/piece."""
    pieces: list[dict] = []
    stream, out = hashlib.sha256(), None
    for path in files:
        with open(path, "rb") as src:
            while True:
                room = size - pieces[-1]["size"] if pieces and pieces[-1]["size"] < size else size
                block = src.read(min(BLOCK, room))
                if not block:
                    break
                if out is None or pieces[-1]["size"] == size:  # the next piece, only once there is data for it
                    if out is not None:
                        out.close()
                    name = f"p{len(pieces) + 1:02d}"
                    os.makedirs(os.path.join(carry, name))
                    out = open(os.path.join(carry, name, "piece"), "wb")
                    pieces.append({"name": name, "hash": hashlib.sha256(), "size": 0})
                out.write(block)
                stream.update(block)
                pieces[-1]["hash"].update(block)
                pieces[-1]["size"] += len(block)
    if out is not None:
        out.close()
    return [{"name": p["name"], "size": p["size"], "sha256": p["hash"].hexdigest()} for p in pieces], \
        stream.hexdigest()


def split(files: list[str]) -> int:
    """Cut FILE... into pieces under .carry/pNN/, each beside a copy of the whole manifest; print the calls."""
    carry, _ = _dirs()
    size = int(os.environ.get("PIECE_BYTES", PIECE_BYTES))
    missing = [f for f in files if not os.path.isfile(f)]
    if not files or missing:
        raise Refusal(2, f"no such file: {missing[0]}" if missing else "split needs at least one file",
                      "usage: carry_torch.sh split FILE...")
    if os.path.exists(carry):
        shutil.rmtree(carry)
    entries = [{"name": os.path.basename(f), "size": os.path.getsize(f), "sha256": _sha256(f)} for f in files]
    pieces, stream = _cut(files, carry, size)
    manifest = {"format": "carry_torch/1", "piece_bytes": size, "stream_sha256": stream, "files": entries,
                "pieces": pieces}
    for p in pieces:
        _write_json(os.path.join(carry, p["name"], MANIFEST), manifest)
    print(f"{len(pieces)} pieces of at most {size} bytes in {carry}/ for {len(files)} file(s), "
          f"{sum(e['size'] for e in entries)} bytes:")
    for i, p in enumerate(pieces, 1):
        print(f"  call {i}: carry [\"{carry}/{p['name']}\"]  ({p['size']} bytes); "
              "command: bash tests/gpu/carry_torch.sh keep")
    print("(the last call may run the proof instead: it keeps its own piece first; tests/gpu/README-torch214.md)")
    return 0


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            manifest = json.load(f)
        if manifest.get("format") != "carry_torch/1":
            raise ValueError(f"format {manifest.get('format')!r}")
        return manifest
    except (OSError, ValueError) as exc:
        raise Refusal(1, f"unreadable manifest {path}: {exc}", "run split again and carry every piece again") from exc


def _status(manifest: dict, held: str) -> tuple[list[str], list[str]]:
    have = [p["name"] for p in manifest["pieces"] if os.path.isfile(os.path.join(held, p["name"] + ".piece"))]
    return have, [p["name"] for p in manifest["pieces"] if p["name"] not in have]


def keep() -> int:
    """Move each carried .carry/pNN into .carry-held/ and check its sha256 there; say what is held and missing."""
    carry, held = _dirs()
    names = sorted(n for n in os.listdir(carry) if os.path.isdir(os.path.join(carry, n))) \
        if os.path.isdir(carry) else []
    os.makedirs(held, exist_ok=True)
    held_manifest = os.path.join(held, MANIFEST)
    manifests = [_load(os.path.join(carry, name, MANIFEST)) for name in names]
    if manifests and os.path.isfile(held_manifest) and _load(held_manifest) != manifests[0] \
            and all(m == manifests[0] for m in manifests) \
            and sorted(names) == sorted(p["name"] for p in manifests[0]["pieces"]):
        # this call carried a whole other split (one artifact per proof; a lease's next server): what is held is
        # a device-side copy of another carry, replaced, not joined with it
        for held_name in os.listdir(held):
            if held_name == MANIFEST or held_name.endswith(".piece"):
                os.remove(os.path.join(held, held_name))
        print(f"replaced the pieces held in {held}/ (another split's) with the whole split carried in {carry}/")
    for name, manifest in zip(names, manifests, strict=True):
        if os.path.isfile(held_manifest) and _load(held_manifest) != manifest:
            raise Refusal(1, f"{carry}/{name} belongs to another split than the pieces held in {held}/",
                          f"remove {held}/ and carry every piece of one split, in order")
        shutil.copy(os.path.join(carry, name, MANIFEST), held_manifest + ".tmp")
        os.replace(held_manifest + ".tmp", held_manifest)
        entry = next((p for p in manifest["pieces"] if p["name"] == name), None)
        src = os.path.join(carry, name, "piece")
        if entry is None or not os.path.isfile(src):
            raise Refusal(1, f"{carry}/{name} holds no piece its manifest lists", "run split again")
        if _sha256(src) != entry["sha256"]:
            raise Refusal(1, f"piece {name} arrived corrupt (sha256 differs from the manifest)",
                          f"carry {carry}/{name} again")
        os.replace(src, os.path.join(held, name + ".piece"))
        shutil.rmtree(os.path.join(carry, name))
        print(f"kept {name} ({entry['size']} bytes)")
    if not os.path.isfile(held_manifest):
        raise Refusal(1, f"nothing carried and nothing held (no {carry}/pNN here)",
                      f"name {carry}/p01 (then p02, ...) in this call's carry list")
    have, missing = _status(_load(held_manifest), held)
    print(f"held {len(have)} of {len(have) + len(missing)} pieces: {' '.join(have)}"
          + (f"; still to carry: {' '.join(missing)}" if missing else "; all held: run join"))
    return 0


def join(dest: str) -> int:
    """Every piece held and whole, then each file rebuilt into DEST and checked against its sha256."""
    _, held = _dirs()
    manifest = _load(os.path.join(held, MANIFEST))
    have, missing = _status(manifest, held)
    if missing:
        raise Refusal(1, f"pieces missing: {' '.join(missing)} (held: {' '.join(have) or 'none'})",
                      "carry each missing .carry/pNN in a call that runs carry_torch.sh keep, then join again")
    for p in manifest["pieces"]:
        path = os.path.join(held, p["name"] + ".piece")
        if os.path.getsize(path) != p["size"] or _sha256(path) != p["sha256"]:
            raise Refusal(1, f"piece {p['name']} is corrupt (size or sha256 differs from the manifest)",
                          f"carry .carry/{p['name']} again")
    os.makedirs(dest, exist_ok=True)
    stream = hashlib.sha256()
    pieces = iter(manifest["pieces"])
    src, left_in_piece = None, 0
    for entry in manifest["files"]:
        target, left = os.path.join(dest, entry["name"]), entry["size"]
        digest = hashlib.sha256()
        with open(target + ".part", "wb") as out:
            while left:
                if left_in_piece == 0:
                    if src is not None:
                        src.close()
                    piece = next(pieces)
                    src, left_in_piece = open(os.path.join(held, piece["name"] + ".piece"), "rb"), piece["size"]
                block = src.read(min(BLOCK, left, left_in_piece))
                out.write(block)
                digest.update(block)
                stream.update(block)
                left -= len(block)
                left_in_piece -= len(block)
        if digest.hexdigest() != entry["sha256"]:
            os.remove(target + ".part")
            raise Refusal(1, f"{entry['name']} rebuilt with the wrong sha256", "run split again and carry again")
        os.replace(target + ".part", target)
        print(f"joined {entry['name']} ({entry['size']} bytes, sha256 {entry['sha256']} checked)")
    if src is not None:
        src.close()
    if stream.hexdigest() != manifest["stream_sha256"]:
        raise Refusal(1, "the joined stream's sha256 differs from the manifest", "run split again and carry again")
    return 0


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["split"]:
            return split(argv[1:])
        if argv == ["keep"]:
            return keep()
        if argv[:1] == ["join"] and len(argv) == 2:
            return join(argv[1])
        raise Refusal(2, f"unknown command: {' '.join(argv) or '(none)'}",
                      "usage: carry_torch.sh split FILE... | keep | join DEST [TARGET]")
    except Refusal as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
