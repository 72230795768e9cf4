"""`dgprecompile pull`: fetch this machine's cache artifact from a URL prefix, check it, install it, verify."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cli.options import (
    cache_dir_option,
    output_options,
    plan_options,
    resolve_plan,
    trust_options,
)
from dgprecompile.output import Output

if TYPE_CHECKING:
    from dgprecompile.cache.fleet import PullReport


def _short(value) -> str:
    text = repr(value)
    return text[:13] + "...'" if isinstance(value, str) and len(text) > 40 else text


def _found(report) -> str:
    if report.available is None:
        return "the prefix cannot be listed here"
    if not report.available:
        return "the prefix holds no artifact"
    described = []
    for a in report.available[:5]:
        if not a.readable:
            described.append(f"{a.name} (unreadable)")
        else:
            described.append(f"{a.name} (differs in {', '.join(f for f, _, _ in a.differences) or 'nothing'})")
    return "the prefix holds " + "; ".join(described)


def render(out: Output, report) -> None:
    """Text mode: the sccache-style stats line on stdout; the problem, if any, as one `error:` line."""
    out.data_text(report.stats_line())
    render_problem(out, report)


def render_problem(out: Output, report) -> None:
    if report.return_code == 0:
        return
    if report.outcome == "miss":
        here = ", ".join(f"{f}={_short(v)}" for f, v in report.current.items())
        hint = f"warm here and `dgprecompile push --to {report.source}` (this machine: {here}); {_found(report)}"
    else:
        hint = ("push an artifact warmed with this plan (one prefix per plan), or run `dgprecompile warm` here: "
                "it compiles only what is missing")
    out.error(report.reason(), hint=hint)


PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("pull")
@plan_options
@cache_dir_option
@click.option("--from", "source", required=True, metavar="URL-PREFIX",
              help="Where artifacts are pushed: s3://bucket/prefix, gs://, az://, http(s)://, file:// or a directory.")
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use here (default: as found); part of the fingerprint.")
@click.option("--replace-changed", is_flag=True,
              help="Replace cache entries whose bytes differ from the artifact's (each by one atomic swap).")
@trust_options
@output_options
def command(plan_request, manifest, config, cache_dir, source, nvcc, replace_changed, trust, out) -> PullReport:
    """Fetch the artifact named by this machine's fingerprint, check it, unpack it, and verify the cache.

    The name is `deepgemm-<fingerprint id>.tar.gz` under URL-PREFIX (the id `verify --json` reports as
    current_fingerprint_id). A cache that is already complete fetches nothing. The download goes to a staging
    directory inside the cache; every checksum and the fingerprint are checked before the cache is touched,
    entries are installed whole, and any failure installs nothing. Many nodes pulling into one shared cache
    download it once. A prefix is a store others may write: the artifact must carry a signature
    (<object>.sig) by a trusted key (--trusted-key, repeatable, or $DGPRECOMPILE_TRUSTED_KEYS), checked
    before the download and again before anything is installed; without trusted keys a pull installs
    nothing unless --allow-unsigned. An artifact older than the newest build this cache installed for its
    fingerprint (a replayed old one) is refused unless --allow-rollback. Exit 0 when the cache is complete afterwards, 5 when the prefix holds
    no artifact for this fingerprint, 1 when the artifact does not cover the plan (or an entry here differs
    from it: --replace-changed), 2 for a bad or untrusted artifact, 3 for I/O errors.
    Credentials come from the backend's standard sources (for S3: AWS_* variables, ~/.aws, roles).

    \b
    Examples:
      dgprecompile pull --manifest plan.yaml \\
          --from s3://my-bucket/dgprecompile/train-480b --trusted-key ci.pub
      DGPRECOMPILE_TRUSTED_KEYS=old.pub:new.pub \\
          dgprecompile pull --manifest plan.yaml --from s3://cache/480b
      dgprecompile pull --manifest plan.yaml \\
          --from https://cache.example.com/480b --trusted-key ci.pub --json
    """
    from dgprecompile.cache.fleet import pull

    plan = resolve_plan(plan_request, manifest)
    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    report = pull(plan, store, source, nvcc=nvcc, num_sms=plan_request.num_sms, trust=trust,
                  replace_changed=replace_changed)
    for warning in report.warnings:
        out.warn(warning)
    for note in report.notes:
        out.info(note)
    out.report(report, render)
    if out.json_mode:
        render_problem(out, report)  # the reason on stderr too: one `error:` line whatever the mode
    return report
