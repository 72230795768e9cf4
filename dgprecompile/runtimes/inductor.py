"""The torch.compile (inductor) graphs SGLang compiles at a server's first forwards: planned per shape, built by
`warm` on the job's GPU kind, refused under strict by the startup hook on inductor's FX-graph-cache miss.

Facts come from ``data/inductor_graphs.yaml`` (checked against ``data/schemas/inductor-graphs.json``): per graph,
SGLang's module and function, how it is compiled (``automatic``: a bare ``@torch.compile``; ``dynamic``:
``dynamic=True``), which plans list it, and per release the file:line it was read from.

* planning: ``plan_items(...)`` -- one :class:`~dgprecompile.runtimes.items.InductorGraphItem` per graph and shape;
* compile: ``warm_argv(item, root, python)`` (``python -m dgprecompile.compile.inductor_graphs``: SGLang's own
  compiled function called at every specialisation, in one process with the GPU visible), ``needs_gpu`` (why a
  GPU-free warm leaves them);
* cache: its entries are inductor's (area ``inductor``: the FX graph cache, AOTAutograd's and the generated code)
  and the Triton kernels inductor generates (area ``triton``), whole entries filed in the index's ``extra``; the
  index's ``inductor`` section holds one record per item (cache/inductor_graphs.py);
* staleness: ``installed()`` -- the torch the graphs were built with (its version, from metadata only).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dgprecompile.data import load_yaml
from dgprecompile.runtimes.base import PackageKeyed, StrictBy
from dgprecompile.runtimes.captured import not_installed
from dgprecompile.runtimes.items import InductorGraphItem
from dgprecompile.runtimes.triton_moe import TRITON_PATH

DATA = "inductor_graphs.yaml"
SCHEMA = "inductor-graphs"


@dataclass(frozen=True)
class InductorGraphs(PackageKeyed):
    id: str = InductorGraphItem.RUNTIME
    label: str = "torch.compile (inductor) graphs"
    area: str = "inductor"
    kind: str = InductorGraphItem.kind
    warm_module: str = "dgprecompile.compile.inductor_graphs"
    areas: tuple[str, ...] = ("inductor", "triton")  # where its builds land (launch_env of both families)
    imports: tuple[str, ...] = ("torch", "triton", "sglang")
    live: tuple[str, ...] = ()
    needs_gpu: str = ("inductor's graph key holds the torch build and the GPU's name: warm where the job's GPU kind "
                      "is visible")
    section: str = InductorGraphItem.section  # the index section of its records (cache/item_records.py)
    parts: int = 8  # most subprocesses of one item side by side (within --jobs; compile/recorded_items.py)
    # -- staleness: the torch the graphs' key holds (runtimes/base.py PackageKeyed) --
    package: str = "torch"
    record_key: str = "torch"
    key_why: str = "inductor's key holds the torch build"

    @property
    def strict_by(self) -> StrictBy:
        """The startup hook refuses inductor's FX-graph-cache miss and Triton's compile (runtimes/captured.py)."""
        return StrictBy.HOOK

    def data(self) -> dict[str, Any]:
        return _document()

    def graph(self, name: str) -> dict[str, Any]:
        return self.data()["graphs"][name]

    # -- planning --
    @property
    def grad_variable(self) -> str:
        """The variable SGLang's DynamicGradMode reads (data ``grad_mode``)."""
        return str(self.data()["grad_mode"]["variable"])

    def grad_mode(self, value: str | None) -> str:
        """The grad mode a job whose environment holds ``value`` for ``grad_variable`` runs its forwards under:
        ``inference`` where SGLang reads it as true, else ``no_grad`` (unset, false or a value it does not know)."""
        return "inference" if (value or "").lower() in self.data()["grad_mode"]["true"] else "no_grad"

    @staticmethod
    def grad_shown(grad: str) -> str:
        """A grad mode as torch calls it (plan's notes, launch's refusal)."""
        return "torch.inference_mode" if grad == "inference" else "torch.no_grad"

    def plan_items(self, config: dict, *, tp: int, sglang_version: str | None, triton_moe: list,
                   device_name: str, grad: str = "no_grad") -> tuple[list[InductorGraphItem], list[str]]:
        """The items of a plan (its Triton MoE items, tensor-parallel size, release, the job's grad mode) and notes
        saying what was left out and why. Nothing is planned for a release whose source was not read."""
        items: list[InductorGraphItem] = []
        notes: list[str] = []
        for name, g in self.data()["graphs"].items():
            wanted = bool(triton_moe) if g["when"] == "triton-moe" else tp > 1
            if not wanted:
                continue
            where = g["releases"].get(sglang_version or "")
            if where is None:
                replaced = (g.get("replaced") or {}).get(sglang_version or "")
                notes.append(f"{self.label}: {g['label']}: " + (f"not compiled in sglang {sglang_version}: {replaced}"
                             if replaced else f"not planned: sglang {sglang_version}'s source was not read for it"))
                continue
            if g["when"] == "tp" and not isinstance(config.get("vocab_size"), int):
                notes.append(f"{self.label}: {g['label']}: not planned: config.json has no vocab_size")
                continue
            sm = triton_moe[0].capability if g["when"] == "triton-moe" else 0  # one GPU per plan
            if instead := _triton_instead(g, sglang_version, sm):
                notes.append(f"{self.label}: {g['label']}: not compiled in sglang {sglang_version} on sm_{sm}: a "
                             f"Triton kernel runs instead ({instead})")
                continue
            items += (_moe_sum_items(g, name, config, triton_moe, device_name, grad, where)
                      if g["when"] == "triton-moe" else [_vocab_item(name, config, tp, device_name, grad, where)])
        if items:
            mode = f"{self.grad_shown(grad)} ({self.grad_variable} as the job has it)"
            notes.append(f"{self.label}: {len(items)} planned under {mode}; {self.needs_gpu}")
        return items, notes

    def warm_argv(self, item: InductorGraphItem, cache_dir: str, python: str) -> list[str]:
        return [python, "-m", self.warm_module, "--item", item.id, "--graph", item.graph, "--params",
                ",".join(f"{k}={v}" for k, v in item.params), "--device-name", item.device_name, "--grad", item.grad,
                "--cache-dir", str(cache_dir)]

    def missing(self) -> str | None:
        """What to install so that the warm can run here (runtimes/captured.py not_installed)."""
        return not_installed(self.imports)

    def release_problem(self, items: list) -> str | None:
        """The graphs are built with whatever torch is here; their records name it (``stale``)."""
        return None

    def sequences_of(self, item: InductorGraphItem) -> int:
        """How many call sequences warm runs for the item (:func:`sequences`): at most that many of its parts
        have work, and warm shares its slots among the graphs by it (compile/recorded_items.py)."""
        return len(sequences(self.graph(item.graph), dict(item.params)))

    def build_env(self, items: list, jobs: int, cuda_home: str | None) -> dict[str, str]:
        """Inductor compiles each graph's kernels in the part's own process: warm spreads an item over parts already,
        and each part's pool of compile workers (one per core) would start a torch import beside it for the one or
        two kernels a graph has. Not in inductor's key (torch/_inductor/config.py ``_cache_config_ignore_prefix``)."""
        return {"TORCHINDUCTOR_COMPILE_THREADS": "1"}

    def covered(self, record: dict[str, Any]) -> str:
        return (f"{record.get('graphs', 0)} graphs, {len(record['entries'])} entries, torch {record.get('torch')} "
                f"on {record.get('gpu')}")


