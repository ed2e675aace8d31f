"""One module per backend, each defining ``ENTRY_POINT`` and ``make(tmp_path, overrides)``.

``make`` returns a fresh, empty memory configured for tests (temporary paths, fakes where a
real service is not the point). The contract suite runs every entry point of our
distribution through its factory, so a backend registered without one fails the suite.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

Factory = Callable[[Any, dict], Any]


def all_factories() -> dict[str, Factory]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[module.ENTRY_POINT] = module.make
    return found
