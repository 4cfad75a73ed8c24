"""Canonical JSON: one text for equal values, so that hashes of them compare equal.

Each form belongs to the hashes computed over it, and a form never changes once such hashes are
stored; a new form gets a new tag, and what was stored under the old one stays comparable.

* RFC 8785 (JCS), tag ``rfc8785``: the evidence hash a responder computes in any language
  (``evidence_hash``; an interrupt records its tag in ``evidence_canon``).
* Python's sorted, compact ``json.dumps`` (``legacy_json``): evidence hashed before RFC 8785
  (``evidence_canon`` NULL), and fingerprints of JSON values only interlude compares: a resume
  attempt's payload (``json_hash``), an answer's scope against its interrupt's (``same_json``).
* The request form, tag ``v2:`` (``request_hash``): any Python value an effect is called with,
  as text that equal values share in another process and after a trip through either
  database's JSON; compared when an idempotency key is used again.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import json
import uuid
from decimal import Decimal
from typing import Any

import rfc8785
from pydantic import BaseModel

# How evidence hashes are computed now; interrupts recorded before carry NULL (legacy_json).
EVIDENCE_CANON = "rfc8785"
# The form of the request hashes that a key used again is compared with. Rows recorded by
# earlier versions hold "sha256:..." over a serialisation that was not stable (a float that
# PostgreSQL gave back as an integer, a set, an object's address): they are not compared.
REQUEST_HASH = "v2:sha256:"

# What RFC 8785 cannot hold (NaN, integers beyond 2**53, keys that are not text).
NotCanonicalError = rfc8785.CanonicalizationError

# The request form names a value's type by its module, and interlude's own modules moved when
# worker/ was laid out in subpackages (issue 39): a type is named by the module it had then,
# so that the request hash of an intent recorded before still compares equal. The modules split
# out of worker.gateway.checks and worker.engine.runtime later name theirs as it did.
FORMER_MODULES = {
    "worker.cli.actor_commands": "worker.cli.actors",
    "worker.cli.bulk_commands": "worker.cli.bulk",
    "worker.cli.demo": "worker.demo",
    "worker.cli.demo_agent": "worker.demo_agent",
    "worker.cli.event_commands": "worker.cli.events",
    "worker.cli.flow_commands": "worker.cli.flows",
    "worker.cli.history_commands": "worker.cli.history",
    "worker.cli.interrupt_commands": "worker.cli.interrupts",
    "worker.cli.link_commands": "worker.cli.links",
    "worker.cli.ops_commands": "worker.cli.ops",
    "worker.cli.run_actions": "worker.cli.operate",
    "worker.cli.run_commands": "worker.cli.runs",
    "worker.engine.answer_binding": "worker.binding",
    "worker.engine.child_lost": "worker.child_lost",
    "worker.engine.claiming": "worker.runtime",
    "worker.engine.commits": "worker.runtime",
    "worker.engine.context": "worker.context",
    "worker.engine.dispatch": "worker.dispatch",
    "worker.engine.effects": "worker.effects",
    "worker.engine.fencing": "worker.fencing",
    "worker.engine.heap": "worker.heap",
    "worker.engine.lease": "worker.lease",
    "worker.engine.readiness": "worker.readiness",
    "worker.engine.reaper": "worker.reaper",
    "worker.engine.reconcile": "worker.reconcile",
    "worker.engine.redis_transport": "worker.redis_transport",
    "worker.engine.release": "worker.release",
    "worker.engine.runtime": "worker.runtime",
    "worker.engine.sweeps": "worker.sweeps",
    "worker.engine.tasknames": "worker.tasknames",
    "worker.engine.tasks": "worker.tasks",
    "worker.engine.tracebacks": "worker.tracebacks",
    "worker.flows.declarations": "worker.declarations",
    "worker.flows.eventdefs": "worker.eventdefs",
    "worker.flows.flow": "worker.flows",
    "worker.flows.migration": "worker.migration",
    "worker.flows.origins": "worker.origins",
    "worker.flows.policies": "worker.policies",
    "worker.flows.schemas": "worker.schemas",
    "worker.flows.toolcalls": "worker.toolcalls",
    "worker.flows.versions": "worker.versions",
    "worker.gateway.acceptance": "worker.gateway",
    "worker.gateway.actors": "worker.actors",
    "worker.gateway.answer_links": "worker.links",
    "worker.gateway.attempt_records": "worker.gateway",
    "worker.gateway.authority": "worker.authority",
    "worker.gateway.bulk_review": "worker.bulk",
    "worker.gateway.checks": "worker.gateway",
    "worker.gateway.events": "worker.events",
    "worker.gateway.parsing": "worker.gateway",
    "worker.gateway.review_checks": "worker.review_checks",
    "worker.gateway.submit": "worker.gateway",
    "worker.ops.beat_scheduler": "worker.beat",
    "worker.ops.contacts": "worker.contacts",
    "worker.ops.flower_guard": "worker.flower_guard",
    "worker.ops.notifications": "worker.notifications",
    "worker.ops.notify_email": "worker.notify_email",
    "worker.ops.notify_slack": "worker.notify_slack",
    "worker.ops.processes": "worker.processes",
    "worker.ops.retention": "worker.retention",
    "worker.ops.runlog": "worker.runlog",
    "worker.ops.stats": "worker.stats",
    "worker.ops.step_history": "worker.step_history",
    "worker.ops.step_metrics": "worker.step_metrics",
    "worker.ops.tracing": "worker.tracing",
    "worker.ops.waiting": "worker.waiting",
    "worker.present.ids": "worker.ids",
    "worker.present.jsontext": "worker.jsontext",
    "worker.present.safetext": "worker.safetext",
    "worker.present.timeline": "worker.cli.timeline",
    "worker.web.asgi": "worker.web.app",
}


def canonical_json(value: Any) -> str:
    """RFC 8785 canonical JSON (JCS): what any language computes the evidence hash over.

    Raises NotCanonicalError for what I-JSON cannot hold (NaN, integers beyond 2**53, keys
    that are not text).
    """
    return rfc8785.dumps(value).decode("utf-8")


def legacy_json(value: Any) -> str:
    """The serialisation hashes were computed over before RFC 8785 (Python's json.dumps)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def evidence_hash(evidence: Any, canon: str | None = EVIDENCE_CANON) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``evidence``.

    ``canon`` is how the interrupt's hash was computed: RFC 8785, or None for an interrupt
    recorded before (Python's json.dumps), so that what a responder was shown stays valid.
    """
    text = canonical_json(evidence) if canon == EVIDENCE_CANON else legacy_json(evidence)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def json_hash(value: Any) -> str:
    """``sha256:<hex>`` of ``value`` as sorted, compact JSON: a fingerprint that never raises
    for JSON values (a resume attempt's payload, a scope where the step acts); not an interop
    format."""
    return "sha256:" + hashlib.sha256(legacy_json(value).encode()).hexdigest()


def same_json(one: Any, other: Any) -> bool:
    """Whether two JSON values are the same as JSON (``1`` is not ``true`` nor ``1.0``, key
    order does not count). Never raises: what is not JSON compares by its text."""
    return _sorted_text(one) == _sorted_text(other)


def _sorted_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def request_hash(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """What the call is made with, as a fingerprint that the same arguments always give: in
    another process, and after a trip through either database's JSON (dict key order, 5
    and 5.0, 1e20 and 10**20, a tuple and a list, a set in any order). Values that are not
    JSON count by their value where it has a stable form (datetime, Decimal, UUID, enums,
    pydantic models, dataclasses, bytes), else by their type alone. Never raises."""
    try:
        text = _request_text([list(args), kwargs], set())
    except RecursionError:
        text = "<too deep>"
    return REQUEST_HASH + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _type_name(kind: type) -> str:
    module = kind.__module__
    return f"{FORMER_MODULES.get(module, module)}.{kind.__qualname__}"


def _request_text(value: Any, within: set[int]) -> str:
    """``value`` as text, the same for equal values (see ``request_hash``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value)  # (ASCII: everything else escaped, lone surrogates too)
    if isinstance(value, int | float | Decimal):
        return _number(value)
    if isinstance(value, list | tuple | dict | set | frozenset):
        if id(value) in within:
            return "<cycle>"
        within.add(id(value))
        try:
            if isinstance(value, dict):
                items = sorted((_key(k), _request_text(v, within)) for k, v in value.items())
                return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in items) + "}"
            parts = [_request_text(item, within) for item in value]
            if isinstance(value, set | frozenset):
                parts.sort()
            return "[" + ",".join(parts) + "]"
        finally:
            within.discard(id(value))
    kind = f"<{_type_name(type(value))}>"
    return kind + _value_of(value, within)


def _number(value: int | float | Decimal) -> str:
    """A number by its value alone: ``5``, ``5.0`` and ``Decimal("5.00")`` alike."""
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return json.dumps(float(value))
        exact = Decimal(float.__repr__(value))  # the digits JSON writes, as the databases read
    elif isinstance(value, Decimal):
        if not value.is_finite():
            return "NaN" if value.is_nan() else ("-Infinity" if value < 0 else "Infinity")
        exact = value
    else:
        exact = Decimal(int(value))
    sign, digits, exponent = exact.as_tuple()
    assert isinstance(exponent, int)
    count = len(digits)
    while count > 1 and digits[count - 1] == 0:
        count -= 1
        exponent += 1
    if count == 1 and digits[0] == 0:
        return "0"
    return ("-" if sign else "") + "".join(map(str, digits[:count])) + f"e{exponent}"


def _key(key: Any) -> str:
    """A dict key as JSON writes it (and reads it back): ``1`` and ``"1"`` alike."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, int):
        return int.__repr__(int(key))
    if isinstance(key, float):
        return json.dumps(float(key))
    return f"<{_type_name(type(key))}>"


def _value_of(value: Any, within: set[int]) -> str:
    """The stable form of a value that is not JSON, or "" when it has none."""
    try:
        if isinstance(value, datetime.date | datetime.time):
            return json.dumps(value.isoformat())
        if isinstance(value, uuid.UUID):
            return json.dumps(str(value))
        if isinstance(value, bytes | bytearray | memoryview):
            return json.dumps(bytes(value).hex())
        if isinstance(value, enum.Enum):
            return _request_text(value.value, within)
        if isinstance(value, BaseModel):
            return _request_text(value.model_dump(), within)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return _request_text(fields, within)
    except RecursionError:
        raise
    except Exception:
        # A value that cannot say what it is counts by its type.
        return ""
    # Anything else (a client, a connection): its repr may name its address in this process.
    return ""
