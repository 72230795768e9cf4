"""`dgprecompile plan`: every DeepGEMM key, m-bucket and kernel a model needs, from config.json alone."""

from __future__ import annotations

from pathlib import Path

import click

from dgprecompile.cli.options import output_in_a_folder, output_options, plan_options, resolve_plan
from dgprecompile.errors import InputError
from dgprecompile.fsutil import os_error
from dgprecompile.output import Output, styled
from dgprecompile.planning.manifest import dump_yaml, write_manifest
from dgprecompile.planning.plan import Plan


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _jit_table(out: Output, plan: Plan, family, modules) -> None:
    out.table(f"SGLang's own JIT modules (sglang {plan.sglang_version}, {family.label}; built at first use, "
              f"looked up under ${' / $'.join(family.cache_env)})",
              ["module", "template args", "used by", "builder"],
              [[m.name, ", ".join(m.template) or "-", m.path + (f" ({len(m.keys)} keys)" if m.keys else ""),
                f"{m.python}:{m.builder}"] for m in modules])


def _triton_moe_table(out: Output, plan: Plan, runtime, items) -> None:
    out.table(f"{runtime.label} (sglang {plan.sglang_version}; warm compiles each GPU-free, "
              f"python -m {runtime.warm_module})",
              ["experts (local/global)", "hidden", "intermediate", "topk", "m", "device", "layers"],
              [[f"{t.experts}/{t.global_experts}", t.hidden, t.intermediate, t.topk, t.m_text,
                f"{t.device_name} (sm_{t.capability})", "\n".join(t.layers)] for t in items])


def _inductor_table(out: Output, plan: Plan, runtime, items) -> None:
    out.table(f"{runtime.label} (sglang {plan.sglang_version}; warm builds them on the job's GPU kind, "
              f"python -m {runtime.warm_module})",
              ["graph", "shape", "device", "read from"],
              [[g.graph, ", ".join(f"{k}={v}" for k, v in g.params), g.device_name, g.why] for g in items])


def _flashinfer_table(out: Output, plan: Plan, runtime, items) -> None:
    out.table(f"{runtime.label} (sglang {plan.sglang_version}; warm builds each GPU-free with FlashInfer's own "
              f"builder, python -m {runtime.warm_module})",
              ["module", "flashinfer", "arch", "read from"],
              [[m.module, m.flashinfer, m.arch, m.why] for m in items])


def _triton_path_table(out: Output, plan: Plan, runtime, items) -> None:
    out.table(f"{runtime.label} (sglang {plan.sglang_version}; warm compiles them GPU-free with SGLang's own "
              f"wrappers, python -m {runtime.warm_module})",
              ["kernel", "shape", "m", "target", "read from"],
              [[runtime.kernel(t.kernel)["kernel"], ", ".join(f"{k}={v}" for k, v in t.params),
                ",".join(map(str, t.ms)), f"sm_{t.capability}", t.why] for t in items])


# how `plan` shows each runtime's items beside DeepGEMM's keys, by its kind (runtimes/base.py Runtime.kind)
TABLES = {"sglang-jit": _jit_table, "triton-moe": _triton_moe_table, "inductor-graph": _inductor_table,
          "flashinfer-module": _flashinfer_table, "triton-path": _triton_path_table}


