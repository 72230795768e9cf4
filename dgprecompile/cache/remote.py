"""Artifacts in object storage: any fsspec URL (s3://, gs://, az://, http(s):// for reading, file://).

All I/O goes through fsspec and its backend packages (s3fs, gcsfs, adlfs, aiohttp), installed as extras
(`pip install 'dgprecompile[s3]'`); there is no HTTP or S3 code here. Credentials are the backends' own: the
standard AWS chain for s3fs (environment, ~/.aws, instance or web-identity roles; the endpoint of an
S3-compatible server from ``AWS_ENDPOINT_URL_S3``), Google's application-default credentials for gcsfs, the
``AZURE_STORAGE_*`` variables or a managed identity for adlfs. Nothing here takes a credential as an argument,
and a URL is only ever shown without its user part and query string (``redact``).

What is atomic where (``upload``):

- S3 (s3fs): an object appears whole (PUT, or CompleteMultipartUpload) or not at all. ``push`` uses a conditional
  put (``If-None-Match: *``): when two jobs push the same fingerprint, the first object stays and the second is
  told it exists.
- local paths and file://: the bytes go to a temporary file in the target directory, then ``os.link`` (push:
  fails if the name exists) or ``os.replace`` (pack -o: replaces) makes it appear whole.
- other backends (gcs, azure): upload to a temporary key beside the target, then fsspec's move (a server-side
  copy, itself atomic on both, then a delete). Between the existence check and the move another push may land
  first; the later one replaces it with an equally whole object of the same fingerprint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dgprecompile.errors import DGError, EnvironmentProblem, InputError

ARTIFACT_NAME = "deepgemm-{fingerprint}.tar.gz"
ARTIFACT_RE = re.compile(r"deepgemm-([0-9a-f]{16})\.tar\.gz$")
# URL scheme -> the extra that installs its fsspec backend
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure",
          "adl": "azure", "http": "http", "https": "http"}
READ_ONLY = {"http", "https"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
MANIFEST_MEMBER = "dgprecompile/artifact.json"
HEAD_LIMIT = 16 << 20


class NotFound(InputError):
    """The object is not there (a miss for `pull`, bad input for `unpack URL`)."""


def is_url(text: str) -> bool:
    return bool(_SCHEME.match(str(text)))


def redact(url: str) -> str:
    """The URL without credentials (user:password@) or query string and fragment (signatures, tokens)."""
    if not is_url(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def scrub(text: str, url: str | None = None) -> str:
    """``text`` (e.g. a backend's error message) with every URL's credentials and query string removed."""
    if url:
        text = text.replace(url, redact(url))
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]*@", r"\1", text)
    return re.sub(r"(://[^\s'\"?]*)\?[^\s'\"]*", r"\1", text)


def join(prefix: str, name: str) -> str:
    """``prefix``/``name`` for a URL (keeping a query string at the end) or a local directory."""
    if not is_url(prefix):
        return os.path.join(prefix, name)
    parts = urlsplit(prefix)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/" + name, parts.query, ""))


def artifact_url(prefix: str, fingerprint_id: str) -> str:
    return join(prefix, ARTIFACT_NAME.format(fingerprint=fingerprint_id))


@dataclass
class Remote:
    url: str
    fs: Any  # an fsspec AbstractFileSystem
    path: str
    protocol: str

    @property
    def shown(self) -> str:
        return redact(self.url)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def is_local(self) -> bool:
        return self.protocol in ("file", "local")


# bucket (container) names each store accepts, checked before any request: a bad one is bad input (exit 2),
# never "no artifact" (the S3, GCS and Azure naming rules, lower case only)
BUCKET_RULES = {
    "s3": (re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"), "3-63 lower-case letters, digits, '.' and '-'"),
    "gs": (re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"), "3-222 lower-case letters, digits, '.', '_' and '-'"),
    "az": (re.compile(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]"), "3-63 lower-case letters, digits and '-'"),
}
BUCKET_SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az", "abfss": "az"}
URL_EXAMPLE = "e.g. s3://my-bucket/dgprecompile/train-480b"


def check_url(url: str) -> None:
    """Refuse a malformed URL up front (one `error:`, exit 2): no scheme before '://', no bucket or host, a bucket
    name the store would reject."""
    if "://" in url and not is_url(url):
        raise InputError(f"{redact(url)!r} is not a URL: nothing names its scheme before '://'",
                         hint=f"write the scheme, {URL_EXAMPLE}, or a local directory")
    if not is_url(url):
        return
    parts = urlsplit(url)
    protocol = parts.scheme.lower()
    host = parts.netloc.rsplit("@", 1)[-1]
    if protocol in ("file", "local"):
        if host not in ("", "localhost"):  # file://tmp/x: "tmp" is a host, the path /x; meant file:///tmp/x
            raise InputError(f"{redact(url)!r} names the host {host!r}: a file:// URL's path starts after the third "
                             "slash", hint=f"write file:///{host}{parts.path} (three slashes) or the plain path")
        return
    if protocol not in EXTRAS:  # ftp://, sftp://, ...: no backend dgprecompile documents or tests
        raise InputError(f"{redact(url)}: unknown URL scheme {protocol}:// (dgprecompile reads s3://, gs://, "
                         "az://, http(s)://, file:// and local paths)",
                         hint="use s3://, gs://, az://, http(s)://, file:// or a local path")
    if not host:
        what = "host" if protocol in READ_ONLY else "bucket"
        shown = re.split(r"[?#]", url, maxsplit=1)[0]  # nothing before the path to redact; drop a query string
        raise InputError(f"{shown!r} names no {what}", hint=f"pass the whole URL, {URL_EXAMPLE}")
    rule = BUCKET_RULES.get(BUCKET_SCHEMES.get(protocol, ""))
    if rule and not rule[0].fullmatch(host):
        raise InputError(f"{redact(url)}: {host!r} is not a valid bucket name for {protocol}:// ({rule[1]})",
                         hint=f"check the bucket's name, {URL_EXAMPLE}")


def open_remote(url: str, *, write: bool = False) -> Remote:
    """An fsspec filesystem for ``url``; one `error:` with the extra to install when its backend is missing."""
    check_url(url)
    match = _SCHEME.match(url)
    protocol = match.group(1).lower() if match else "file"
    shown = redact(url)
    if write and protocol in READ_ONLY:
        raise InputError(f"{shown}: {protocol}:// is read-only for dgprecompile (pull and unpack only)",
                         hint="push to s3://, gs://, az:// or a file:// path, and serve that over http(s)")
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError:
        raise EnvironmentProblem("fsspec is not installed: URLs need it",
                                 hint="pip install 'dgprecompile[s3]' (or [gcs], [azure], [http])") from None
    if protocol not in EXTRAS and protocol not in ("file", "local") and protocol not in fsspec.available_protocols():
        raise InputError(f"{shown}: unknown URL scheme {protocol}://",
                         hint="use s3://, gs://, az://, http(s)://, file:// or a local path")
    try:
        fs, path = url_to_fs(url, skip_instance_cache=True)
    except ImportError:
        extra = EXTRAS.get(protocol)
        raise EnvironmentProblem(f"{shown}: the fsspec backend for {protocol}:// is not installed",
                                 hint=f"pip install 'dgprecompile[{extra}]'" if extra else
                                 f"install the fsspec backend package for {protocol}://") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"{shown}: not a usable URL ({scrub(str(exc), url)})",
                         hint="e.g. s3://bucket/prefix/deepgemm-{fingerprint}.tar.gz") from None
    return Remote(url, fs, path, protocol)


def _first_line(exc: BaseException, url: str) -> str:
    text = str(exc).strip().splitlines()
    return scrub(text[0] if text else type(exc).__name__, url)


CREDENTIALS_HINT = {
    "s3": "s3fs uses the standard AWS sources: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, "
          "or an instance/web-identity role; AWS_ENDPOINT_URL_S3 for an S3-compatible server",
    "gs": "gcsfs uses Google's application-default credentials (gcloud auth application-default login, "
          "GOOGLE_APPLICATION_CREDENTIALS, or the VM's service account)",
    "az": "adlfs uses AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY/AZURE_STORAGE_SAS_TOKEN/"
          "AZURE_STORAGE_CONNECTION_STRING, or a managed identity",
}


def _hint(remote: Remote) -> str:
    key = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az", "adl": "az"}.get(remote.protocol, remote.protocol)
    return CREDENTIALS_HINT.get(key, "check the URL, that the server is reachable, and its permissions")


@contextmanager
def remote_errors(remote: Remote, doing: str) -> Iterator[None]:
    """Turn a backend's exception into one DGError line (the URL redacted)."""
    try:
        yield
    except (DGError, KeyboardInterrupt):
        raise
    except FileNotFoundError:
        raise NotFound(f"{doing} {remote.shown}: not found",
                         hint="check the URL; `dgprecompile push --to PREFIX` or `pack -o URL` writes one") from None
    except PermissionError as exc:
        raise EnvironmentProblem(f"{doing} {remote.shown}: permission denied ({_first_line(exc, remote.url)})",
                                 hint=_hint(remote)) from None
    except Exception as exc:  # botocore, aiohttp, azure and google errors have no common base but Exception
        name = type(exc).__name__
        if "Credential" in name or "credential" in str(exc):
            hint = _hint(remote)
        else:
            hint = f"check the URL and that the server is reachable; {_hint(remote)}"
        raise EnvironmentProblem(f"{doing} {remote.shown} failed: {name}: {_first_line(exc, remote.url)}",
                                 hint=hint) from None


def refuse_special(remote: Remote) -> None:
    """A file:// object that is a FIFO, socket or device is refused before it is opened (a FIFO blocks the read);
    objects of other stores are always plain bytes."""
    if remote.is_local:
        from dgprecompile.fsutil import refuse_non_regular

        refuse_non_regular(remote.path, "the object", hint="pass the file `dgprecompile pack -o` or `push` wrote")


def exists(remote: Remote) -> bool:
    with remote_errors(remote, "checking"):
        return bool(remote.fs.exists(remote.path))


def download(remote: Remote, dest: Path) -> tuple[int, float]:
    """Copy the object to the new file ``dest``; returns (bytes, seconds). NotFound when it is not there."""
    start = time.perf_counter()
    try:
        with remote_errors(remote, "downloading"):
            refuse_special(remote)
            remote.fs.get_file(remote.path, str(dest))
            got = dest.stat().st_size
            try:
                want = remote.fs.size(remote.path)
            except (OSError, NotImplementedError, ValueError):
                want = None
    except NotFound:
        raise
    except DGError as exc:
        got = dest.stat().st_size if dest.exists() else 0
        exc.message += f" (after {got} bytes); nothing was installed"
        raise
    if want is not None and got != want:
        raise EnvironmentProblem(f"downloading {remote.shown}: got {got} of {want} bytes; nothing was installed",
                                 hint="pull again once the server is reachable")
    return got, time.perf_counter() - start


def upload(local: Path, remote: Remote, *, replace: bool) -> str:
    """Put ``local`` at ``remote`` whole; see the module docstring for what is atomic where.

    Returns "created", "replaced", or "exists" (not ``replace`` and an object was already there: it is kept).
    """
    fs = remote.fs
    with remote_errors(remote, "uploading to"):
        if remote.is_local:
            return _upload_local(local, Path(remote.path), replace=replace)
        if type(fs).__name__ == "S3FileSystem":
            if replace:
                fs.put_file(str(local), remote.path)
                return "replaced"
            try:
                fs.put_file(str(local), remote.path, mode="create")  # If-None-Match: *
            except FileExistsError:
                return "exists"
            return "created"
        if not replace and fs.exists(remote.path):
            return "exists"
        parent = remote.path.rstrip("/").rsplit("/", 1)[0]
        tmp = f"{parent}/.dgprecompile-tmp-{uuid.uuid4().hex}-{remote.name}"
        try:
            fs.put_file(str(local), tmp)
            if not replace and fs.exists(remote.path):
                return "exists"
            fs.mv(tmp, remote.path)
        finally:
            try:
                if fs.exists(tmp):
                    fs.rm(tmp)
            except Exception:  # best effort: the temporary key is named so it can be listed and removed
                pass
        return "replaced" if replace else "created"


def _upload_local(local: Path, target: Path, *, replace: bool) -> str:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}-{time.time_ns()}.tmp"
    try:
        with open(local, "rb") as src, open(tmp, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        if replace:
            existed = target.exists()
            os.replace(tmp, target)
            return "replaced" if existed else "created"
        try:
            os.link(tmp, target)
        except FileExistsError:
            return "exists"
        return "created"
    finally:
        tmp.unlink(missing_ok=True)


def head_manifest(remote: Remote) -> dict[str, Any] | None:
    """The artifact's manifest (its first member) read from the start of the object, or None."""
    return _parsed(head_manifest_bytes(remote))


def head_manifest_bytes(remote: Remote) -> bytes | None:
    """The exact bytes of the artifact's manifest (its first member), read from the start of the object, or None."""
    try:
        refuse_special(remote)
        with remote.fs.open(remote.path, "rb", block_size=1 << 18) as f:
            return read_head_bytes(f)
    except Exception:  # a listing hint or an early check only: an unreadable object is simply not described
        return None


def _parsed(data: bytes | None) -> dict[str, Any] | None:
    try:
        doc = json.loads(data) if data is not None else None
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def read_head(f) -> dict[str, Any] | None:
    return _parsed(read_head_bytes(f))


def read_head_bytes(f) -> bytes | None:
    try:
        with tarfile.open(fileobj=f, mode="r|gz") as tar:
            info = tar.next()
            if info is None or info.name != MANIFEST_MEMBER or not info.isreg() or info.size > HEAD_LIMIT:
                return None
            return tar.extractfile(info).read()
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return None


def read_small(remote: Remote, limit: int) -> bytes | None:
    """A small object's bytes (at most ``limit`` + 1 are read), or None when it is not there."""
    try:
        with remote_errors(remote, "reading"):
            refuse_special(remote)
            with remote.fs.open(remote.path, "rb") as f:
                return f.read(limit + 1)
    except NotFound:
        return None


def remove(remote: Remote) -> None:
    """Delete the object if it is there."""
    with remote_errors(remote, "removing"):
        if remote.is_local:
            Path(remote.path).unlink(missing_ok=True)
        elif remote.fs.exists(remote.path):
            remote.fs.rm(remote.path)


def list_artifacts(prefix: Remote, limit: int = 20) -> list[tuple[str, dict[str, Any] | None]] | None:
    """(name, manifest) of the artifacts under ``prefix`` (at most ``limit``), or None when it cannot be listed."""
    try:
        names = sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in prefix.fs.ls(prefix.path, detail=False))
    except FileNotFoundError:
        return []
    except Exception:
        return None
    out = []
    base = prefix.path.rstrip("/")
    for name in [n for n in names if ARTIFACT_RE.fullmatch(n)][:limit]:
        child = Remote(join(prefix.url, name), prefix.fs, f"{base}/{name}", prefix.protocol)
        out.append((name, head_manifest(child)))
    return out
