"""The gateway's checks for what a tool-call review and a policy version add.

An edited call is authorized for what it became (check 6, once the input is read), by the
tool's authority in the flow's code; without that code here, an edit is refused rather than
authorized by the roles of the call as proposed. An answer is given under the policy version
its interrupt records: one the flow no longer honours gets a renewed review (check 8).
"""

from __future__ import annotations

from typing import Any

from models.tables import Interrupt
from worker.flows.flow import Flow
from worker.flows.policies import Policy
from worker.flows.toolcalls import arguments_hash, is_review


def edit_refusal(
    interrupt: Interrupt, submitted: dict[str, Any], roles: set[str], flow: Flow | None
) -> str | None:
    """Why this actor may not approve the call as edited (None: no edit, or allowed)."""
    if not is_review(interrupt.schema_name, interrupt.schema_version):
        return None
    edited = submitted.get("args")
    evidence = interrupt.evidence if isinstance(interrupt.evidence, dict) else {}
    if edited is None or arguments_hash(edited) == arguments_hash(evidence.get("args")):
        return None
    name = evidence.get("tool")
    tool = flow.tools.get(name) if flow is not None and isinstance(name, str) else None
    if tool is None:
        return (
            f"an edited call of {name!r} is authorized by its flow's policy, whose code is not "
            "loaded here (INTERLUDE_FLOWS); approve or reject it as proposed, or answer where "
            "the flow is loaded"
        )
    try:
        needed = tool.roles_for(tool.args.model_validate(edited))
    except Exception as exc:
        # Fail closed: a policy that cannot say who may approve it approves nobody.
        return f"the policy of tool {name!r} failed on the edited call: {type(exc).__name__}"
    if not roles & set(needed):
        return f"the call as edited needs one of the roles {sorted(needed)}"
    return None


def policy_renewal(flow: Flow, interrupt: Interrupt) -> Policy | None:
    """The policy to ask again under, when the flow no longer honours the interrupt's."""
    policy = flow.policy_for(interrupt.name)
    return None if policy.honours(interrupt.policy_version) else policy
