"""Bounded input: a file path → its bytes (a regular file under a size cap) → one YAML document, with
aliases expanded under a budget.

Every file the scenario loader reads (the scenario, its operator libraries) and every ``--set`` value goes
through here, as does every file ``Report.from_run_dir`` reads. What is refused, and why:

* anything but a regular file (a FIFO, a device such as /dev/zero, a directory, a socket): reading it could
  block or never end. It is opened without blocking and checked before a byte is read.
* a file over ``MAX_INPUT_BYTES`` (4 MiB; a scenario is a few KiB): read with that bound, never whole.
* a document nested deeper than ``MAX_DEPTH`` levels, or holding more than ``MAX_VALUES`` values or
  ``MAX_TEXT_CHARS`` characters of text once its aliases (``*name``, repeating an ``&name`` anchor) are
  expanded, or an alias inside its own anchor: eight lines of anchors each repeating the previous one nine
  times are 43 million values. The budget is counted on the composed node graph, before any Python value is
  built, in time proportional to the file.
"""
from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, BinaryIO

import numpy as np
import yaml

from ultracluster.errors import shorten_text
from ultracluster.units import GIB, KIB, MIB

MAX_INPUT_BYTES = 4 * MIB       # scenario files and operator libraries
MAX_VALUES = 100_000            # scalars, lists and mappings after expanding aliases
MAX_TEXT_CHARS = 16 * MIB       # characters of scalars after expanding aliases
MAX_DEPTH = 64                  # lists and mappings inside one another
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputError(Exception):
    """A file or a YAML text that cannot be read as input: what was given and what is allowed, in words.

    Args:
        given: the path, or ``"line L, column C: what"`` for a problem inside the document.
        allowed: what is allowed, with the reason it was refused.
        in_document: True when the file was read and its content is at fault.
        reason: for a file that was not read, why (``"it is a FIFO"``); ``allowed`` ends with it.
    """

    def __init__(self, given: str, allowed: str, in_document: bool = False, reason: str = "") -> None:
        self.given, self.allowed, self.in_document, self.reason = given, allowed, in_document, reason
        super().__init__(given, allowed, in_document, reason)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = bytes(1 if c in b"[{" else 255 if c in b"]}" else 0 for c in range(256))
_CHUNK = 4 << 20


def json_depth(data: bytes) -> int:
    """How deep a JSON text's arrays and objects nest (brackets inside strings do not count), in linear time and
    without recursion: the strings blanked by one regular expression, then a running sum over the brackets."""
    bare = _JSON_STRING.sub(b'""', data).translate(_BRACKETS)     # [ { -> 1, ] } -> -1 (int8), else 0
    deepest = level = 0
    for at in range(0, len(bare), _CHUNK):         # in chunks: a few MiB of int32 at a time, whatever the file
        depth = np.cumsum(np.frombuffer(bare, dtype=np.int8, count=min(_CHUNK, len(bare) - at), offset=at),
                          dtype=np.int32) + level
        if len(depth):
            deepest, level = max(deepest, int(depth.max())), int(depth[-1])
    return deepest


