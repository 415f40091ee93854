"""A tau2 database shared by every environment of a process, copied one record at a time.

tau2 builds each environment by re-reading and re-validating the domain's db.json (7 MB for
airline) and hashes it by dumping the whole database to JSON. Here the file is parsed once per
process (`Snapshot`), and each environment gets a `CowDB`: the same pydantic DB class whose
collections (`users`, `flights`, ...) are `CowDict`s over the shared records. A record is
deep-copied the first time a tool may change it; the shared records are never handed out for
writing, so environments in concurrent threads never see each other's changes.

Read tools (tau2's `ToolType.READ`, e.g. the flight search that scans every flight) see the shared
records without a copy; `CowReads` switches that on for the duration of one read tool call.

The hash equals tau2's `get_dict_hash(db.model_dump())` byte for byte: the JSON text of a record
that was never copied is cached once per process; only copied records are serialized again.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from typing import Any, Callable, Iterator

from pydantic import TypeAdapter
from tau2.environment.db import DB


class CowReads:
    """Whether the tool now running only reads the database (shared records need no copy)."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


class CowDict(dict):
    """A dict whose values start as the shared records and are copied on first access.

    Every way of reaching a value goes through `__getitem__` (overriding `__iter__` also makes
    `dict(d)` and `{**d}` use it); the underlying storage holds the shared record until then, which
    is what pydantic's serializer reads, and is correct because an unread record is unchanged.
    """

    __slots__ = ("_owned", "_reads")

    def __init__(self, shared: dict, reads: CowReads) -> None:
        super().__init__(shared)
        self._owned: set = set()
        self._reads = reads

    def __getitem__(self, key):
        value = dict.__getitem__(self, key)
        if self._reads.active or key in self._owned:
            return value
        value = copy.deepcopy(value)
        dict.__setitem__(self, key, value)
        self._owned.add(key)
        return value

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self, key, value)
        self._owned.add(key)

    def __delitem__(self, key) -> None:
        dict.__delitem__(self, key)
        self._owned.discard(key)

    def __iter__(self) -> Iterator:
        return dict.__iter__(self)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def values(self) -> list:
        return [self[key] for key in list(dict.keys(self))]

    def items(self) -> list:
        return [(key, self[key]) for key in list(dict.keys(self))]

    def pop(self, key, *default):
        if key not in self:
            return dict.pop(self, key, *default)
        value = self[key]
        del self[key]
        return value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def copy(self) -> dict:
        return {key: self[key] for key in list(dict.keys(self))}

    def popitem(self):
        raise NotImplementedError("CowDict.popitem")

    def clear(self) -> None:
        raise NotImplementedError("CowDict.clear")

    def __or__(self, other):
        return self.copy() | dict(other)

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce__(self):
        return (dict, (self.copy(),))

    def changed_keys(self) -> list:
        """Keys whose record may differ from the shared one (copied or assigned, still present)."""
        return [key for key in self._owned if dict.__contains__(self, key)]


def _json(value: Any) -> str:
    """tau2's serialization (`get_dict_hash`): sorted keys, `default=str`."""
    return json.dumps(value, sort_keys=True, default=str)


class _Collection:
    """One dict-valued field of the shared DB: its serializer and the cached JSON of each record."""

    def __init__(self, annotation: Any, shared: dict, dumped: dict) -> None:
        self.adapter = TypeAdapter(annotation)
        self.shared = shared
        self.entries = {key: _json({key: value})[1:-1] for key, value in dumped.items()}

    def text(self, cow: CowDict) -> str:
        """JSON text of the collection as `json.dumps(..., sort_keys=True)` writes it."""
        changed = cow.changed_keys()
        fresh = {}
        if changed:
            dumped = self.adapter.dump_python({key: dict.__getitem__(cow, key) for key in changed})
            fresh = {key: _json({key: value})[1:-1] for key, value in dumped.items()}
        return "{" + ", ".join(fresh.get(key) or self.entries[key] for key in sorted(cow)) + "}"


class Snapshot:
    """A domain database parsed once; every `CowDB` made from it shares its records read-only."""

    def __init__(self, db: DB) -> None:
        fields = type(db).model_fields
        dumped = db.model_dump()
        shared = {name: getattr(db, name) for name in fields}
        if not all(isinstance(value, dict) for value in shared.values()):
            raise TypeError(f"{type(db).__name__}: only dict-valued fields can be shared")
        self.db_class = type(db)
        self.collections = {
            name: _Collection(fields[name].annotation, shared[name], dumped[name]) for name in fields
        }

    @classmethod
    def load(cls, db_class: type[DB], path: str) -> "Snapshot":
        return cls(db_class.load(path))

    def new_db(self) -> tuple[DB, CowReads]:
        """A fresh database equal to the loaded one, and the switch its read tools use."""
        reads = CowReads()
        fields = {name: CowDict(c.shared, reads) for name, c in self.collections.items()}
        return self.db_class.model_construct(**fields), reads

    def owns(self, db: DB) -> bool:
        """Whether `db` is still a CowDB of this snapshot (tau2's update_db replaces it)."""
        return type(db) is self.db_class and all(
            isinstance(getattr(db, name), CowDict) for name in self.collections
        )

    def hash(self, db: DB) -> str:
        """tau2's hash of `db` (sha256 of its sorted-keys JSON), re-serializing only changed records."""
        body = ", ".join(
            f"{_json(name)}: {self.collections[name].text(getattr(db, name))}"
            for name in sorted(self.collections)
        )
        return hashlib.sha256(("{" + body + "}").encode()).hexdigest()


def cached(loader: Callable[[], Snapshot]) -> Callable[[], Snapshot]:
    """Build a snapshot once per process, on first use, safely from many threads."""
    lock = threading.Lock()
    box: list[Snapshot] = []

    def get() -> Snapshot:
        if not box:
            with lock:
                if not box:
                    box.append(loader())
        return box[0]

    return get
