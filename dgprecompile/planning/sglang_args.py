"""SGLang's server options, read from the source of its ``server_args.py`` with ``ast`` (sglang is never imported:
it needs torch).

SGLang declares its options two ways, and a release may use both:

* ``parser.add_argument("--tp-size", "--tp", type=int, default=ServerArgs.tp_size, ...)`` calls inside
  ``ServerArgs.add_cli_args`` (every release up to 0.5.9, and the dynamic/deprecated leftovers later);
* ``tp_size: A[int, Arg(help=..., aliases=[...])] = 1`` fields, turned into options by
  ``arg_groups.arg_utils.add_cli_args_from_dataclass`` (0.5.14 on; from 0.5.20 the fields live in
  ``arg_groups/fields/*.py``). Its rules, as read from 0.5.14 and 0.5.23 ``arg_utils.py``: the option name is
  ``Arg.cli_name`` or ``--`` + the field name with ``_`` -> ``-``, then ``Arg.aliases``; dest = the field name;
  ``Literal[...]`` gives choices, ``List[X]`` nargs ``+``, ``bool`` store_true, ``Arg.type_parser`` the type;
  ``Arg.no_cli`` fields have no option.

The result is an option table (one :class:`OptionSpec` per option) that :mod:`dgprecompile.planning.server_cmd`
turns back into an ``argparse`` parser, so a command line is read the way that release reads it: the same
aliases, the same unique-prefix abbreviations (argparse's default ``allow_abbrev``), the same refusals.
``scripts/update_sglang_args.py`` writes one table per release into ``dgprecompile/data/sglang_args/``.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = 1

# argparse's own actions that take no value, and what they store
_ZERO_ARG_ACTIONS = {"store_true": (True, False), "store_false": (False, True), "store_const": (None, None),
                     "count": (None, None), "help": (None, None), "version": (None, None)}
# type callables that SGLang uses and we can reproduce by name (facts: 0.5.14 utils/common.py human_readable_int
# accepts SI k/M/G/T, decimals allowed, and IEC Ki/Mi/Gi/Ti suffixes)
_KNOWN_TYPES = {"int": "int", "float": "float", "str": "str", "human_readable_int": "human_int"}


@dataclass
class OptionSpec:
    names: list[str]
    dest: str
    nargs: int | str | None = None  # None: one value; 0: a flag; '+', '*', '?'
    type: str = "str"  # int | float | str | human_int
    default: Any = None
    const: Any = None
    choices: list[Any] | None = None
    required: bool = False
    where: str = ""  # file:line of the declaration

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        blank = {"nargs": None, "type": "str", "default": None, "const": None, "choices": None, "required": False,
                 "where": ""}
        return {k: v for k, v in d.items() if k not in blank or not (v is blank[k] or v == blank[k] and
                                                                       type(v) is type(blank[k]))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OptionSpec:
        return cls(**d)


@dataclass
class _Module:
    path: str
    tree: ast.Module
    constants: dict[str, Any] = field(default_factory=dict)  # NAME = literal


class _Unknown:
    pass


UNKNOWN = _Unknown()


def _literal(node: ast.AST | None, consts: dict[str, Any]) -> Any:
    """A literal value, or UNKNOWN."""
    if node is None:
        return UNKNOWN
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_literal(e, consts) for e in node.elts]
        return UNKNOWN if any(i is UNKNOWN for i in items) else list(items)
    if isinstance(node, ast.Call) and _name(node.func) in ("list", "sorted") and len(node.args) == 1:
        return _literal(node.args[0], consts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal(node.left, consts), _literal(node.right, consts)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
    return UNKNOWN


def _name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stmt in tree.body:
        targets: list[ast.AST] = []
        value = None
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for t in targets:
            if isinstance(t, ast.Name) and t.id.isupper():
                v = _literal(value, out)
                if v is not UNKNOWN:
                    out[t.id] = v
    return out


@dataclass
class _ActionClass:
    zero_args: bool
    const: Any = None
    default: Any = None


def _action_classes(modules: list[_Module]) -> dict[str, _ActionClass]:
    """argparse.Action subclasses: does __init__ default nargs to 0 (a flag), and with which const/default."""
    out: dict[str, _ActionClass] = {}
    for mod in modules:
        for node in ast.walk(mod.tree):
            if not isinstance(node, ast.ClassDef) or not any(_name(b) == "Action" for b in node.bases):
                continue
            info = _ActionClass(zero_args=False)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    _init_defaults(item, info)
            out[node.name] = info
    return out


def _init_defaults(init: ast.FunctionDef, info: _ActionClass) -> None:
    """What an Action subclass's ``__init__`` defaults nargs, const and default to, into ``info``."""
    args = init.args.args[len(init.args.args) - len(init.args.defaults):]
    for arg, default in zip(args, init.args.defaults, strict=True):
        value = _literal(default, {})
        if arg.arg == "nargs" and value == 0:
            info.zero_args = True
        elif arg.arg == "const" and value is not UNKNOWN:
            info.const = value
        elif arg.arg == "default" and value is not UNKNOWN:
            info.default = value


