"""`dgprecompile pack`: one deterministic archive of a warmed cache's planned entries, index and fingerprint."""

from __future__ import annotations

import click

from dgprecompile.cache.pack import PackResult, pack_cache
from dgprecompile.cache.remote import is_url
from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cli.options import (
    cache_dir_option,
    output_in_a_folder,
    output_options,
    plan_options,
    resolve_plan,
    signing_key_option,
    size_cap_options,
)
from dgprecompile.output import Output

PATH_OPTION = "-o"  # where this command is told to write: named in the hint of a file error
# pack reads the cache and writes -o (a temporary file beside it, renamed when whole): what an interruption leaves
INTERRUPTED = "interrupted: no artifact was written at -o (nothing half-written beside it) and the cache is untouched"


@click.command("pack")
@plan_options
@cache_dir_option
@click.option("-o", "--output", required=True, metavar="ARTIFACT", callback=output_in_a_folder,
              help="Archive to write (.tar.gz): a path (its folder must exist, or be one new folder in an existing "
                   "one) or an fsspec URL (s3://, gs://, az://, file://); `{fingerprint}` in it becomes the cache's "
                   "fingerprint id.")
@click.option("--allow-missing", is_flag=True, help="Pack even if some planned kernels are not in the cache.")
@size_cap_options
@signing_key_option
@output_options
def command(plan_request, manifest, config, cache_dir, output, allow_missing, limits, signing_key,
            out) -> PackResult:
    """Pack the plan's cache entries, the index and the fingerprint into one compressed archive.

    The same cache packs to the same bytes. The final path is printed on stdout, so CI can pick it up;
    put `{fingerprint}` in the name to key a CI cache on the environment the kernels were built for.
    Refuses a cache that lacks planned kernels (unless --allow-missing) or whose entries no longer match
    the index, and any entry reached through a symbolic link, holding a hard-linked file or past the size caps:
    only the cache's own files are packed, streamed (memory does not grow with their size). With --signing-key (or $DGPRECOMPILE_SIGNING_KEY) an Ed25519 signature of the manifest is
    written beside it as ARTIFACT.sig.

    \b
    Examples:
      dgprecompile pack --manifest plan.yaml --cache-dir .cache/deep_gemm \\
          -o out/deepgemm-{fingerprint}.tar.gz
      dgprecompile pack --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1 \\
          -o cache.tar.gz --signing-key ci.key
      dgprecompile pack --manifest plan.yaml \\
          -o 's3://my-bucket/dg/deepgemm-{fingerprint}.tar.gz'   # [s3] extra
    """
    plan = resolve_plan(plan_request, manifest)
    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    if is_url(output):
        from dgprecompile.cache.fleet import pack_to
        from dgprecompile.cli.push import render as render_upload

        report = pack_to(plan, store, output, allow_missing=allow_missing, replace=True, command="pack",
                         signing_key=signing_key, limits=limits)
        for warning in report.warnings:
            out.warn(warning)
        return out.report(report, render_upload)
    result = pack_cache(plan, store, output, allow_missing=allow_missing, signing_key=signing_key,
                        limits=limits)
    if result.signature is None:
        out.warn(f"{result.path} is not signed: `unpack --trusted-key` and pulls refuse it; pass --signing-key")
    if result.missing:
        out.warn(f"{len(result.missing)} planned kernels are not in the artifact (--allow-missing)")
    return out.report(result, render)


def render(out: Output, result: PackResult) -> None:
    out.info(f"packed {len(result.kernels)} kernels ({len(result.entries)} entries, {result.bytes / 1e6:.2f} MB) "
             f"from {result.cache_dir}; fingerprint {result.fingerprint_id}")
    if result.signature is not None:
        out.info(f"signed by key {result.signed_by[:16]}: {result.signature}")
    out.data_text(str(result.path))
