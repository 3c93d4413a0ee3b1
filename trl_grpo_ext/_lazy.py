"""Lazy exports for a package's ``__init__``: its public names load their module on first use (a leaf module, so a
subpackage need not import the top-level package, whose own lazy names reach the trainer)."""

from importlib import import_module


def _lazy_exports(package: str, module: str, names: frozenset):
    """A module ``__getattr__`` for ``package`` that loads ``names`` from its submodule ``module`` (e.g.
    ``".ext_config"``) on first use, so importing a sibling submodule stays light."""

    def getattr_(name: str):
        if name in names:
            return getattr(import_module(module, package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return getattr_
