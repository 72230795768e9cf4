"""`dgprecompile unpack`: check an artifact completely, then merge its entries into the cache atomically."""

from __future__ import annotations

import click

from dgprecompile.cache.remote import is_url, redact
from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.unpack import UnpackResult, unpack_artifact
from dgprecompile.cli.options import output_options, trust_options
from dgprecompile.errors import InputError
from dgprecompile.output import Output

PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("unpack")
@click.argument("artifact", type=click.Path(dir_okay=False))
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="DeepGEMM cache directory to merge into (default: the one the packed sglang profile's runtime uses).")
@click.option("--force", is_flag=True,
              help="Unpack even if the artifact's fingerprint differs from this environment or cannot be checked.")
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use here (default: the one the artifact was built with, else as found).")
@click.option("--num-sms", type=int, default=None, help="SM count of the GPUs here (default: not compared).")
@click.option("--replace-changed", is_flag=True,
              help="Replace existing entries whose bytes differ from the artifact's (each by one atomic swap); "
                   "without it such an entry refuses the unpack.")
@trust_options
@output_options
def command(artifact, cache_dir, force, nvcc, num_sms, replace_changed, trust, out) -> UnpackResult:
    """Merge a `dgprecompile pack` artifact (a file, or an fsspec URL) into the DeepGEMM cache.

    Before touching the cache it reads the whole archive: format, every member's sha256, no absolute paths,
    no `..`, no links or devices; and it compares the artifact's fingerprint with this environment (refused
    with the differing fields unless --force). Who built it: with trusted keys (--trusted-key or
    $DGPRECOMPILE_TRUSTED_KEYS) the artifact's signature (ARTIFACT.sig beside it) must be by one of them; a URL
    needs trusted keys or --allow-unsigned; a local file without trusted keys is unpacked with a warning.
    Trust configured but naming no file (the variable set to "" or ":") is refused. An artifact older than the
    newest build this cache installed for its fingerprint is refused unless --allow-rollback.
    Entries are installed whole, one rename each; an existing entry that differs from the artifact's refuses
    the unpack (exit 1) unless --replace-changed. On any failure the cache is left as it was. Exit 2 for a
    bad or untrusted artifact (unsigned, unknown key, a signature that does not cover its manifest).

    \b
    Examples:
      dgprecompile unpack deepgemm-3f2a9c0d1e2b4a5c.tar.gz \\
          --cache-dir /shared/deep_gemm --trusted-key ci.pub
      dgprecompile unpack cache.tar.gz --cache-dir /shared/deep_gemm && \\
          dgprecompile verify --manifest plan.yaml --cache-dir /shared/deep_gemm
      dgprecompile unpack s3://my-bucket/dg/deepgemm-3f2a9c0d1e2b4a5c.tar.gz \\
          --trusted-key ci.pub   # downloads beside the cache first
    """
    if num_sms is not None and num_sms < 1:
        raise InputError("--num-sms must be a positive integer", hint="pass the SM count of the GPUs here, e.g. 132")
    store = CacheStore(cache_dir) if cache_dir else None
    if is_url(artifact):
        from dgprecompile.cache.fleet import unpack_url

        result, size, seconds = unpack_url(artifact, store, force=force, nvcc=nvcc, num_sms=num_sms, trust=trust,
                                           replace_changed=replace_changed)
        out.info(f"downloaded {redact(artifact)}: {size / 1e6:.2f} MB in {seconds:.2f} s")
    else:
        result = unpack_artifact(artifact, store, force=force, nvcc=nvcc, num_sms=num_sms, trust=trust,
                                 replace_changed=replace_changed)
    for warning in result.warnings:
        out.warn(warning)
    for name in result.kept:
        out.warn(f"kept the existing {name}: another process installed a different one meanwhile")
    out.info(f"origin: {result.signature}")
    for note in result.notes:
        out.info(note)
    return out.report(result, render)


def render(out: Output, result: UnpackResult) -> None:
    out.data_text(f"unpacked into {result.cache_dir}: {len(result.added)} entries added, {len(result.present)} already "
                  f"present, {len(result.replaced)} replaced, {len(result.kept)} kept; {result.indexed} index records added; "
                  f"fingerprint {result.fingerprint_id}")
