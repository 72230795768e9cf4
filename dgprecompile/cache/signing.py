"""Who built an artifact: Ed25519 detached signatures over its manifest's bytes, and the trust a node places in them.

The manifest (``dgprecompile/artifact.json``, the archive's first member) lists the sha256 and size of every other
member, so a signature over its exact bytes covers everything the archive installs: unpack checks each member
against that listing before it writes anything. The signature lives beside the artifact, ``<artifact>.sig``
(a local file or an object next to the artifact's), as a small JSON document::

    {"format": "dgprecompile-artifact-signature", "schema": 1, "algorithm": "ed25519",
     "key": "<sha256 of the raw 32-byte public key>", "manifest_sha256": "<sha256 of the manifest bytes>",
     "signature": "<base64 of the 64-byte Ed25519 signature over the manifest bytes>"}

The signature is over the manifest bytes themselves (no prefix), so any Ed25519 tool can check it too.

Keys are files: the private key a PKCS#8 PEM file (``--signing-key FILE`` / ``DGPRECOMPILE_SIGNING_KEY``; refused when
group or others may read it, as ssh refuses such a key), a trusted key a PEM public key or an OpenSSH
``ssh-ed25519`` line (``--trusted-key FILE``, repeatable / ``DGPRECOMPILE_TRUSTED_KEYS``, paths separated by ``:``).
Key material is never taken from the command line or the environment, and never printed: messages name the file
and the key's fingerprint only.

``cryptography`` is imported only here, and only when a key is loaded, so commands that do not sign or verify
stay light.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.errors import EnvironmentProblem, InputError

SIGNATURE_FORMAT = "dgprecompile-artifact-signature"
SIGNATURE_SCHEMA = 1
SIGNATURE_SUFFIX = ".sig"
SIGNATURE_LIMIT = 64 << 10  # a signature document is ~300 bytes; nothing larger is read
KEY_LIMIT = 64 << 10
SIGNING_ENV = "DGPRECOMPILE_SIGNING_KEY"
TRUSTED_ENV = "DGPRECOMPILE_TRUSTED_KEYS"
PRIVATE_NAME = "dgprecompile-signing.key"
PUBLIC_NAME = "dgprecompile-signing.pub"
TRUST_HINT = (f"pass --trusted-key FILE (the public key of the CI that signs, e.g. its {PUBLIC_NAME}) or set "
              f"{TRUSTED_ENV}; --allow-unsigned skips the check (only for artifacts you built yourself)")


def _crypto():
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise EnvironmentProblem("the `cryptography` package is not installed: signing and checking artifacts "
                                 "needs it", hint="pip install 'cryptography>=42' (a dependency of dgprecompile)"
                                 ) from None
    return serialization, ed25519, InvalidSignature


def signature_path(artifact: str) -> str:
    """Where the signature of ``artifact`` (a path or URL) lives."""
    return f"{artifact}{SIGNATURE_SUFFIX}"


def _raw_public(public_key) -> bytes:
    serialization, _, _ = _crypto()
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_fingerprint(public_key) -> str:
    """sha256 (hex) of the raw 32-byte public key: how signatures and messages name a key."""
    return hashlib.sha256(_raw_public(public_key)).hexdigest()


def short(fingerprint: str) -> str:
    return fingerprint[:16]


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError(f"{what} file not found: {path}", hint="pass an existing file (`dgprecompile keygen DIR` "
                         "writes a key pair)") from None
    except OSError as exc:
        raise InputError(f"cannot read the {what} file {path}: {exc.strerror}",
                         hint="check the path and its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"the {what} {path} is not a regular file", hint="pass the key file itself")
    if st.st_size > KEY_LIMIT:
        raise InputError(f"the {what} file {path} is {st.st_size} bytes, too large for a key",
                         hint="pass the key file `dgprecompile keygen` wrote")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the {what} file {path}: {exc.strerror}",
                         hint="check the path and its permissions") from None


@dataclass
class SigningKey:
    path: Path
    key: Any  # Ed25519PrivateKey
    fingerprint: str

    def sign(self, manifest: bytes) -> bytes:
        """The signature document for these manifest bytes."""
        doc = {"format": SIGNATURE_FORMAT, "schema": SIGNATURE_SCHEMA, "algorithm": "ed25519",
               "key": self.fingerprint, "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
               "signature": base64.b64encode(self.key.sign(manifest)).decode()}
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def load_signing_key(path: str | Path) -> SigningKey:
    """The Ed25519 private key in ``path``; refused when group or others may read the file."""
    serialization, ed25519, _ = _crypto()
    path = Path(path).expanduser()
    data = _read_key_file(path, "signing key")
    mode = path.stat().st_mode
    if mode & 0o077:
        raise InputError(f"the signing key {path} may be read by others (mode {stat.S_IMODE(mode):04o}); refusing to "
                         "use it", hint=f"chmod 600 {path} (write it with umask 077, as `dgprecompile keygen` does)")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise InputError(f"{path} is not an unencrypted Ed25519 private key in PEM form",
                         hint="pass the .key file `dgprecompile keygen DIR` wrote")
    return SigningKey(path, key, key_fingerprint(key.public_key()))


def signing_key_from(option: str | None, environ: dict[str, str] | None = None) -> SigningKey | None:
    """--signing-key, else $DGPRECOMPILE_SIGNING_KEY (a path: never the key itself), else None."""
    env = os.environ if environ is None else environ
    value = option or env.get(SIGNING_ENV) or None
    if value is None:
        return None
    if "-----BEGIN" in value or "\n" in value:
        where = "--signing-key" if option else SIGNING_ENV
        raise InputError(f"{where} must name a key file, not hold the key itself (its value is not shown)",
                         hint="write the key to a file readable only by you (umask 077) and pass its path")
    return load_signing_key(value)


def load_public_key(path: str | Path):
    serialization, ed25519, _ = _crypto()
    from cryptography.exceptions import UnsupportedAlgorithm

    from dgprecompile.cache.keyperms import refuse_unsafe_key

    path = Path(path).expanduser()
    data = _read_key_file(path, "trusted key")
    refuse_unsafe_key(path)
    key = None
    for loader in (serialization.load_pem_public_key, serialization.load_ssh_public_key):
        try:
            key = loader(data.strip() + (b"\n" if loader is serialization.load_pem_public_key else b""))
            break
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
    if not isinstance(key, ed25519.Ed25519PublicKey):
        if b"PRIVATE KEY" in data:
            raise InputError(f"{path} is a private key; a node trusts the public one",
                             hint="pass the .pub file beside it (nodes never need the private key)")
        raise InputError(f"{path} is not an Ed25519 public key (PEM or an OpenSSH ssh-ed25519 line)",
                         hint="pass the .pub file `dgprecompile keygen DIR` wrote")
    return key


class SignatureRefused(InputError):
    """The artifact is not signed by a trusted key: nothing is installed (exit 2)."""


@dataclass
class Trust:
    """What a node accepts: signatures by ``keys`` (fingerprint -> public key); or, with ``allow_unsigned``, anything."""

    keys: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # fingerprint -> the file it came from
    allow_unsigned: bool = False
    allow_rollback: bool = False  # install an artifact older than the newest this cache installed (rollback.py)

    @property
    def configured(self) -> bool:
        return bool(self.keys)

    def check(self, manifest: bytes, signature: bytes | None, where: str, *, shared: bool) -> tuple[str, list[str]]:
        """(how the artifact's origin was established, warnings); raises SignatureRefused.

        ``shared``: the artifact comes from a URL or a pull prefix (a store others may write), where an artifact
        is accepted only with trusted keys configured or --allow-unsigned; a local file given to `unpack`
        without trusted keys is accepted with a warning.
        """
        if self.allow_unsigned:
            return "not checked (--allow-unsigned)", [
                f"--allow-unsigned: NOT checking who built {where}: whoever could write it can run native code in "
                "every job that uses this cache"]
        if not self.keys:
            if shared:
                raise SignatureRefused(f"{where} comes from a shared store (a URL or a pull prefix) and no trusted "
                                       "key is configured, so who built it cannot be checked; nothing was installed "
                                       "(only a local file you name is unpacked without trusted keys)",
                                       hint=TRUST_HINT)
            warn = (f"{where} is signed, but no trusted key is configured: the signature was not checked"
                    if signature is not None else f"{where} is not signed")
            return "not checked (a local file, no trusted key)", [
                f"{warn}; no trusted key is configured, so it is unpacked as a local file you chose (a URL or a "
                "pull prefix would be refused; pass --trusted-key to require a signature)"]
        if signature is None:
            raise SignatureRefused(f"{where} is not signed (no {SIGNATURE_SUFFIX} beside it) and trusted keys are "
                                   "configured; nothing was installed",
                                   hint="push or pack it with --signing-key (the CI's key), or pull from a prefix "
                                        "that CI signs")
        doc = _signature_doc(signature, where)
        fingerprint = doc["key"]
        key = self.keys.get(fingerprint)
        if key is None:
            raise SignatureRefused(f"{where} is signed by key {short(fingerprint)}, which is not trusted here "
                                   f"(trusted: {', '.join(short(k) for k in sorted(self.keys))}); nothing was "
                                   "installed", hint="add that key's .pub file with --trusted-key (key rotation: "
                                   "several are allowed) if it is your CI's, else the artifact is not yours")
        _, _, invalid = _crypto()
        try:
            key.verify(base64.b64decode(doc["signature"], validate=True), manifest)
        except (invalid, ValueError):
            raise SignatureRefused(f"{where}: its signature by key {short(fingerprint)} does not cover this manifest "
                                   "(the manifest or the signature was changed after signing); nothing was "
                                   "installed", hint="fetch the artifact and its .sig again, or have CI push it "
                                   "again; never install it as it is") from None
        return f"signed by trusted key {short(fingerprint)} ({self.sources.get(fingerprint, '?')})", []


def _signature_doc(data: bytes, where: str) -> dict[str, Any]:
    from dgprecompile import schemas

    if len(data) > SIGNATURE_LIMIT:
        raise SignatureRefused(f"{where}: its signature file is {len(data)} bytes, not a dgprecompile signature",
                               hint="fetch the artifact and its .sig again")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, an int Python will not convert, nested too deep
        raise SignatureRefused(f"{where}: its signature file is not a dgprecompile signature (not JSON)",
                               hint="fetch the artifact and its .sig again") from None
    try:
        return schemas.check(doc, "artifact-signature", f"{where}{SIGNATURE_SUFFIX}",
                             hint="fetch the artifact and its .sig again, or sign it again")
    except InputError as exc:
        raise SignatureRefused(exc.message, hint=exc.hint) from None


def _trusted_paths(trusted: tuple[str, ...] | list[str], env) -> list[str]:
    """The trusted key files; trust configured but naming no file (an empty --trusted-key, or the variable set to
    "", ":" or blanks) is refused: it would otherwise read as "no trust configured", which installs a local file
    unchecked."""
    if trusted:
        if any(not str(p).strip() for p in trusted):
            raise InputError("--trusted-key was given an empty path: trust configured with no key file would check "
                             "nobody's signature; nothing was installed",
                             hint="pass --trusted-key FILE (the CI's .pub), once per trusted key")
        return list(trusted)
    value = env.get(TRUSTED_ENV)
    if value is None:
        return []
    paths = [p for p in value.split(":") if p.strip()]
    if not paths:
        raise InputError(f"{TRUSTED_ENV} is set but names no key file ({value!r}): trust configured with no key "
                         "would check nobody's signature; nothing was installed",
                         hint=f"set {TRUSTED_ENV} to the .pub file(s), ':'-separated, or pass --trusted-key FILE; "
                              "unset it only to unpack a local file you built yourself")
    return paths


def trust_from(trusted: tuple[str, ...] | list[str], allow_unsigned: bool,
               environ: dict[str, str] | None = None, allow_rollback: bool = False) -> Trust:
    """--trusted-key FILE... (else $DGPRECOMPILE_TRUSTED_KEYS, paths separated by ':'), --allow-unsigned and
    --allow-rollback."""
    paths = _trusted_paths(trusted, os.environ if environ is None else environ)
    if paths and allow_unsigned:
        where = "--trusted-key" if trusted else TRUSTED_ENV
        raise InputError(f"--allow-unsigned and trusted keys ({where}) contradict each other: with trusted keys a "
                         "signature by one of them is always required",
                         hint=f"drop --allow-unsigned, or (for an artifact you built yourself) unset {TRUSTED_ENV}")
    trust = Trust(allow_unsigned=allow_unsigned, allow_rollback=allow_rollback)
    for path in paths:
        key = load_public_key(path)
        fp = key_fingerprint(key)
        trust.keys[fp] = key
        trust.sources.setdefault(fp, str(path))
    return trust


@dataclass
class KeyPair:
    private: Path
    public: Path
    fingerprint: str
    return_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"private_key": str(self.private), "public_key": str(self.public), "fingerprint": self.fingerprint}


def generate_key_pair(directory: str | Path) -> KeyPair:
    """Write DIR/dgprecompile-signing.key (0600) and DIR/dgprecompile-signing.pub; never over existing files."""
    from dgprecompile.fsutil import create_new_file

    serialization, ed25519, _ = _crypto()
    directory = Path(directory).expanduser().absolute()
    private, public = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    for p in (private, public):
        if p.exists() or p.is_symlink():
            raise InputError(f"{p} already exists; a key is never overwritten",
                             hint="pass another DIR, or move the old pair away first (nodes that trust it keep "
                                  "accepting what it signed until you remove it from their trusted keys)")
    existed = directory.exists()
    if existed and not directory.is_dir():
        raise InputError(f"{directory} is not a directory", hint="pass a directory for the key pair")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    directory.mkdir(parents=True, exist_ok=True)
    if not existed:  # under umask 002 a new directory is group-writable: nodes would refuse the .pub in it
        directory.chmod(0o755)
    create_new_file(private, pem, mode=0o600)
    try:
        create_new_file(public, pub, mode=0o644)  # never group-writable, whatever the umask: a trusted key
    except BaseException:
        private.unlink(missing_ok=True)
        raise
    return KeyPair(private, public, key_fingerprint(key.public_key()))