@dataclass
class _Field:
    name: str
    default: Any  # UNKNOWN when not a literal, None when absent
    has_default: bool
    annotation: ast.AST
    line: int
    path: str


def _field_default(stmt: ast.AnnAssign, consts: dict[str, Any]) -> tuple[Any, bool]:
    if stmt.value is None:
        return None, False
    v = stmt.value
    if isinstance(v, ast.Call) and _name(v.func) == "field":
        for kw in v.keywords:
            if kw.arg == "default":
                return _literal(kw.value, consts), True
            if kw.arg == "default_factory":
                return ([] if _name(kw.value) == "list" else {} if _name(kw.value) == "dict" else UNKNOWN), True
        return None, False
    return _literal(v, consts), True


def _class_fields(cls: ast.ClassDef, mod: _Module) -> list[_Field]:
    out = []
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            default, has = _field_default(stmt, mod.constants)
            out.append(_Field(stmt.target.id, default, has, stmt.annotation, stmt.lineno, mod.path))
    return out


def _annotated_parts(ann: ast.AST) -> tuple[ast.AST, ast.AST | None] | None:
    """(inner type, Arg(...) call or help string) for ``A[T, ...]`` / ``Annotated[T, ...]``, else None."""
    if not (isinstance(ann, ast.Subscript) and _name(ann.value) in ("A", "Annotated")):
        return None
    sl = ann.slice
    elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
    if len(elts) < 2:
        return None
    meta = None
    for e in elts[1:]:
        if isinstance(e, ast.Call) and _name(e.func) == "Arg":
            meta = e
            break
        if isinstance(e, ast.Constant) and isinstance(e.value, str) or isinstance(e, ast.JoinedStr) or (
                isinstance(e, ast.BinOp)):
            meta = e
            break
    if meta is None:
        return None
    return elts[0], meta


