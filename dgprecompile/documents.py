"""The one way a YAML or JSON document a user gives is parsed: YAML with a budget of nodes that counts alias
expansions and a budget of nesting depth; JSON (no aliases: its size is its file's) with the depth budget.

PyYAML shares an anchored node between its aliases, so a "billion laughs" of anchors (each level a list of ten
aliases of the one before) parses quickly into a small graph; but everything after the parse (the schema check,
quoting a value in a message, the plan built from it) walks it as the tree it stands for, 10^9 nodes and more.
So the composer counts every node as the expanded tree has it (an alias adds the size of what it names) and
stops as soon as the count passes :data:`MAX_NODES`: the work and memory spent on any file are bounded by the
budget, not by what the aliases multiply. An alias that names a node it is inside of (a cycle) is refused too.
The composer recurses once per level, so a 100,000-deep list would end in a RecursionError: the depth is
counted and stopped at :data:`MAX_DEPTH`.

The package's own data files (dgprecompile.data.load_yaml) are trusted and read without the budgets.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from dgprecompile.errors import InputError

# The largest real document: a manifest of 4,740 nodes, 6 levels deep (shapes/, the sm90 0.5.7-0.5.9 plan); a
# run config or train.yaml has under 200. The budgets are far above any real one and far below what hurts.
MAX_NODES = 100_000
MAX_DEPTH = 64


class _Refused(yaml.YAMLError):
    """A budget was exceeded (a YAMLError, so the parser's own clean-up runs as for any parse error)."""


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts nodes (aliases expanded) and depth; refuses past either budget."""

    def __init__(self, stream: str, max_nodes: int, max_depth: int):
        super().__init__(stream)
        self.max_nodes, self.max_depth = max_nodes, max_depth
        self.nodes = 0  # nodes composed so far, every alias counted as the whole subtree it names
        self.depth = 0
        self.sizes: dict[int, int] = {}  # id(anchored node) -> its expanded size, once it is composed whole

    def _count(self, n: int) -> None:
        self.nodes += n
        if self.nodes > self.max_nodes:
            raise _Refused(f"more than {self.max_nodes:,} nodes once its aliases are expanded (a real one has a "
                           "few thousand)")

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:  # an unknown alias: the composer's own error below
                size = self.sizes.get(id(node))
                if size is None:
                    raise _Refused(f"the alias *{event.anchor} at line {event.start_mark.line + 1} is inside "
                                   "the node it names (a cycle)")
                self._count(size)
            return super().compose_node(parent, index)
        event = self.peek_event()
        self.depth += 1
        if self.depth > self.max_depth:
            raise _Refused(f"nested deeper than {self.max_depth} levels at line {event.start_mark.line + 1} "
                           "(a real one nests under 10)")
        start = self.nodes
        self._count(1)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if event.anchor is not None:  # the anchors table holds the node, so its id stays its own
            self.sizes[id(node)] = self.nodes - start
        return node


def load_yaml_text(text: str, where: str, hint: str, *, max_nodes: int = MAX_NODES,
                   max_depth: int = MAX_DEPTH) -> Any:
    """The document in ``text`` (one YAML document, safe tags only), or one InputError naming ``where`` (e.g.
    "manifest m.yaml") when it is not YAML, has more than ``max_nodes`` nodes counting alias expansions, or
    nests deeper than ``max_depth``."""
    loader = _BoundedLoader(text, max_nodes, max_depth)
    try:
        return loader.get_single_data()
    except _Refused as exc:
        raise InputError(f"{where}: {exc}", hint=hint) from None
    except yaml.YAMLError as exc:
        raise InputError(f"cannot read {where}: {str(exc).splitlines()[0]}", hint=hint) from None
    except (ValueError, OverflowError) as exc:  # a scalar the constructor cannot make (an int of 5,000 digits)
        raise InputError(f"cannot read {where}: {str(exc).split(':')[0][:120]}", hint=hint) from None
    finally:
        loader.dispose()


def load_json_text(text: str | bytes, where: str, hint: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in ``text``, or one InputError naming ``where`` when it is not JSON, holds a number
    Python will not convert (an int of 5,000 digits: ValueError), nests past the interpreter's recursion limit
    (RecursionError) or deeper than ``max_depth`` (what reads it later recurses once per level)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})", hint=hint) from None
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {max_depth} levels (a real one nests under 10)",
                         hint=hint) from None
    except UnicodeDecodeError:
        raise InputError(f"{where} is not valid JSON (not UTF-8 text)", hint=hint) from None
    except ValueError as exc:  # an int past Python's 4,300-digit conversion limit
        raise InputError(f"cannot read {where}: {str(exc).split(':')[0][:120]}", hint=hint) from None
    if deeper_than(doc, max_depth):
        raise InputError(f"{where}: nested deeper than {max_depth} levels (a real one nests under 10)", hint=hint)
    return doc


def deeper_than(doc: Any, limit: int) -> bool:
    """Whether ``doc`` nests lists and objects more than ``limit`` deep (a walk without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False
