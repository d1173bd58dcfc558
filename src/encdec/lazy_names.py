"""Names a package imports on first use (PEP 562), so that importing the package stays cheap: `encdec` starts
(and answers Ctrl-C) before torch has loaded, a model config reads without the model classes."""

import importlib
from collections.abc import Callable


def lazy_getattr(package: str, names_by_module: dict[str, tuple[str, ...]]) -> Callable[[str], object]:
    """The module-level `__getattr__` of `package`: a name one of `names_by_module`'s modules gives, read from
    that module, imported then; any other name an AttributeError, as Python's own."""
    table = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name: str) -> object:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
