"""The C++-JIT DeepGEMM runtimes: sgl-kernel / sglang-kernel's bundled DeepGEMM and sgl-deep-gemm 0.1.x/0.2.x.

Their generations are data: one :class:`~dgprecompile.runtimes.deepgemm.Generation` per entry of
``dgprecompile/data/deepgemm_cxx.yaml`` (checked against ``data/schemas/deepgemm-generations.json``; what differs
between them is fields, never code: the heuristic and key scheme each names live in planning/heuristics and keys/).
A new release line is one more entry there, plus its key scheme and heuristic where they are new.
"""

from __future__ import annotations

from typing import Any

from dgprecompile import schemas
from dgprecompile.data import load_yaml
from dgprecompile.errors import InputError
from dgprecompile.runtimes.base import StrictBy
from dgprecompile.runtimes.deepgemm import Generation

DATA = "deepgemm_cxx.yaml"
SCHEMA = "deepgemm-generations"
_TUPLES = ("backends", "fingerprint_fields", "entry_files", "keys_proven_versions")


def generations_from(doc: Any, where: str = DATA) -> tuple[tuple[Generation, ...], dict[str, tuple[str, ...]]]:
    """The generations a document of the deepgemm-generations format lists, and its named release lists; one
    InputError naming the field where the document is not of that format."""
    schemas.check(doc, SCHEMA, where, hint=f"fix {where} (data/schemas/{SCHEMA}.json says what each field holds)")
    lists = {name: tuple(versions) for name, versions in doc["key_versions"].items()}
    out = []
    for i, entry in enumerate(doc["generations"]):
        fields = {**doc.get("shared", {}).get(entry.get("uses"), {}), **entry}
        if entry.get("uses") is not None and entry["uses"] not in doc.get("shared", {}):
            raise InputError(f"{where}: generations[{i}].uses: no shared fields named {entry['uses']!r}",
                             hint=f"name one of {', '.join(doc.get('shared', {}))}")
        if fields["key_versions"] is not None and fields["key_versions"] not in lists:
            raise InputError(f"{where}: generations[{i}].key_versions: no release list named {fields['key_versions']!r}",
                             hint=f"name one of {', '.join(lists)} (under key_versions)")
        out.append(_generation(fields, lists))
    return tuple(out), lists


def _generation(fields: dict[str, Any], lists: dict[str, tuple[str, ...]]) -> Generation:
    fields = {k: v for k, v in fields.items() if k != "uses"}
    for name in _TUPLES:
        if fields.get(name) is not None:
            fields[name] = tuple(fields[name])
    fields["key_versions"] = None if fields["key_versions"] is None else lists[fields["key_versions"]]
    fields["strict_by"] = StrictBy(fields["strict_by"])
    fields["gpu_checked_m"] = tuple((fields.get("gpu_checked_m") or {}).items())
    return Generation(**fields)


CXX_GENERATIONS, KEY_VERSIONS = generations_from(load_yaml(DATA))
# the releases each key scheme's calculator was read for (tests tie them to keys/cxx_templates.py)
SDG_01_KEY_VERSIONS = KEY_VERSIONS["sdg-01"]
SK_KEY_VERSIONS = KEY_VERSIONS["sk"]
SK_037_KEY_VERSIONS = KEY_VERSIONS["sk-037"]
SK_0320_KEY_VERSIONS = KEY_VERSIONS["sk-0320"]
SDG_02_KEY_VERSIONS = KEY_VERSIONS["sdg-02"]
