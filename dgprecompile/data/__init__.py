"""The package's data files (facts read from the libraries, one file per subject). ``load_yaml`` is how every stage
reads one of them."""

from __future__ import annotations

from importlib import resources
from typing import Any


def load_yaml(name: str) -> Any:
    """The parsed YAML file ``name`` (a path under dgprecompile/data). libyaml's safe loader where PyYAML was built
    with it (the same data, a tenth of the time: every command reads several of these files), else PyYAML's own."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(resources.files(__name__).joinpath(name).read_text(), Loader=loader)
