"""`dgprecompile push`: pack the warmed cache and put it under a URL prefix, named by its fingerprint."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cli.options import (
    cache_dir_option,
    output_options,
    plan_options,
    resolve_plan,
    signing_key_option,
    size_cap_options,
)
from dgprecompile.output import Output

if TYPE_CHECKING:
    from dgprecompile.cache.fleet import PushReport


PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("push")
@plan_options
@cache_dir_option
@click.option("--to", "target", required=True, metavar="URL-PREFIX",
              help="s3://bucket/prefix, gs://, az://, file:// or a directory (http(s) is read-only).")
@click.option("--allow-missing", is_flag=True, help="Push even if some planned kernels are not in the cache.")
@click.option("--replace", is_flag=True,
              help="Replace an existing object for this fingerprint (default: keep it, first push wins).")
@size_cap_options
@signing_key_option
@output_options
def command(plan_request, manifest, config, cache_dir, target, allow_missing, replace, limits, signing_key,
            out) -> PushReport:
    """Pack the plan's cache entries and upload them as URL-PREFIX/deepgemm-<fingerprint id>.tar.gz.

    The mirror of `pull`, for CI. The object appears whole or not at all; on S3 the put is conditional
    (If-None-Match), so when two jobs push the same fingerprint the first object stays and the second is
    told so. An existing object that lacks kernels of this plan is an error (exit 1) unless --replace.
    With --signing-key (or $DGPRECOMPILE_SIGNING_KEY) the manifest's Ed25519 signature is uploaded beside
    it as <object>.sig; nodes that trust the key's .pub install only what it signed. The URL is printed on
    stdout.

    \b
    Examples:
      dgprecompile push --manifest plan.yaml --cache-dir /tmp/dg \\
          --to s3://my-bucket/dgprecompile/train-480b \\
          --signing-key "$RUNNER_TEMP/dgprecompile-signing.key"
      dgprecompile push --manifest plan.yaml --to /shared/artifacts/train-480b
    """
    from dgprecompile.cache.fleet import push

    plan = resolve_plan(plan_request, manifest)
    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    report = push(plan, store, target, allow_missing=allow_missing, replace=replace, signing_key=signing_key,
                  limits=limits)
    for warning in report.warnings:
        out.warn(warning)
    out.report(report, render)
    if report.return_code:
        out.error(f"{report.url} already holds an artifact for this fingerprint without every kernel of this plan; "
                  "kept it", hint="push each plan to its own prefix, or pass --replace")
    return report


def render(out: Output, report: PushReport) -> None:
    """`push` and `pack -o URL`: a note on stderr, the URL on stdout."""
    out.info(f"{report.command}: {report.outcome} {report.url}: {report.pack.bytes / 1e6:.2f} MB, {len(report.pack.kernels)} kernels, "
             f"fingerprint {report.pack.fingerprint_id}, {report.seconds:.2f} s")
    if report.signature:
        out.info(f"signed by key {report.pack.signed_by[:16]}: {report.signature}")
    out.data_text(report.url)
