"""Variables set in this process's environment for a while (a builder that reads its settings from os.environ)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the duration, then what was there before (a variable that was unset, unset)."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
