"""The one error type of the project.

Every failure a user can cause or meet is a :class:`DGError` with a one-line message, an optional
hint naming the command or setting that fixes it, and the exit code the CLI returns for it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check ran and found a problem (verify incomplete, doctor predicts failure)
EXIT_USAGE = 2  # bad input: unknown model, impossible parallel layout, unreadable file
EXIT_ENVIRONMENT = 3  # the machine lacks something the command needs (nvcc, DeepGEMM, a GPU)
EXIT_COMPILE_FAILED = 4  # one or more kernels failed to compile
EXIT_NOT_FOUND = 5  # pull: the URL prefix holds no artifact for this machine's fingerprint
EXIT_INTERRUPTED = 130  # Ctrl-C; SIGTERM and SIGHUP give 143 and 129 (128 + the signal), as a shell reports


class DGError(Exception):
    """A failure with a message for humans, a hint that names the fix, and an exit code."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class InputError(DGError):
    """The user asked for something impossible or gave a file we cannot use."""

    exit_code = EXIT_USAGE


class EnvironmentProblem(DGError):
    """The machine lacks a tool or library the command needs."""

    exit_code = EXIT_ENVIRONMENT


class CheckFailed(DGError):
    """A check ran to the end and its answer is 'no'."""

    exit_code = EXIT_CHECK_FAILED


class CompileFailed(DGError):
    exit_code = EXIT_COMPILE_FAILED


def os_error(exc: OSError, doing: str = "use", option: str | None = None) -> DGError:
    """One user-facing error for a failed file operation: who may not do what where, and the fix. ``option`` is
    the command's own option (or argument) that names the path, for the hint; None names none."""
    import errno
    import os

    where = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        from dgprecompile.fsutil import space_message

        message, hint = space_message(where if exc.filename else ".", exc.errno, doing=f"writing {where}")
        return EnvironmentProblem(message, hint)
    elsewhere = "choose a path on a writable filesystem" + (f" ({option})" if option else "")
    if exc.errno == errno.EROFS:  # the machine's mount, not the user's words: exit 3, like an unwritable store
        return EnvironmentProblem(f"cannot {doing} {where}: Read-only file system", hint=elsewhere)
    if exc.errno in (errno.EACCES, errno.EPERM):
        owner = ""
        try:
            import pwd

            path = where
            while path and not os.path.exists(path):
                path = os.path.dirname(path)
            st = os.stat(path)
            owner = f" ({path} is owned by {pwd.getpwuid(st.st_uid).pw_name}, mode {st.st_mode & 0o7777:04o})"
        except (OSError, KeyError, TypeError):
            pass
        other = f", or choose a directory you own ({option})" if option else ""
        return InputError(f"permission denied: cannot {doing} {where}{owner}",
                          hint="run as a user allowed to (the owner, or a member of a group-writable cache: "
                               f"chmod -R g+rwX){other}")
    return InputError(f"cannot {doing} {where}: {exc.strerror or exc}", hint="check the path and its permissions")
