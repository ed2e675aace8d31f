"""``ovos-memory check-config``: validate a persona file, or one plugin's block, strictly."""
from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping
from typing import Any

from .commands import read_json
from .output import EXIT_INPUT, UI, CLIError, Text, escape
from .persona import memory_class, parse_persona

__all__ = ["cmd_check_config"]


def cmd_check_config(args: argparse.Namespace, ui: UI) -> int:
    from .engine import find_endpoint

    data = read_json(args.file, "config file")
    problems: list[str] = []
    notes: list[str] = []
    if isinstance(data, Mapping) and not args.module:
        persona = parse_persona(data, path=args.file)
        module, block = persona.memory_module, dict(persona.memory_config)
        found = find_endpoint(persona.handlers, persona.data)
        if found is None:
            notes.append(f"no OpenAI-compatible handler in {list(persona.handlers)}: 'ovos-memory chat' cannot use it")
        elif module and not found[1].get("allow_system_prompts"):
            notes.append(f"'{found[0]}' has allow_system_prompts off: memory injected as system messages is dropped")
    elif args.module:
        module, block = args.module, data
        if not isinstance(block, Mapping):
            raise CLIError(f"{args.file!r} must hold a JSON object")
    else:
        raise CLIError(f"{args.file!r} must hold a JSON object")
    if module is None:
        ui.out.print("memory is disabled (memory_module is null): nothing to check")
        return 0
    problems += _check_block(module, block)
    for note in notes:
        ui.err.print(f"[yellow]note:[/yellow] {escape(note)}")
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_INPUT
    ui.out.print(Text(f"OK: the '{module}' config is valid"))
    return 0


def _check_block(module: str, block: Mapping[str, Any], where: str = "") -> list[str]:
    """Every problem the plugin would raise when it starts with ``block``, all at once."""
    from ..config import check_config

    cls = memory_class(module)
    if cls is None:
        return [f"{where}memory plugin '{module}' is not installed{_did_you_mean(module)}"]
    config_cls = getattr(cls, "Config", None)
    if config_cls is None:
        return []  # a third-party plugin without a typed config: nothing to check against
    problems = [where + p for p in check_config(config_cls, block, module, getattr(cls, "extra_config_keys", ()),
                                                 getattr(cls, "check_settings", None))]
    if module == "ovos-memory-plugin-composite" and isinstance(block.get("members"), list):
        for i, spec in enumerate(block["members"]):
            if isinstance(spec, str):
                problems += _check_block(spec, {}, f"{where}members[{i}] ")
            elif isinstance(spec, Mapping) and isinstance(spec.get("config") or {}, Mapping):
                problems += _check_block(str(spec.get("module", "")), spec.get("config") or {},
                                         f"{where}members[{i}] ")
    return problems


def _did_you_mean(module: str) -> str:
    from .._core.loading import MEMORY_GROUP, installed_plugins

    close = difflib.get_close_matches(module, installed_plugins(MEMORY_GROUP), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else " (see 'ovos-memory plugins')"
