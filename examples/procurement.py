"""Procurement: a purchase request waits for an engineering certificate, then is ordered once.

The story: a buyer submits a purchase request. The flow screens the supplier against a
sanctions list (an effect: it runs once, even though its step runs again after the wait),
then stops for evidence: an engineer's certificate (``certificate.v1``) that the items are
fit for purpose. An actor with the ``engineer`` role resumes it. If the buyer amended the
request while it waited, the certificate no longer matches what was certified: the resume is
answered ``renewed_review_required``, the engineer's input is kept on a new interrupt and the
review is asked for again. Once certified, the order is placed once (an effect).

Application side: ``submit_request(...)``, then ``enqueue_run("procurement", {"request_id": ...})``.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy import func, insert, select, update

from examples import records
from models.db import transaction, utcnow
from models.errors import InvalidInputError
from worker import NOT_APPLIED, Flow, RevalidationContext, StepContext, input_schema

INTERRUPT = "engineering_certificate"
ENGINEER_ROLE = "engineer"
ESCALATION_ROLE = "chief-engineer"
DEFAULT_REVIEW_HOURS = 72.0
# The screening service's list: suppliers we may not buy from.
SANCTIONED_SUPPLIERS = frozenset({"obsidian-holdings", "blackwater-trading"})
SUBMIT_FIRST = "submit it first with examples.procurement.submit_request(...)"


class Item(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sku: str = Field(min_length=1, max_length=64)
    description: str = ""
    quantity: int = Field(gt=0)
    unit_price: float = Field(ge=0)


class PurchaseRequest(BaseModel):
    """One revision of a purchase request, as the purchasing system holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    supplier: str
    items: list[Item]
    amount: float
    revision: int


class ProcurementInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(min_length=1, max_length=64)
    review_hours: float = Field(default=DEFAULT_REVIEW_HOURS, gt=0)

    @field_validator("request_id")
    @classmethod
    def _submitted(cls, request_id: str) -> str:
        # Asked at enqueue (the flow's input model): a run for a request the purchasing system
        # does not hold is refused then, in one line, rather than failing in its first step.
        if not request_exists(request_id):
            raise ValueError(f"no purchase request {request_id!r}: {SUBMIT_FIRST}")
        return request_id


@input_schema("certificate.v1")
class Certificate(BaseModel):
    """An engineer's certificate that the requested items are fit for their purpose."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    certificate_id: str = Field(
        min_length=1, max_length=200, description="the number on the signed certificate"
    )
    engineer: str = Field(min_length=1, max_length=200, description="who signed it")
    conclusion: Literal["fit_for_purpose", "not_fit_for_purpose"] = Field(
        description="whether the items as requested are fit for their purpose"
    )
    notes: str = ""


flow = Flow("procurement", version=1, input_model=ProcurementInput)


# --- the purchasing system (application side) -------------------------------------------


def _amount(items: list[Item]) -> float:
    return round(sum(i.quantity * i.unit_price for i in items), 2)


def _items(items: list[Item] | list[dict[str, Any]]) -> list[Item]:
    parsed = [i if isinstance(i, Item) else Item.model_validate(i) for i in items]
    if not parsed:
        raise InvalidInputError(detail="a purchase request needs at least one item")
    return parsed


def submit_request(
    request_id: str, supplier: str, items: list[Item] | list[dict[str, Any]]
) -> PurchaseRequest:
    """Record a new purchase request (revision 1)."""
    records.ensure_tables()
    parsed = _items(items)
    with transaction() as session:
        exists = session.execute(
            select(records.purchase_requests.c.id).where(
                records.purchase_requests.c.id == request_id
            )
        ).first()
        if exists is not None:
            raise InvalidInputError(detail=f"purchase request {request_id!r} already exists")
        session.execute(
            insert(records.purchase_requests).values(
                id=request_id,
                supplier=supplier,
                items=[i.model_dump() for i in parsed],
                amount=_amount(parsed),
                revision=1,
                updated_at=utcnow(),
            )
        )
    return PurchaseRequest(
        id=request_id, supplier=supplier, items=parsed, amount=_amount(parsed), revision=1
    )


def amend_request(request_id: str, items: list[Item] | list[dict[str, Any]]) -> PurchaseRequest:
    """Change a request's items: a new revision, which a certificate must cover again."""
    parsed = _items(items)
    table = records.purchase_requests
    with transaction() as session:
        changed = session.execute(
            update(table)
            .where(table.c.id == request_id)
            .values(
                items=[i.model_dump() for i in parsed],
                amount=_amount(parsed),
                revision=table.c.revision + 1,
                updated_at=utcnow(),
            )
        )
        if changed.rowcount != 1:  # type: ignore[attr-defined]
            raise InvalidInputError(detail=f"no purchase request {request_id!r}")
    return get_request(request_id)


def request_exists(request_id: str) -> bool:
    records.ensure_tables()
    table = records.purchase_requests
    with transaction(readonly=True) as session:
        found = session.execute(select(table.c.id).where(table.c.id == request_id)).first()
    return found is not None


def get_request(request_id: str) -> PurchaseRequest:
    records.ensure_tables()
    table = records.purchase_requests
    with transaction(readonly=True) as session:
        row = session.execute(select(table).where(table.c.id == request_id)).mappings().first()
    if row is None:
        # An input error: permanent, so the step fails at once instead of being retried.
        raise InvalidInputError(detail=f"no purchase request {request_id!r}: {SUBMIT_FIRST}")
    return PurchaseRequest.model_validate(
        {k: row[k] for k in ("id", "supplier", "items", "amount", "revision")}
    )


