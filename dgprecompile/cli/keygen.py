"""`dgprecompile keygen`: an Ed25519 key pair for signing artifacts (CI keeps the private key, nodes trust the .pub)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dgprecompile.cli.options import output_options
from dgprecompile.output import Output

if TYPE_CHECKING:
    from dgprecompile.cache.signing import KeyPair


PATH_OPTION = "the DIRECTORY argument"  # where this command is told to write: named in the hint of a file error


@click.command("keygen")
@click.argument("directory", type=click.Path(file_okay=False))
@output_options
def command(directory, out) -> KeyPair:
    """Write DIR/dgprecompile-signing.key (private, mode 0600) and DIR/dgprecompile-signing.pub.

    The private key goes into the CI's secret store (then delete the file); `pack`/`push --signing-key FILE`
    sign with it. The public key is what nodes trust: `unpack`/`pull`/`launch --pull --trusted-key FILE`, or
    DGPRECOMPILE_TRUSTED_KEYS=a.pub:b.pub (several during a key rotation). Existing files are never
    overwritten. The public key's path is printed on stdout, its fingerprint (the sha256 of the raw key,
    as signatures name it) on stderr.

    \b
    Examples:
      dgprecompile keygen ~/dg-keys
      dgprecompile keygen ci-keys/2027 --json
    """
    from dgprecompile.cache.signing import generate_key_pair

    return out.report(generate_key_pair(directory), render)


def render(out: Output, pair: KeyPair) -> None:
    out.info(f"private key (keep it secret; mode 0600): {pair.private}")
    out.info(f"fingerprint: {pair.fingerprint}")
    out.data_text(str(pair.public))
