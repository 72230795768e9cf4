"""Whether a trusted key file can be changed by someone other than its user: refused as ssh refuses such a key.

A node trusts whatever key sits in the file it is pointed at, so a .pub that another user may rewrite (mode 0666,
a group-writable file, a file in a directory others may write, or a file or directory owned by another user) lets
that user make the node install anything they sign. Checked on the path as given and on the file it resolves to,
with every directory up to ``/``: owned by this user or root, not writable by group or others, except a directory
with the sticky bit (``/tmp``: there nobody renames or deletes another user's entries).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dgprecompile.errors import InputError


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (os.getuid(), 0)


def _problem(path: Path, is_dir: bool) -> tuple[str, str] | None:
    """(why others may change what ``path`` holds, the command that fixes it), or None."""
    try:
        st = path.stat()
    except OSError:
        return None  # the key loader reports a missing or unreadable file itself
    mode = stat.S_IMODE(st.st_mode)
    what = "directory" if is_dir else "file"
    if not _owner_ok(st):
        return (f"the {what} {path} is owned by uid {st.st_uid}, not by you or root",
                f"copy the key into a file you own (e.g. install -m 644 {path} ~/.config/dgprecompile/)"
                if not is_dir else "keep the key in a directory you own, e.g. ~/.config/dgprecompile/")
    if mode & 0o022 and not (is_dir and mode & stat.S_ISVTX):
        who = {0o022: "its group and others", 0o002: "others", 0o020: "its group"}[mode & 0o022]
        return f"the {what} {path} is writable by {who} (mode {mode:04o})", f"chmod go-w {path}"
    return None


def refuse_unsafe_key(path: str | Path, what: str = "trusted key") -> None:
    """Raise InputError (exit 2) naming the file or directory and the fix when others may change ``path``."""
    given = Path(path).expanduser().absolute()
    for candidate in dict.fromkeys([given, Path(os.path.realpath(given))]):
        found = _problem(candidate, is_dir=False)
        for parent in candidate.parents:
            if found is not None:
                break
            found = _problem(parent, is_dir=True)
        if found is not None:
            why, fix = found
            raise InputError(f"the {what} {given} may be changed by others: {why}; refusing to trust it (as ssh "
                             "refuses such a key); nothing was installed",
                             hint=f"{fix}, then pass it with --trusted-key again")
