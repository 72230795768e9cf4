"""The package's data files (facts read from the libraries, one file per subject). ``load_yaml`` is how every stage
reads one of them."""

from __future__ import annotations

from importlib import resources
from typing import Any


def load_yaml(name: str) -> Any:
    """The parsed YAML file ``name`` (a path under dgprecompile/data)."""
    import yaml

    return yaml.safe_load(resources.files(__name__).joinpath(name).read_text())
