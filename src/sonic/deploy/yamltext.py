"""YAML text of configuration dicts: block style, keys in the order given, multi-line strings as ``|``."""

from __future__ import annotations

from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Embedded Lua, PromQL and config files stay readable in the generated files.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def to_yaml(data: Any) -> str:
    text: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=110)
    return text