def supplier_checks(supplier: str) -> int:
    """How many times the screening service was asked about ``supplier``."""
    table = records.supplier_checks
    with transaction(readonly=True) as session:
        count = session.execute(
            select(func.count()).select_from(table).where(table.c.supplier == supplier)
        ).scalar_one()
    return int(count)


def orders_for(request_id: str) -> list[dict[str, Any]]:
    """The orders placed for a purchase request (the order desk's view)."""
    table = records.orders
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(table).where(table.c.request_id == request_id).order_by(table.c.placed_at)
        ).mappings()
        return [dict(r) for r in rows]


# --- the external services the flow calls, through ctx.effect -------------------------------


def screen_supplier(supplier: str, *, idempotency_key: str) -> dict[str, Any]:
    """The sanctions screening service: records every check it makes, once per key."""
    records.ensure_tables()
    table = records.supplier_checks
    with transaction() as session:
        found = _check_receipt(session, idempotency_key)
        if found is not None:
            return found
        result = "sanctioned" if supplier in SANCTIONED_SUPPLIERS else "clear"
        session.execute(
            insert(table).values(
                idempotency_key=idempotency_key,
                supplier=supplier,
                result=result,
                checked_at=utcnow(),
            )
        )
        receipt = _check_receipt(session, idempotency_key)
    assert receipt is not None
    return receipt


def _check_receipt(session: Any, key: str) -> dict[str, Any] | None:
    table = records.supplier_checks
    row = session.execute(select(table).where(table.c.idempotency_key == key)).mappings().first()
    if row is None:
        return None
    return {
        "check_id": row["id"],
        "supplier": row["supplier"],
        "result": row["result"],
        "clear": row["result"] == "clear",
    }


def place_order(
    request_id: str, supplier: str, amount: float, certificate_id: str, *, idempotency_key: str
) -> dict[str, Any]:
    """The order desk: one order per idempotency key, whatever the number of calls."""
    with transaction() as session:
        found = _order_receipt(session, idempotency_key)
        if found is not None:
            return found
        session.execute(
            insert(records.orders).values(
                id="PO-" + uuid.uuid4().hex[:10].upper(),
                idempotency_key=idempotency_key,
                request_id=request_id,
                supplier=supplier,
                amount=amount,
                certificate_id=certificate_id,
                placed_at=utcnow(),
            )
        )
        receipt = _order_receipt(session, idempotency_key)
    assert receipt is not None
    return receipt


def _order_receipt(session: Any, key: str) -> dict[str, Any] | None:
    table = records.orders
    row = session.execute(select(table).where(table.c.idempotency_key == key)).mappings().first()
    if row is None:
        return None
    return {"order_id": row["id"], "amount": row["amount"], "supplier": row["supplier"]}


@flow.reconciler("supplier_check")
def find_supplier_check(key: str) -> Any:
    """After a crash between the call and its record: did the screening service see the key?"""
    with transaction(readonly=True) as session:
        found = _check_receipt(session, key)
    return NOT_APPLIED if found is None else found


@flow.reconciler("place_order")
def find_order(key: str) -> Any:
    with transaction(readonly=True) as session:
        found = _order_receipt(session, key)
    return NOT_APPLIED if found is None else found


# --- the flow ---------------------------------------------------------------------------------


def certificate_evidence(request: PurchaseRequest) -> dict[str, Any]:
    """What the engineer certifies: exactly this revision of the request."""
    return {
        "request_id": request.id,
        "revision": request.revision,
        "supplier": request.supplier,
        "items": [i.model_dump() for i in request.items],
        "amount": request.amount,
    }


@flow.step()
def certify(ctx: StepContext) -> str | None:
    """Screen the supplier, then wait for an engineer's certificate of this request."""
    request = get_request(ctx.input["request_id"])
    # Runs once: when this step runs again after the wait, the recorded check is reused.
    # The screening service and the order desk deduplicate on the key: a late call from a
    # worker that lost its lease is absorbed there, so they take no fencing token.
    check = ctx.effect(
        "supplier_check", screen_supplier, request.supplier, pass_fencing_token=False
    )
    ctx.state["supplier_check"] = check
    if not check["clear"]:
        ctx.state["outcome"] = "supplier_blocked"
        return None
    answer = ctx.interrupt(
        INTERRUPT,
        kind="evidence",
        input=Certificate,
        authority=[ENGINEER_ROLE],
        scope={"request_id": request.id},
        evidence=certificate_evidence(request),
        expires_in=float(ctx.input.get("review_hours", DEFAULT_REVIEW_HOURS)) * 3600,
        on_expiry="escalate",
        escalate_to=[ESCALATION_ROLE],
        reason=f"purchase request {request.id} needs an engineering certificate",
    )
    ctx.state["request"] = request.model_dump()
    ctx.state["certified_by"] = answer.actor
    certificate = answer.input
    if not answer.approved or not isinstance(certificate, Certificate):
        ctx.state["outcome"] = "rejected"
        return None
    ctx.state["certificate"] = certificate.model_dump()
    if certificate.conclusion != "fit_for_purpose":
        ctx.state["outcome"] = "not_certified"
        return None
    return "order"


@flow.revalidate(INTERRUPT)
def current_evidence(context: RevalidationContext) -> dict[str, Any]:
    """At resume time: the request as it is now. A change means the review must be renewed."""
    return certificate_evidence(get_request(context.input["request_id"]))


@flow.step()
def order(ctx: StepContext) -> None:
    """Place the order for the certified revision, once."""
    request = PurchaseRequest.model_validate(ctx.state["request"])
    receipt = ctx.effect(
        "place_order",
        place_order,
        request.id,
        request.supplier,
        request.amount,
        ctx.state["certificate"]["certificate_id"],
        pass_fencing_token=False,
    )
    ctx.state["order"] = receipt
    ctx.state["outcome"] = "ordered"
    return None