def _unwrap_optional(t: ast.AST) -> ast.AST:
    if isinstance(t, ast.Subscript) and _name(t.value) == "Optional":
        return t.slice
    if isinstance(t, ast.Subscript) and _name(t.value) == "Union":
        elts = t.slice.elts if isinstance(t.slice, ast.Tuple) else [t.slice]
        rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(rest) == 1:
            return rest[0]
    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitOr):
        sides = [t.left, t.right]
        rest = [e for e in sides if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(rest) == 1:
            return rest[0]
    if isinstance(t, ast.Constant) and isinstance(t.value, str):  # a string annotation
        try:
            return _unwrap_optional(ast.parse(t.value, mode="eval").body)
        except SyntaxError:
            return t
    return t


def _type_of(node: ast.AST | None) -> str:
    return _KNOWN_TYPES.get(_name(node), "str") if node is not None else "str"


def _option_from_field(f: _Field, classes: dict[str, _ActionClass], consts: dict[str, Any]) -> OptionSpec | None:
    parts = _annotated_parts(f.annotation)
    if parts is None:
        return None
    inner, meta = parts
    kw: dict[str, ast.AST] = {}
    if isinstance(meta, ast.Call):
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
    if _literal(kw.get("no_cli"), consts) is True:
        return None
    cli_name = _literal(kw.get("cli_name"), consts)
    cli_name = cli_name if isinstance(cli_name, str) else "--" + f.name.replace("_", "-")
    aliases = _literal(kw.get("aliases"), consts)
    names = [cli_name] + (list(aliases) if isinstance(aliases, list) else [])
    default = f.default if f.has_default else None
    if default is UNKNOWN:
        default = None
    where = f"{f.path}:{f.line}"
    spec = OptionSpec(names=names, dest=f.name, default=default, where=where)
    choices = _literal(kw.get("choices"), consts)
    nargs = _literal(kw.get("nargs"), consts)
    const = _literal(kw.get("const"), consts)
    if "action" in kw:
        action = kw["action"]
        action_name = _literal(action, consts) if isinstance(action, ast.Constant) else _name(action)
        extra = _literal(kw.get("action_kwargs"), consts)
        extra = extra if isinstance(extra, dict) else {}
        _apply_action(spec, str(action_name), classes, extra.get("nargs", UNKNOWN), extra.get("const", UNKNOWN))
        if "default" in extra:
            spec.default = extra["default"]
        return spec
    t = _unwrap_optional(inner)
    if isinstance(t, ast.Subscript) and _name(t.value) == "Literal":
        vals = _literal(t.slice, consts)
        vals = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        spec.choices = choices if isinstance(choices, list) else vals
        spec.type = _type_of(kw.get("type_parser")) if "type_parser" in kw else (
            "int" if vals and isinstance(vals[0], int) else "float" if vals and isinstance(vals[0], float) else "str")
        return spec
    if isinstance(t, ast.Subscript) and _name(t.value) in ("List", "list") and "type_parser" not in kw:
        spec.nargs = nargs if isinstance(nargs, str) else "+"
        spec.type = _type_of(t.slice)
        spec.choices = choices if isinstance(choices, list) else None
        return spec
    if _name(t) == "bool":
        spec.nargs, spec.const = 0, True
        spec.default = False if default is None else default
        return spec
    spec.type = _type_of(kw["type_parser"]) if "type_parser" in kw else _type_of(t)
    spec.choices = choices if isinstance(choices, list) else None
    if isinstance(nargs, (str, int)):
        spec.nargs = nargs
    if const is not UNKNOWN and const is not None:
        spec.const = const
    required = _literal(kw.get("required"), consts)
    spec.required = required is True or (required in (None, UNKNOWN) and not f.has_default)
    return spec


def _apply_action(spec: OptionSpec, action: str, classes: dict[str, _ActionClass], nargs: Any, const: Any) -> None:
    if action in _ZERO_ARG_ACTIONS:
        spec.nargs = 0
        c, d = _ZERO_ARG_ACTIONS[action]
        spec.const = const if const is not UNKNOWN else c
        if d is not None and spec.default is None:
            spec.default = d
        return
    if action == "BooleanOptionalAction":
        spec.nargs = 0
        spec.const = True
        spec.names = spec.names + ["--no-" + n[2:] for n in spec.names if n.startswith("--")]
        return
    info = classes.get(action)
    if isinstance(nargs, (int, str)) and nargs is not UNKNOWN:
        spec.nargs = nargs
    elif info is not None and info.zero_args:
        spec.nargs = 0
    if spec.nargs == 0:
        spec.const = const if const is not UNKNOWN else (info.const if info else True)
        if spec.default is None and info is not None:
            spec.default = info.default


def _options_from_add_argument(func: ast.FunctionDef, mod: _Module, fields: dict[str, _Field],
                               classes: dict[str, _ActionClass]) -> list[OptionSpec]:
    out = []
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest = _literal(kw.get("dest"), mod.constants)
        if not isinstance(dest, str):
            long = next((n for n in names if n.startswith("--")), names[0])
            dest = long.lstrip("-").replace("-", "_")
        spec = OptionSpec(names=names, dest=dest, where=f"{mod.path}:{node.lineno}")
        spec.default = _default_expr(kw.get("default"), mod, fields)
        nargs = _literal(kw.get("nargs"), mod.constants)
        const = _literal(kw.get("const"), mod.constants)
        if "action" in kw:
            action = kw["action"]
            name = action.value if isinstance(action, ast.Constant) else _name(action)
            _apply_action(spec, str(name), classes, nargs, const)
            if "const_value" in kw and spec.nargs == 0:
                cv = _literal(kw["const_value"], mod.constants)
                spec.const = None if cv is UNKNOWN else cv
        elif isinstance(nargs, (int, str)):
            spec.nargs = nargs
        if spec.nargs != 0:
            spec.type = _type_of(kw.get("type"))
            choices = _literal(kw.get("choices"), mod.constants)
            spec.choices = list(choices) if isinstance(choices, (list, tuple)) else None
            if const is not UNKNOWN and const is not None:
                spec.const = const
        spec.required = _literal(kw.get("required"), mod.constants) is True
        out.append(spec)
    return out


def _default_expr(node: ast.AST | None, mod: _Module, fields: dict[str, _Field]) -> Any:
    if node is None:
        return None
    if isinstance(node, ast.Attribute) and _name(node.value) == "ServerArgs":
        f = fields.get(node.attr)
        return None if f is None or f.default is UNKNOWN else f.default
    if isinstance(node, ast.Call) and _name(node.func) in ("_declared_default",) and node.args:
        key = _literal(node.args[0], {})
        f = fields.get(key) if isinstance(key, str) else None
        return None if f is None or f.default is UNKNOWN else f.default
    if _name(node) == "SUPPRESS":
        return None
    value = _literal(node, mod.constants)
    return None if value is UNKNOWN else value


def extract_options(sources: dict[str, str]) -> list[OptionSpec]:
    """The option table of one sglang release, from its source files.

    ``sources`` maps paths relative to the ``sglang`` package (``srt/server_args.py``, and when present
    ``srt/arg_groups/argparse_actions.py``, ``srt/arg_groups/choices.py``, ``srt/arg_groups/fields/*.py``)
    to their text.
    """
    if "srt/server_args.py" not in sources:
        raise ValueError("srt/server_args.py is missing")
    modules = []
    for path in sorted(sources):
        tree = ast.parse(sources[path], filename=path)
        modules.append(_Module(path, tree, _module_constants(tree)))
    consts: dict[str, Any] = {}
    for mod in modules:
        consts.update(mod.constants)
    classes = _action_classes(modules)
    main = next(m for m in modules if m.path == "srt/server_args.py")
    server_cls = next((n for n in main.tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs"), None)
    if server_cls is None:
        raise ValueError("srt/server_args.py has no class ServerArgs")

    # dataclass-style fields: ServerArgs itself, and (0.5.20+) the namespace classes in arg_groups/fields/
    field_sources: list[tuple[ast.ClassDef, _Module]] = [(server_cls, main)]
    for mod in modules:
        if mod.path.startswith("srt/arg_groups/fields/"):
            field_sources += [(n, mod) for n in mod.tree.body if isinstance(n, ast.ClassDef)]
    fields: dict[str, _Field] = {}
    options: list[OptionSpec] = []
    for cls, mod in field_sources:
        for f in _class_fields(cls, mod):
            fields.setdefault(f.name, f)
            spec = _option_from_field(f, classes, consts)
            if spec is not None:
                options.append(spec)
    add_cli = next((n for n in server_cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None)
    if add_cli is not None:
        options += _options_from_add_argument(add_cli, main, fields, classes)
    seen: set[str] = set()
    unique = []
    for spec in options:  # a name declared twice (e.g. in two platform branches): the first one wins
        new = [n for n in spec.names if n not in seen]
        if not new:
            continue
        seen.update(new)
        spec.names = new
        unique.append(spec)
    return unique


SOURCE_GLOBS = ("srt/server_args.py", "srt/arg_groups/argparse_actions.py", "srt/arg_groups/choices.py",
                "srt/arg_groups/fields/*.py")


def wanted_source(rel: str) -> bool:
    """Whether a path relative to the sglang package is one extract_options reads."""
    from fnmatch import fnmatch

    return any(fnmatch(rel, g) for g in SOURCE_GLOBS)


# ---- tables: bundled data files, the installed sglang, wheels ------------------------------------------------

TABLE_DIR = "sglang_args"  # under dgprecompile/data/


@dataclass
class OptionTable:
    sglang: str  # the release the table was read from
    origin: str  # "bundled:<file>", "installed:<dir>", "wheel:<file>"
    options: list[OptionSpec]
    extra_origin: str | None = None  # where options added on top come from (SpecForge's spec-capture patch)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "sglang": self.sglang, "origin": self.origin,
                "options": [o.to_dict() for o in self.options]}

    def by_dest(self) -> dict[str, OptionSpec]:
        return {o.dest: o for o in self.options}


def sources_from_wheel(path: str) -> dict[str, str]:
    import zipfile

    out = {}
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name.startswith("sglang/") and wanted_source(name[len("sglang/"):]):
                out[name[len("sglang/"):]] = zf.read(name).decode("utf-8")
    return out


def sources_from_dir(package_dir: str) -> dict[str, str]:
    """The wanted files of an unpacked or installed ``sglang`` package directory."""
    import os

    out = {}
    for root, _dirs, files in os.walk(os.path.join(package_dir, "srt")):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), package_dir).replace(os.sep, "/")
            if wanted_source(rel):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    out[rel] = fh.read()
    return out


def installed_sglang() -> tuple[str, str] | None:
    """(version, package dir) of the sglang installed in this interpreter, found without importing it."""
    from importlib import metadata

    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        return None
    pkg = dist.locate_file("sglang")
    if not (pkg / "srt" / "server_args.py").is_file():  # type: ignore[operator]
        return None
    return dist.version, str(pkg)


def read_table_file(path) -> OptionTable:
    import json

    data = json.loads(open(path, encoding="utf-8").read()) if isinstance(path, str) else json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: option table schema {data.get('schema')!r}, expected {SCHEMA}")
    return OptionTable(data["sglang"], data["origin"], [OptionSpec.from_dict(o) for o in data["options"]])


def dump_table(table: OptionTable) -> str:
    import json

    lines = [json.dumps(o.to_dict(), sort_keys=True) for o in table.options]
    head = json.dumps({"schema": SCHEMA, "sglang": table.sglang, "origin": table.origin})[:-1]
    return head + ', "options": [\n' + ",\n".join(lines) + "\n]}\n"


def bundled_tables() -> dict[str, Any]:
    """sglang version -> resource path of its bundled table."""
    from importlib import resources

    folder = resources.files("dgprecompile.data").joinpath(TABLE_DIR)
    out = {}
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".json") and name[0].isdigit():
            out[name[: -len(".json")]] = entry
    return out


def spec_capture_overlay() -> OptionTable:
    from importlib import resources

    entry = resources.files("dgprecompile.data").joinpath(TABLE_DIR, "specforge-spec-capture.json")
    return read_table_file(entry)
