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