def render_plan(out: Output, plan: Plan, show_buckets: bool) -> None:
    rows = []
    for pk in plan.keys:
        k = pk.key
        rows.append([k.kernel_type.value, k.n, k.k, k.num_groups, "\n".join(k.layers),
                     f"{k.m_min}..{k.m_max}", len(pk.buckets) if plan.heuristic else "?",
                     len(pk.kernel_ids) if plan.heuristic else "?"])
    out.table(f"{plan.model}  tp={plan.tp} ep={plan.ep}  sglang {plan.profile.id}  "
              f"({plan.profile.deepgemm_distribution} {plan.profile.deepgemm_version}, {plan.num_sms} SMs)",
              ["kernel_type", "n", "k", "groups", "layers", "m", "buckets", "kernels"], rows,
              no_wrap=("kernel_type", "n", "k", "groups", "m", "buckets", "kernels"))
    if show_buckets:
        brow = []
        for pk in plan.keys:
            for b in pk.buckets:
                brow.append([pk.key.kernel_type.short, pk.key.n, pk.key.k, pk.key.num_groups,
                             f"{b.m_min}..{b.m_max}", b.m_rep, b.kernel])
        out.table("m-buckets", ["type", "n", "k", "groups", "m", "m_rep", "kernel"], brow)
    if plan.heuristic:
        mins = plan.estimate_seconds() / 60
        out.data_text(f"{plan.total_kernels} distinct kernels; about {mins:.1f} min of serial compile; "
                      f"cache about {_human_bytes(plan.estimate_bytes())}")
    else:
        out.data_text(f"{len(plan.keys)} keys, keys only: DeepGEMM chooses the kernels at warm (sweep, on a GPU)")
    for runtime, items in plan.by_runtime()[1:]:  # every runtime's items beside DeepGEMM's (above), as its kind shows
        TABLES[runtime.kind](out, plan, runtime, items)
    table = plan.families()
    out.table(f"every JIT family at the first forward ({table['read_from']})", ["family", "kernels", "covered by",
              "strict"], [[r["family"], r["what"], f"{r['cover']}: {r['how']}", r["strict"]] for r in table["rows"]],
              no_wrap=("family",))
    if not table["read_here"]:
        out.note(f"the rows' paths were read from sglang {table['read_for']}; sglang {plan.profile.id} may build other "
                 "kernels of these families: a strict launch refuses each one the cache lacks, by name, and one "
                 "`launch --capture` run files them", wrap=True)
    for note in plan.notes:  # prose, folded at its spaces: a pipe's 80 columns show it all, nothing cut
        out.note(note, wrap=True)


PATH_OPTION = "-o"  # where this command is told to write: named in the hint of a file error


@click.command("plan")
@plan_options
@click.option("--format", "fmt", type=click.Choice(["table", "yaml", "json"]), default="table",
              help="Output format on stdout (--json is the same as --format json).")
@click.option("--buckets", "show_buckets", is_flag=True, help="Table format: list every m-bucket too.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, callback=output_in_a_folder,
              help="Write the plan as a YAML manifest for warm/verify/pack/launch (its folder must exist, or be one "
                   "new folder in an existing one).")
@click.option("--from-trace", "from_trace", type=click.Path(file_okay=False), default=None,
              help="Plan the calls recorded by `launch --trace DIR` (m range = observed min..max per key).")
@output_options
def command(plan_request, manifest, config, fmt, show_buckets, output, from_trace, out) -> None:
    """Enumerate every (kernel_type, n, k, num_groups, m-bucket) SGLang compiles for a model.

    Needs only the model's config.json: no GPU, no torch, no DeepGEMM.

    \b
    Examples:
      dgprecompile plan --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1
      dgprecompile plan --model Qwen3-Coder-480B --sglang 0.5.14 --format json
      dgprecompile plan --model ./my-model/ \\
          --specforge-cmd "torchrun ... --tp-size 8 --ep-size 8" -o plan.yaml
      dgprecompile plan --from-trace traces/ --sglang 0.5.14 -o plan.yaml
    """
    if out.json_mode and fmt == "yaml":
        raise InputError("--format yaml and --json contradict each other", hint="pass --format yaml or --json")
    plan = resolve_plan(plan_request, manifest, trace=from_trace)
    out.info("sglang profile ", styled(plan.profile.id, "bold"), f" ({plan.profile_reason}): {plan.profile.summary}",
             hanging=2)
    if fmt == "json" or out.json_mode:  # the manifest, and how each JIT family is covered
        out.data_json({**plan.to_dict(), "families": plan.families()})
    elif fmt == "yaml":
        out.data_text(dump_yaml(plan.to_dict()))
    else:
        render_plan(out, plan, show_buckets)
    if output:
        try:
            write_manifest(plan, Path(output))
        except OSError as exc:  # name the file asked for, not the temporary file beside it
            raise os_error(OSError(exc.errno, exc.strerror, output), "write", PATH_OPTION) from None
        out.info(f"manifest written to {output}", hanging=2)  # a long path on a line of its own, whole
