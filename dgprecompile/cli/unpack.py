"""`dgprecompile unpack`: check an artifact completely, then merge its entries into the cache atomically."""

from __future__ import annotations

import click

from dgprecompile.cache.artifact import UnpackResult, unpack_artifact
from dgprecompile.cache.remote import is_url, redact
from dgprecompile.cache.store import CacheStore
from dgprecompile.cli.options import output_options
from dgprecompile.errors import InputError
from dgprecompile.output import Output


@click.command("unpack")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="DeepGEMM cache directory to merge into (default: the one the packed sglang profile's runtime uses).")
@click.option("--force", is_flag=True,
              help="Unpack even if the artifact's fingerprint differs from this environment or cannot be checked.")
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use here (default: the one the artifact was built with, else as found).")
@click.option("--num-sms", type=int, default=None, help="SM count of the GPUs here (default: not compared).")
@output_options
def command(artifact, cache_dir, force, nvcc, num_sms, out) -> UnpackResult:
    """Merge a `dgprecompile pack` artifact (a file, or an fsspec URL) into the DeepGEMM cache.

    Before touching the cache it reads the whole archive: format, every member's sha256, no absolute paths,
    no `..`, no links or devices; and it compares the artifact's fingerprint with this environment (refused
    with the differing fields unless --force). Entries are installed whole, one rename each; an existing
    entry is never overwritten. On any failure the cache is left as it was.

    \b
    Examples:
      dgprecompile unpack deepgemm-3f2a9c0d1e2b4a5c.tar.gz --cache-dir /shared/deep_gemm
      dgprecompile unpack cache.tar.gz --cache-dir /shared/deep_gemm && dgprecompile verify --manifest plan.yaml --cache-dir /shared/deep_gemm
      dgprecompile unpack s3://my-bucket/dg/deepgemm-3f2a9c0d1e2b4a5c.tar.gz   # downloads beside the cache first
    """
    if num_sms is not None and num_sms < 1:
        raise InputError("--num-sms must be a positive integer", hint="pass the SM count of the GPUs here, e.g. 132")
    store = CacheStore(cache_dir) if cache_dir else None
    if is_url(artifact):
        from dgprecompile.cache.fleet import unpack_url

        result, size, seconds = unpack_url(artifact, store, force=force, nvcc=nvcc, num_sms=num_sms)
        out.info(f"downloaded {redact(artifact)}: {size / 1e6:.2f} MB in {seconds:.2f} s")
    else:
        result = unpack_artifact(artifact, store, force=force, nvcc=nvcc, num_sms=num_sms)
    for warning in result.warnings:
        out.warn(warning)
    for name in result.kept:
        out.warn(f"kept the existing {name}: it differs from the artifact's")
    return out.report(result, render)


def render(out: Output, result: UnpackResult) -> None:
    out.data_text(f"unpacked into {result.cache_dir}: {len(result.added)} entries added, {len(result.present)} already "
                  f"present, {len(result.kept)} kept (existing differs); {result.indexed} index records added; "
                  f"fingerprint {result.fingerprint_id}")
