"""STAND-IN packages (see sitecustomize.py in this folder): importable, calling anything raises StandinCalled."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class StandinCalled(RuntimeError):
    pass


# names whose call is a decorator factory at import time (triton.autotune(...), triton.heuristics(...), ...)
FACTORIES = {"autotune", "heuristics", "Config", "jit", "constexpr_function"}


class Thing:
    """Any attribute of a stand-in package: usable at import time, raises when called to do work."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Thing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs and not isinstance(args[0], Thing):
            return Kernel(args[0])  # used as a decorator
        if self._name.rsplit(".", 1)[-1] in FACTORIES:
            return Thing(f"{self._name}()")
        raise StandinCalled(f"{self._name} belongs to a dgprecompile test STAND-IN package and cannot run here")

    def __getitem__(self, item):
        return Thing(f"{self._name}[]")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self):
        return f"<stand-in {self._name}>"


class Kernel:
    """A function decorated by a stand-in (e.g. @triton.jit): launching it raises."""

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        raise StandinCalled(f"stand-in kernel {self.__name__} cannot run here")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Thing(f"{self.__name__}.{attr}")


def _plain_class(name):
    return type(name, (), {"__init__": lambda self, *a, **k: None})


EXTRA = {
    "triton": {"__version__": "3.6.0", "cdiv": lambda a, b: -(-a // b),
               "next_power_of_2": lambda n: 1 << (max(n, 1) - 1).bit_length()},
    "triton.language": {"constexpr": _plain_class("constexpr"), "dtype": _plain_class("dtype")},
    "torchvision": {"__version__": "0.0.0+standin"},
    "sgl_kernel": {"__version__": "0.0.0+standin"},
}


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = set(roots)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, "dgprecompile test STAND-IN")
        module.__path__ = []
        module.DGPRECOMPILE_STANDIN = True
        module.__dict__.update(EXTRA.get(spec.name, {}))
        name = spec.name

        def getattr_(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return Thing(f"{name}.{attr}")

        module.__getattr__ = getattr_
        return module

    def exec_module(self, module):
        pass


def install(*roots):
    sys.meta_path.insert(0, Finder(roots))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after ``name`` is first imported, and costs nothing in a process that never
    imports it (transformers imports torch: a second or more in every Python these folders start)."""

    def __init__(self, name, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        real, then = spec.loader.exec_module, self.then

        def exec_module(module):
            real(module)
            then(sys.modules.get(fullname, module))  # a package may put another object there (a lazy module)

        spec.loader.exec_module = exec_module
        return spec


def _register_exist_ok(transformers):
    auto = transformers.AutoConfig
    original = auto.register

    def register(model_type, config, exist_ok=False):
        return original(model_type, config, exist_ok=True)

    auto.register = staticmethod(register)


def transformers_exist_ok():
    """AutoConfig.register with exist_ok=True, once transformers is imported (if it ever is)."""
    if "transformers" in sys.modules:
        _register_exist_ok(sys.modules["transformers"])
    else:
        sys.meta_path.insert(0, _AfterImport("transformers", _register_exist_ok))
