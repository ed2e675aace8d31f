"""Doctest collection of the package: the web application of ``ovos-memory serve`` imports its
framework at the top (it is imported only by that command), so without the ``[serve]`` extra
its module is not collected; every other module imports without any extra."""
from __future__ import annotations

import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("starlette") else ["ovos_memory_plugins/_serve/app.py"]
