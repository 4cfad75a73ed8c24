"""Deploy gate: a release waits for approval bound to its scope and its diff, then deploys once.

The approval is bound to a scope (service, environment) and to evidence (the version and the
sha256 of the diff): a resume for another environment or for a diff other than the one on
record is refused as ``stale`` by the gateway. Whoever asked for the deployment may not approve
it (separation of duties). The deployment itself is an effect: it happens once, whatever the
number of times its step runs.

Application side: ``enqueue_run("deploy_gate", {"service": ..., "environment": ...,
"version": ..., "diff": ...}, started_by=<requester>)``.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import insert, select

from examples import records
from models.db import transaction, utcnow
from worker import NOT_APPLIED, Flow, StepContext, input_schema

INTERRUPT = "deploy_approval"
APPROVER_ROLE = "release-manager"
DEFAULT_APPROVAL_HOURS = 24.0


class DeployRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    service: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]{0,62}$")
    environment: Literal["staging", "production"]
    version: str = Field(min_length=1, max_length=64)
    diff: str = Field(min_length=1)
    approval_hours: float = Field(default=DEFAULT_APPROVAL_HOURS, gt=0)


@input_schema("deploy-approval.v1")
class DeployApproval(BaseModel):
    """A release manager's approval of one diff for one service in one environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    change_ticket: str = Field(min_length=1, max_length=64)
    comment: str = ""


flow = Flow("deploy_gate", version=1, input_model=DeployRequest)


def diff_hash(diff: str) -> str:
    return "sha256:" + hashlib.sha256(diff.encode()).hexdigest()


def approval_scope(request: DeployRequest) -> dict[str, str]:
    return {"service": request.service, "environment": request.environment}


def approval_evidence(request: DeployRequest) -> dict[str, str]:
    return {"version": request.version, "diff_hash": diff_hash(request.diff)}


# --- the deployer: an external system that honours idempotency keys ---------------------------


def deploy(
    service: str, environment: str, version: str, diff_sha: str, *, idempotency_key: str
) -> dict[str, Any]:
    """Roll ``version`` out; a second call with the same key returns the first deployment."""
    records.ensure_tables()
    with transaction() as session:
        found = _receipt(session, idempotency_key)
        if found is not None:
            return found
        session.execute(
            insert(records.deployments).values(
                id="dep-" + uuid.uuid4().hex[:10],
                idempotency_key=idempotency_key,
                service=service,
                environment=environment,
                version=version,
                diff_hash=diff_sha,
                deployed_at=utcnow(),
            )
        )
        receipt = _receipt(session, idempotency_key)
    assert receipt is not None
    return receipt


def _receipt(session: Any, key: str) -> dict[str, Any] | None:
    table = records.deployments
    row = session.execute(select(table).where(table.c.idempotency_key == key)).mappings().first()
    if row is None:
        return None
    return {"deployment_id": row["id"], "version": row["version"], "diff_hash": row["diff_hash"]}


def deployments_of(service: str, environment: str) -> list[dict[str, Any]]:
    """The deployer's log for one service in one environment."""
    records.ensure_tables()
    table = records.deployments
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(table)
            .where(table.c.service == service, table.c.environment == environment)
            .order_by(table.c.deployed_at)
        ).mappings()
        return [dict(r) for r in rows]


@flow.reconciler("deploy")
def find_deployment(key: str) -> Any:
    """After a crash between the call and its record: did the deployer see the key?"""
    with transaction(readonly=True) as session:
        found = _receipt(session, key)
    return NOT_APPLIED if found is None else found


# --- the flow ---------------------------------------------------------------------------------


@flow.step()
def approve(ctx: StepContext) -> str | None:
    """Wait for a release manager other than the requester to approve this exact diff."""
    request = DeployRequest.model_validate(ctx.input)
    ctx.state["diff_hash"] = diff_hash(request.diff)
    answer = ctx.interrupt(
        INTERRUPT,
        kind="approval",
        input=DeployApproval,
        authority=[APPROVER_ROLE],
        scope=approval_scope(request),
        evidence=approval_evidence(request),
        expires_in=request.approval_hours * 3600,
        on_expiry="cancel",
        separate_from_starter=True,
        reason=f"deploy {request.service} {request.version} to {request.environment}",
    )
    ctx.state["decided_by"] = answer.actor
    if not answer.approved or not isinstance(answer.input, DeployApproval):
        ctx.state["outcome"] = "rejected"
        return None
    ctx.state["change_ticket"] = answer.input.change_ticket
    return "roll_out"


@flow.step()
def roll_out(ctx: StepContext) -> None:
    """Deploy once: a re-executed step finds the recorded deployment instead of deploying."""
    request = DeployRequest.model_validate(ctx.input)
    receipt = ctx.effect(
        "deploy",
        deploy,
        request.service,
        request.environment,
        request.version,
        ctx.state["diff_hash"],
        # The deployer deduplicates on the key (a late stale call is absorbed): no token.
        pass_fencing_token=False,
    )
    ctx.state["deployment"] = receipt
    ctx.state["outcome"] = "deployed"
    return None
