"""Binding at the act: an answer applies only to what the responder was shown.

The gateway binds a resume to the evidence, scope and policy version on record. When the
resumed step executes again and asks again, it declares them afresh — a model may propose
something else, a record may have changed. Here the two are compared: the same (evidence
hashed as at the ask, RFC 8785) and the answer applies; anything else and it does not, and
the run gets a renewed review instead. No statement is spent: what the answer was bound to
comes with the claim that loaded it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.canonical import EVIDENCE_CANON, evidence_hash, json_hash
from models.contracts import InterruptDecl
from worker.flows.policies import Policy


@dataclass(frozen=True)
class ResolvedInterrupt:
    """An answer given at the step's checkpoint, and what it was bound to."""

    id: str
    name: str
    schema_name: str
    schema_version: int
    decision: str
    resume_input: dict[str, Any] | None
    resolved_by: str
    evidence_hash: str = ""
    evidence_canon: str | None = EVIDENCE_CANON
    scope: Any = None
    policy_version: str | None = None
    # Carried from an older flow version when the run migrated (``worker.flows.migration``).
    carried: bool = False


@dataclass(frozen=True)
class Mismatch:
    """Why an answer does not apply to what the step asks now."""

    answered_hash: str
    evidence_hash: str
    scope_changed: bool
    answered_policy: str | None
    policy: str | None

    def detail(self, answer_id: str) -> dict[str, Any]:
        found: dict[str, Any] = {
            "answer": answer_id,
            "answered_hash": self.answered_hash,
            "evidence_hash": self.evidence_hash,
        }
        if self.scope_changed:
            found["scope_changed"] = True
        if self.answered_policy != self.policy:
            found["answered_policy"] = self.answered_policy
            found["policy"] = self.policy
        return found


def mismatch(found: ResolvedInterrupt, decl: InterruptDecl, policy: Policy) -> Mismatch | None:
    """None when ``found`` answers what ``decl`` asks now (evidence, scope, a policy version
    still honoured); else what differs."""
    if found.evidence_canon == decl.evidence_canon:
        asked = decl.evidence_hash
    else:
        # An answer recorded before hashes followed RFC 8785: compared as it was computed.
        asked = evidence_hash(decl.evidence, found.evidence_canon)
    same_evidence = asked == found.evidence_hash
    same_scope = found.scope == decl.scope or json_hash(found.scope) == json_hash(decl.scope)
    honoured = policy.honours(found.policy_version)
    if same_evidence and same_scope and honoured:
        return None
    return Mismatch(
        answered_hash=found.evidence_hash,
        evidence_hash=decl.evidence_hash,
        scope_changed=not same_scope,
        answered_policy=found.policy_version,
        policy=decl.policy_version,
    )
