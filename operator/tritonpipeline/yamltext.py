"""The one YAML writer of everything the project prints or writes (manifests, the CRD, the adapter rules,
imported pipelines): plain block YAML in the order given, never anchors and aliases (`&id001`, `*id001`),
which PyYAML writes for an object that appears twice and which reviewers, `kubectl diff` habits and
several GitOps tools do not expect."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class PlainDumper(yaml.SafeDumper):
    """SafeDumper that writes a repeated object out again instead of aliasing it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(value: Any, **options: Any) -> str:
    return yaml.dump(value, Dumper=PlainDumper, sort_keys=False, **options)


def dump_all(values: Iterable[Any], **options: Any) -> str:
    return yaml.dump_all(values, Dumper=PlainDumper, sort_keys=False, **options)
