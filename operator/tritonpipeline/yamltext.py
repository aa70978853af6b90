"""The one YAML writer of everything the project prints or writes (manifests, the CRD, the adapter rules,
imported pipelines): plain block YAML in the order given, never anchors and aliases (`&id001`, `*id001`),
which PyYAML writes for an object that appears twice and which reviewers, `kubectl diff` habits and
several GitOps tools do not expect."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

STR_TAG = "tag:yaml.org,2002:str"
# Plain scalars that the YAML readers of kubectl, helm and GitOps tools (go-yaml: YAML 1.1's booleans with
# y and n, and YAML 1.2's numbers such as 1e-05, which PyYAML's YAML 1.1 resolver reads only with a dot)
# take for something other than a string. PyYAML quotes a string only where it would read it otherwise
# itself: `y` and `1e-05` came out plain, and kubectl refused a label `y` ("cannot unmarshal bool") and a
# KEDA threshold `1e-05` ("must be of type string").
_WORDS = ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
OTHER_READERS_NON_STRINGS = frozenset(
    [form for word in _WORDS for form in (word, word.capitalize(), word.upper())] + ["~"]
)


def read_otherwise(text: str) -> bool:
    """Whether a YAML reader other than PyYAML may read `text`, written plain, as no string: a boolean,
    a null or a number (with `_` separators, a base prefix or an exponent)."""
    if text in OTHER_READERS_NON_STRINGS:
        return True
    plain = text.replace("_", "")
    for read in (lambda t: int(t, 0), float):
        try:
            read(plain)
            return True
        except ValueError:
            continue
    return False


def str_style(text: str) -> str | None:
    """The style to write a string in: single-quoted where another reader would read it plain as no
    string, else PyYAML's choice."""
    return "'" if read_otherwise(text) else None


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    return dumper.represent_scalar(STR_TAG, data, style=str_style(data))


class PlainDumper(yaml.SafeDumper):
    """SafeDumper that writes a repeated object out again instead of aliasing it, and quotes a string
    another YAML reader would read as no string (read_otherwise)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


PlainDumper.add_representer(str, _represent_str)


def dump(value: Any, **options: Any) -> str:
    return yaml.dump(value, Dumper=PlainDumper, sort_keys=False, **options)


def dump_all(values: Iterable[Any], **options: Any) -> str:
    return yaml.dump_all(values, Dumper=PlainDumper, sort_keys=False, **options)
