"""Config nodes as plain Python, and the one builder of typed configs from them.

Hydra hands over ``DictConfig`` / ``ListConfig`` nodes; dataclasses, rewards and anything that crosses a
Ray or file boundary want plain dicts and lists with the interpolations resolved. ``typed_config``
turns such a section into its typed dataclass once, nested dataclasses included, and names the
offending field when a key is unknown or a value is bad. The same call rebuilds a job's config from
its ``asdict`` form on the other side of a Ray boundary.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def to_plain(node: Any) -> Any:
    """An OmegaConf node (``DictConfig`` is a ``Mapping`` too) as plain containers, interpolations resolved;
    anything else as it is."""
    omegaconf = sys.modules.get("omegaconf")  # a node exists only once omegaconf was imported
    if omegaconf is not None and omegaconf.OmegaConf.is_config(node):
        return omegaconf.OmegaConf.to_container(node, resolve=True)
    return node


def to_plain_dict(node: Any) -> dict[str, Any]:
    """A config section as a new plain ``dict`` (``None``: empty). Nested values are copies: a builder
    that pops keys from it never changes the caller's config."""
    plain = to_plain(node)
    return {} if plain is None else copy.deepcopy(dict(plain))


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def typed_config(cls: type[T], node: Any, prefix: str = "") -> T:
    """The dataclass ``cls`` from a config section (a Hydra node, a dict, ``None`` for the defaults).

    Fields typed as a dataclass are built the same way from their sub-sections; an instance of the
    type is kept as it is. An unknown key fails as ``<prefix>.<key>: unknown key``, and the dataclass's
    own checks (``ValueError`` in ``__post_init__``) and type errors are reported under ``prefix``.
    """
    if isinstance(node, cls):
        return node
    values = to_plain_dict(node)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    extra = sorted(set(values) - names)
    if extra:
        raise ValueError(f"{_path(prefix, extra[0])}: unknown key (expected one of {sorted(names)})")
    for name, value in values.items():
        sub = hints.get(name)
        if isinstance(sub, type) and dataclasses.is_dataclass(sub) and (value is None or isinstance(value, Mapping)):
            values[name] = typed_config(sub, value, _path(prefix, name))
    try:
        return cls(**values)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if not prefix or msg.startswith(prefix) else f"{prefix}.{msg}") from None
    except TypeError as e:
        raise ValueError(f"{prefix or cls.__name__}: {e}") from None