def load_json(data: bytes | str, source: str = "JSON text") -> Any:
    """A JSON text as Python values, its nesting refused beyond MAX_DEPTH before it is parsed (an InputError
    naming `source`, never a RecursionError); not JSON: ValueError, as `json.loads`."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else bytes(data)
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise InputError(source, f"JSON nested at most {MAX_DEPTH} deep (it nests {depth:,} deep)", in_document=True,
                         reason=f"it nests {depth:,} deep")
    return json.loads(raw.decode("utf-8"))


def size_text(n: int) -> str:
    """Bytes in words: ``"512 bytes"``, ``"4.0 MiB"``, ``"3.2 GiB"``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def open_regular(path: str | os.PathLike, limit: int, what: str = "file") -> BinaryIO:
    """Open a regular file of at most ``limit`` bytes for reading, checked before a byte is read.

    Args:
        path: the file.
        limit: the largest size accepted, in bytes.
        what: the kind of file, for the message (``"YAML file"``, ``"CSV file"``).

    Returns:
        The open binary file (the caller closes it).

    Raises:
        InputError: it is missing or unreadable, not a regular file (a FIFO, a device, a directory, a
            socket), or larger than ``limit``.
    """
    allowed = f"a regular {what} of at most {size_text(limit)}"
    shown = shorten_text(os.fspath(path))

    def refuse(reason: str) -> InputError:
        return InputError(shown, f"{allowed} ({reason})", reason=reason)

    try:   # O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as err:
        raise refuse(err.strerror or str(err)) from None
    try:
        info = os.fstat(fd)
        kind = next((name for test, name in _KINDS if test(info.st_mode)), None)
        if kind or not stat.S_ISREG(info.st_mode):
            raise refuse(f"it is {kind or 'not a regular file'}")
        if info.st_size > limit:
            raise refuse(f"it is {size_text(info.st_size)}")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike, limit: int = MAX_INPUT_BYTES, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (see ``open_regular``), read with that bound.

    Raises:
        InputError: as ``open_regular``, or the file grew past ``limit`` while it was read.
    """
    with open_regular(path, limit, what) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            reason = err.strerror or str(err)
            raise InputError(shorten_text(os.fspath(path)), f"a readable {what} ({reason})", reason=reason) from None
    if len(data) > limit:
        reason = "it grew past that while read"
        raise InputError(shorten_text(os.fspath(path)), f"a regular {what} of at most {size_text(limit)} ({reason})",
                         reason=reason)
    return data


def read_yaml_file(path: str | os.PathLike, loader_class: type | None = None) -> Any:
    """One YAML document read from a file with ``read_bounded`` and ``load_yaml`` (``loader_class``: as there).

    Raises:
        InputError: the file cannot be read (``in_document`` False) or its YAML is bad or too big (True).
    """
    data = read_bounded(path, what="YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(shorten_text(os.fspath(path)), f"a YAML file in UTF-8 (byte {err.start} is not UTF-8)") \
            from None
    return load_yaml(text, loader_class)


def read_packaged_yaml(path: str | os.PathLike) -> Any:
    """A YAML file shipped inside the package (the operator library), as ``read_yaml_file`` reads it but parsed
    by libyaml's C parser where PyYAML has it: about ten times faster (the planner reads the library inside its
    timed search), the same document (``1e-6`` a float, no duplicate keys; tests/chip/test_operator_library.py
    compares the two). The budget is not counted: the file is ours, and the size cap still holds.

    Raises:
        InputError: as ``read_yaml_file``.
    """
    return read_yaml_file(path, _PackagedLoader)


def load_yaml(text: str, loader_class: type | None = None) -> Any:
    """One YAML document (``yaml.safe_load`` rules, plus ``1e-6`` as a float and no duplicate keys), its
    aliases expanded within the budget (``loader_class``: another loader of the same rules, e.g. libyaml's for a
    packaged file).

    Raises:
        InputError: malformed YAML (with line and column), or a document over the budget.
    """
    loader = None
    try:
        loader = (loader_class or Loader)(text)   # reading starts here: a NUL or another non-printable character fails it
        return loader.get_single_data()
    except _Budget as err:
        raise InputError(err.given, err.allowed, in_document=True) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        problem = shorten_text(err.problem or err.context or "malformed YAML")
        given = f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
        raise InputError(given, "well-formed YAML", in_document=True) from None
    except yaml.YAMLError as err:
        raise InputError(shorten_text(str(err)), "well-formed YAML", in_document=True) from None
    except (ValueError, OverflowError) as err:   # e.g. an integer of more than 4300 digits, a 13th month
        raise InputError(f"a value that cannot be read ({shorten_text(str(err), 120)})",
                         "numbers and dates Python can hold", in_document=True) from None
    finally:
        if loader is not None:
            loader.dispose()


class _Budget(Exception):
    def __init__(self, mark: yaml.Mark | None, what: str, allowed: str) -> None:
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        self.given, self.allowed = where + what, allowed
        super().__init__(self.given)


class _NoDuplicateKeys:
    """A mapping that repeats a key is an error (``yaml.safe_load`` keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {shorten_text(key_node.value)!r}", key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)   # type: ignore[misc]


class Loader(_NoDuplicateKeys, yaml.SafeLoader):
    """``yaml.SafeLoader`` that reads ``1e-6`` as a float (YAML 1.2), rejects duplicate keys, and keeps
    each document within ``MAX_DEPTH``, ``MAX_VALUES`` and ``MAX_TEXT_CHARS`` (aliases expanded)."""

    yaml_implicit_resolvers = {key: list(value) for key, value in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0                                # nodes composed, each once (aliases not repeated)
        self._sizes: dict[int, tuple[int, int]] = {}   # id(node) -> (values, text characters), aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        start = self.peek_event().start_mark
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:            # its anchor is still being composed: a cycle
                raise _Budget(start, "an alias inside its own anchor", "aliases that do not contain themselves")
            return node
        if self._depth >= MAX_DEPTH:
            raise _Budget(start, f"lists and mappings nested more than {MAX_DEPTH} deep",
                          f"at most {MAX_DEPTH} levels of nesting")
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode):
            size = (1, len(node.value))
        else:   # an alias child counts as the whole of its anchor
            children = node.value if isinstance(node, yaml.SequenceNode) else [x for kv in node.value for x in kv]
            size = (1 + sum(self._sizes[id(c)][0] for c in children), sum(self._sizes[id(c)][1] for c in children))
        self._sizes[id(node)] = size
        self._nodes += 1
        if self._nodes > MAX_VALUES or size[0] > MAX_VALUES:
            what = (f"more than {MAX_VALUES:,} values" if self._nodes > MAX_VALUES else
                    f"aliases that expand to more than {MAX_VALUES:,} values")
        elif size[1] > MAX_TEXT_CHARS:
            what = f"aliases that expand to more than {size_text(MAX_TEXT_CHARS)} of text"
        else:
            return node
        raise _Budget(start, what, f"at most {MAX_VALUES:,} values and {size_text(MAX_TEXT_CHARS)} of text, "
                                   f"*aliases expanded")
        return node


Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


_PackagedLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):
    class _PackagedLoader(yaml.cyaml.CParser, _NoDuplicateKeys, yaml.constructor.SafeConstructor,  # type: ignore[no-redef]
                          yaml.resolver.Resolver):
        """``Loader``'s rules (its resolvers: ``1e-6`` a float; no duplicate keys) on libyaml's C parser, without
        the budget: for files shipped in the package (``read_packaged_yaml``)."""

        yaml_implicit_resolvers = Loader.yaml_implicit_resolvers

        def __init__(self, stream: str) -> None:
            yaml.cyaml.CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
