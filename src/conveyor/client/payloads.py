"""``JobData``: a job's arguments, result and messages on their way to and from the store —
sealed with the app's ``Keys``, kept in a blob store past a threshold (``Offload``), opened
again in the worker and wherever a result is read (docs/job-data.md).

The client seals at enqueue (``encode_payload``, ``wrap``), the worker opens the payload
(``open_payload``) and seals the result and the job's own text (``encode_result``,
``seal_text``), ``JobRef.result`` opens the result (``result_value``) and readers open or
mask a whole record (``conveyor.client.reveal``). Stores see only the stored forms
(``conveyor.core.envelope``). An app with neither keys nor offload takes none of these paths:
its payloads are what they always were.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.blobs import open_blob_store
from conveyor.core.encryption import Keys
from conveyor.core.envelope import (
    INJECTED,
    RESULT_TAG,
    TEXT_TOKEN,
    aad,
    b64,
    is_envelope,
    literal,
    parse_result,
    unb64,
)
from conveyor.core.serializer import decode_payload, dumps, encode_payload, oversize
from conveyor.errors import BlobMissing, ConveyorError, PayloadError, UnsealError
from conveyor.storage import default_blobs, redact
from conveyor.storage.blobs import BlobStore

__all__ = ["JobData", "Offload", "result_value"]

KiB = 1024


@dataclass(frozen=True, slots=True)
class Offload:
    """Arguments and results over ``threshold`` bytes go to a blob store, behind a
    reference in the job (docs/job-data.md, "Payloads by reference").

    ``store``: a blob store URL (``file:///dir``, ``s3://bucket/prefix?endpoint=…``, a
    PostgreSQL store's URL: its ``blobs`` table) or a ``BlobStore``; None: beside a SQLite
    file, in the PostgreSQL store itself (other stores need one named). ``limit``: the
    largest data a reference may stand for. ``grace``: seconds a blob no job references is
    kept before the janitor deletes it (an enqueue in flight has not stored its job yet).
    """

    store: str | BlobStore | None = None
    threshold: int = 64 * KiB
    limit: int = 256 * KiB * KiB
    grace: float = 3600.0


class JobData:
    """What an app does to job data: ``keys`` (``conveyor.Keys``) seal it, ``offload``
    keeps large data by reference. ``blob_url`` gives the blob store URL when the offload
    names none (the app's storage URL decides: ``storage.default_blobs``)."""

    def __init__(self, keys: Keys | None = None, offload: Offload | None = None,
                 open_store: Callable[[], BlobStore] | None = None) -> None:
        self.keys = keys
        self.offload = offload
        self._open_store = open_store
        self._store: BlobStore | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<JobData keys={self.keys!r} offload={self.offload!r}>"

    @property
    def active(self) -> bool:
        """True when anything is sealed or offloaded (else every path is the plain one)."""
        return self.keys is not None or self.offload is not None

    def seals(self, name: str) -> bool:
        """True when the data of job ``name`` is sealed."""
        return self.keys is not None and self.keys.seals(name)

    def blobs(self) -> BlobStore:
        """The blob store, opened on first use (and again after a fork)."""
        store = self._store
        if store is not None and self._pid == os.getpid():
            return store
        with self._lock:
            if self._store is None or self._pid != os.getpid():
                if self._open_store is None:
                    raise ConveyorError("this app keeps no data by reference (no offload=)")
                self._store, self._pid = self._open_store(), os.getpid()
            return self._store

    def close(self) -> None:
        """Let go of the blob store (opened again on next use)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None and self._pid == os.getpid():
            store.close()

    def encoding_limit(self, max_payload: int) -> int:
        """The most bytes arguments may encode to before they are sealed or kept by
        reference (the limit of what is stored inline applies afterwards)."""
        return max(self.offload.limit, max_payload) if self.offload is not None else max_payload

    # -- payloads ------------------------------------------------------------------------------

    def encode_payload(self, job_id: str, name: str, args: Sequence[Any],
                       kwargs: Mapping[str, Any], meta: Mapping[str, Any] | None,
                       max_payload: int, *, movable: bool = False) -> str:
        """The stored payload of one job (``serializer.encode_payload`` when nothing
        applies). ``movable``: the store may move it to another job of the same name
        (debounce, throttle): sealed to the name, never offloaded."""
        if not self.seals(name) and (self.offload is None or movable):
            return encode_payload(args, kwargs, meta, max_payload)
        limit = max_payload if movable else self.encoding_limit(max_payload)
        body = encode_payload(args, kwargs, None, limit)
        return self.wrap(job_id, name, body, meta, max_payload, movable=movable)

    def wrap(self, job_id: str, name: str, body: str, meta: Mapping[str, Any] | None,
             max_payload: int, *, movable: bool = False) -> str:
        """The stored payload of ``body`` (``{"a": …, "k": …}`` text): sealed, and kept by
        reference when over the threshold. ``PayloadError`` when what stays inline is over
        ``max_payload``."""
        data = body.encode("utf-8", "surrogatepass")
        sealed = self.seals(name)
        offload = self.offload if not movable else None
        if not sealed and (offload is None or len(data) <= offload.threshold):
            if meta:
                body = f'{body[:-1]},"m":{dumps(dict(meta))}}}'
            self._check(body, max_payload)
            return body
        env: dict[str, Any] = {}
        if sealed:
            assert self.keys is not None
            bound = name if movable else f"{name}\0{job_id}"
            env["e"], data = self.keys.seal(data, aad("payload", bound))
            env["b"] = "n" if movable else "i"
        self._place(env, data, job_id, "p", offload)
        stored: dict[str, Any] = {"a": [], "k": {}, "x": env}
        if meta:
            stored["m"] = dict(meta)
        text = dumps(stored)
        self._check(text, max_payload)
        return text

    def open_payload(self, job_id: str, name: str,
                     text: str) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
        """``(args, kwargs, meta)`` of a stored payload: unsealed, fetched, injected results
        opened. ``UnsealError`` (a key not held or that does not open it), ``BlobMissing``,
        ``BlobUnavailable`` or ``PayloadError`` otherwise."""
        if '"x":' not in text and f'"{INJECTED}":' not in text:
            return decode_payload(text)
        args, kwargs, meta = decode_payload(text)
        stored = json.loads(text)
        env = stored.get("x")
        if isinstance(env, dict):
            bound = name if env.get("b") == "n" else f"{name}\0{job_id}"
            inner, more, _ = decode_payload(self._bytes(env, "payload", bound).decode())
            args, kwargs = [*args, *inner], {**more, **kwargs}
        mode = stored.get(INJECTED)
        if mode and args:
            if mode == "one":
                args[0] = self.stored_value(args[0])
            elif isinstance(args[0], list):
                args[0] = [self.stored_value(v) for v in args[0]]
        return args, kwargs, meta

    # -- results -------------------------------------------------------------------------------

    def encode_result(self, job_id: str, name: str, value: Any) -> str:
        """The stored result of one run; ``PayloadError`` for a value that is not JSON or,
        by reference, over the offload's limit (the worker holds what stays inline to
        ``max_payload``)."""
        return self.encode_value(dumps(literal(value)), job_id, ("result", job_id),
                                 seal=self.seals(name), offload=True, head={"j": job_id})

    def encode_value(self, text: str, job_id: str, bound: tuple[str, ...], *, seal: bool,
                     offload: bool, head: Mapping[str, Any] | None = None) -> str:
        """``text`` (a value's JSON, ``literal`` already) as stored: as it is, or else a
        ``{"$conveyor": ENV}`` envelope — sealed when ``seal`` (bound to ``bound``: the
        kind of value and whose it is), and when ``offload`` kept by reference (a blob of
        ``job_id``'s) past the offload's threshold. ``head``: the envelope's clear fields."""
        place = self.offload if offload else None
        if not seal and (place is None or not oversize(text, place.threshold)):
            return text
        data = text.encode("utf-8", "surrogatepass")
        env: dict[str, Any] = {}
        if seal:
            assert self.keys is not None
            env["e"], data = self.keys.seal(data, aad(*bound))
        env.update(head or {})
        self._place(env, data, job_id, _BLOB_KINDS.get(bound[0], ""), place)
        return dumps({RESULT_TAG: env})

    def open_value(self, text: str, bound: tuple[str, ...]) -> Any:
        """The value of ``encode_value``'s text: opened (``bound`` as sealed) and fetched.
        ``UnsealError``, ``BlobMissing`` or ``BlobUnavailable`` when it cannot be read."""
        value, env = parse_result(text)
        if env is None:
            return value
        return json.loads(self._bytes(env, bound[0], "\0".join(bound[1:])).decode())

    def result_value(self, job_id: str, text: str) -> Any:
        """The value of a job's stored result (its own: bound to ``job_id``)."""
        value, env = parse_result(text)
        if env is None:
            return value
        if env.get("j") not in (None, job_id):
            raise UnsealError(f"the result stored with job {job_id} belongs to job "
                              f"{env.get('j')}")
        return json.loads(self._bytes(env, "result", str(env.get("j", job_id))).decode())

    def stored_value(self, value: Any) -> Any:
        """A parsed stored result value (a parent's, injected into a node's arguments)
        opened: envelopes unsealed and fetched, anything else as it is."""
        if not is_envelope(value):
            return value
        env = value[RESULT_TAG]
        if "v" in env:
            return env["v"]
        return json.loads(self._bytes(env, "result", str(env.get("j", ""))).decode())

    # -- text ----------------------------------------------------------------------------------

    def seal_text(self, job_id: str, name: str, text: str | None) -> str | None:
        """A message, error or log line of job ``name`` sealed when its data is."""
        if text is None or not self.seals(name):
            return text
        assert self.keys is not None
        key_id, data = self.keys.seal(text.encode("utf-8", "surrogatepass"),
                                      aad("text", job_id))
        return f"$enc${key_id}${job_id}${b64(data)}$"

    def open_text(self, text: str | None, shown: Callable[[str], str] | None = None
                  ) -> str | None:
        """``text`` with each sealed part opened; a part no key here opens becomes
        ``shown(key id)`` (default: ``encrypted``)."""
        if text is None or "$enc$" not in text:
            return text

        def one(found: Any) -> str:
            key_id, job_id, data = found.group(1), found.group(2), found.group(3)
            if self.keys is None:
                return shown(key_id) if shown else "encrypted"
            try:
                return self.keys.open(key_id, unb64(data), aad("text", job_id)).decode(
                    "utf-8", "surrogatepass")
            except (UnsealError, ValueError):
                return shown(key_id) if shown else "encrypted"

        return TEXT_TOKEN.sub(one, text)

    # -- sealing again with the newest key (conveyor jobs reencrypt) ---------------------------

    def reseal_env(self, env: dict[str, Any], kind: str, bound: str,
                   job_id: str) -> dict[str, Any] | None:
        """``env`` sealed again with the current key (a blob by reference written anew),
        or None when it is not sealed or is sealed with the current key already."""
        key_id = env.get("e")
        if key_id is None or self.keys is None or key_id == self.keys.current:
            return None
        data = self._bytes(env, kind, bound)
        fresh = {k: v for k, v in env.items() if k not in ("d", "r", "z", "h")}
        fresh["e"], sealed = self.keys.seal(data, aad(kind, bound))
        offload = self.offload if "r" in env else None
        self._place(fresh, sealed, job_id, "p" if kind == "payload" else "r", offload)
        return fresh

    def reseal_text(self, text: str | None) -> str | None:
        """``text`` with each part sealed with an older key sealed again with the current."""
        if text is None or "$enc$" not in text or self.keys is None:
            return text
        keys = self.keys

        def one(found: Any) -> str:
            key_id, job_id = found.group(1), found.group(2)
            if key_id == keys.current:
                return str(found.group(0))
            plain = keys.open(key_id, unb64(found.group(3)), aad("text", job_id))
            new_id, data = keys.seal(plain, aad("text", job_id))
            return f"$enc${new_id}${job_id}${b64(data)}$"

        return TEXT_TOKEN.sub(one, text)

    # -- the bytes behind an envelope ----------------------------------------------------------

    def _place(self, env: dict[str, Any], data: bytes, job_id: str, kind: str,
               offload: Offload | None) -> None:
        if offload is not None and len(data) > offload.threshold:
            if len(data) > offload.limit:
                raise PayloadError(f"{_PLACED[kind]} of "
                                   f"{len(data):,} bytes, over the offload limit of "
                                   f"{offload.limit:,} bytes")
            key = f"{job_id}.{kind}.{secrets.token_hex(6)}"
            self.blobs().put(key, data)
            env.update(r=key, z=len(data), h=hashlib.sha256(data).hexdigest()[:32])
        else:
            env["d"] = b64(data)

    def _bytes(self, env: Mapping[str, Any], kind: str, bound: str) -> bytes:
        if "r" in env:
            key = str(env["r"])
            found = self.blobs().get(key)
            if found is None:
                raise BlobMissing(f"its {_KINDS.get(kind, kind)} blob {key} is missing from "
                                  f"{self.blobs().where}")
            if hashlib.sha256(found).hexdigest()[:32] != env.get("h"):
                raise BlobMissing(f"its {_KINDS.get(kind, kind)} blob {key} in "
                                  f"{self.blobs().where} is damaged (its digest differs)")
            data = found
        else:
            data = unb64(str(env.get("d", "")))
        key_id = env.get("e")
        if key_id is None:
            return data
        if self.keys is None:
            raise UnsealError(f"sealed with key {key_id!r}, and this process holds no keys "
                              "(Conveyor(encrypt=Keys(...)))")
        return self.keys.open(str(key_id), data, aad(kind, bound))

    @staticmethod
    def _check(text: str, max_payload: int) -> None:
        size = oversize(text, max_payload)
        if size:
            raise PayloadError(f"payload is {size} bytes, over the limit of {max_payload} "
                               "bytes; store large data elsewhere and pass a reference "
                               "(or Conveyor(offload=Offload()))")


_KINDS = {"payload": "arguments'", "result": "result's", "step": "step result's"}
#: The letter of a blob's key (``<job id>.<letter>.<hex>``: worker.blob_sweep) by the kind
#: of value it holds, and what a refusal calls it.
_BLOB_KINDS = {"payload": "p", "result": "r", "step": "s"}
_PLACED = {"p": "arguments", "r": "result", "s": "step result"}


def result_value(text: str, data: JobData | None, job_id: str) -> Any:
    """A stored result's value: ``data`` opens what is sealed or by reference; without it
    only plain and escaped values read (``UnsealError`` otherwise)."""
    value, env = parse_result(text)
    if env is None:
        return value
    return (data or _PLAIN).result_value(job_id, text)


_PLAIN = JobData()


def app_data(keys: Keys | None, offload: Offload | None, url: Callable[[], str],
             max_payload: int) -> JobData:
    """An app's ``JobData``: its blob store named by the offload, or else the one its
    storage URL (``url()``, read when first needed) keeps (``storage.default_blobs``).
    Refuses at once an offload that could not work, rather than at the first large
    enqueue."""
    if offload is None:
        return JobData(keys)
    if not 0 < offload.threshold <= max_payload:
        raise ValueError(f"Offload threshold must be between 1 and max_payload "
                         f"({max_payload:,} bytes), not {offload.threshold!r}")
    if offload.limit < offload.threshold:
        raise ValueError("Offload limit must be at least its threshold")
    store = offload.store
    if store is None and default_blobs(url()) is None:
        raise ConveyorError(f"{redact(url()).partition('://')[0]}:// keeps no blobs itself: "
                            "give Offload(store='file:///dir') or an s3:// URL")

    def open_store() -> BlobStore:
        if store is None or isinstance(store, str):
            return open_blob_store(store or default_blobs(url()) or "")
        return store

    return JobData(keys, offload, open_store)