@cache
def _document() -> dict[str, Any]:
    """data/inductor_graphs.yaml, checked against its schema once per process."""
    from dgprecompile import schemas

    doc = load_yaml(DATA)
    schemas.check(doc, SCHEMA, DATA, hint=f"fix {DATA} (data/schemas/{SCHEMA}.json says what each field holds)")
    return doc


def _triton_instead(g: dict, sglang_version: str | None, capability: int) -> str | None:
    """Where the release runs a Triton kernel in the graph's place on a GPU of ``capability`` (data
    ``triton_at_capability``): the file:line read, else None."""
    at = g.get("triton_at_capability")
    if at is None or capability < int(TRITON_PATH.kernel(at["kernel"])["min_capability"]):
        return None
    return at["releases"].get(sglang_version or "")


def _moe_sum_items(g: dict, name: str, config: dict, triton_moe: list, device_name: str, grad: str,
                   where: str) -> list[InductorGraphItem]:
    scale = float(config.get("routed_scaling_factor") or 1.0)
    dtype = "bfloat16"
    out: dict[str, InductorGraphItem] = {}
    for moe in triton_moe:
        if moe.topk in g.get("skip_topk_at_unit_scale", ()) and scale == 1.0:
            continue
        item = InductorGraphItem(name, (("topk", moe.topk), ("hidden", moe.hidden), ("dtype", dtype),
                                        ("scale", scale), ("m_max", int(g["m_max"]))), device_name, grad, where)
        out.setdefault(item.id, item)
    return list(out.values())


def _vocab_item(name: str, config: dict, tp: int, device_name: str, grad: str, where: str) -> InductorGraphItem:
    return InductorGraphItem(name, (("vocab", int(config["vocab_size"])), ("tp", tp), ("dtype", "int64")),
                             device_name, grad, where)


INDUCTOR_GRAPHS = InductorGraphs()


def sequences(graph: dict[str, Any], params: dict[str, Any]) -> list[tuple[int, list[int]]]:
    """(rank, the m of one sequence) for every sequence the graph's compile mode asks for (compile/inductor_graphs.py's
    docstring): automatic, [m] for every m up to m_max, then [1, 2] and [2, 3]; dynamic, [1, 2] and [2, 3] per rank
    kind (rank 0, rank 1, the last rank)."""
    if graph["compile"] == "automatic":
        return [(0, [m]) for m in range(1, int(params["m_max"]) + 1)] + [(0, [1, 2]), (0, [2, 3])]
    tp = int(params["tp"])
    ranks = sorted({0, min(1, tp - 1), tp - 1})
    return [(rank, seq) for rank in ranks for seq in ([1, 2], [2, 3])]
