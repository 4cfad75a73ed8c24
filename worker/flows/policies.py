"""Approval policies: who may answer (roles), and which answers a flow still honours.

A flow declares the version of the policy its interrupts are asked under (flow-wide, or per
interrupt). The ask records it; an answer given under a version the flow no longer honours
is not applied, at the gateway or where the step acts: the run gets a renewed review. A flow
that changed its policy in a way that keeps older approvals sound says so (``still_valid``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from models.errors import FlowDefinitionError

# The interrupts' policy_version column (String(64)).
LONGEST_POLICY_VERSION = 64


@dataclass(frozen=True)
class Policy:
    """The policy an interrupt is asked under now, and the older versions still honoured.

    ``None`` as a version: no policy declared (an answer recorded before the flow declared
    one has None; list None in ``still_valid`` to keep honouring those).
    """

    version: str | None = None
    still_valid: frozenset[str | None] = frozenset()

    def honours(self, version: str | None) -> bool:
        return version == self.version or version in self.still_valid


NO_POLICY = Policy()


def checked_policy(
    where: str, version: object, still_valid: Collection[object] | None = ()
) -> Policy:
    """A Policy from a flow's declaration, or FlowDefinitionError saying what is wrong."""
    if version is not None and not _version(version):
        raise FlowDefinitionError(
            detail=f"{where}: policy_version must be None or text of 1 to "
            f"{LONGEST_POLICY_VERSION} printable characters, got {version!r}"
        )
    if isinstance(still_valid, str | bytes) or not isinstance(still_valid, Collection):
        # A bare string is iterable too: "v1" must not become the versions v and 1.
        raise FlowDefinitionError(
            detail=f"{where}: still_valid needs a list of policy versions, got {still_valid!r}"
        )
    for old in still_valid:
        if old is not None and not _version(old):
            raise FlowDefinitionError(
                detail=f"{where}: still_valid holds {old!r}, not a policy version"
            )
    if version is None and still_valid:
        raise FlowDefinitionError(
            detail=f"{where}: still_valid needs a policy_version that they are older than"
        )
    return Policy(version, frozenset(still_valid))  # type: ignore[arg-type]


def _version(value: object) -> bool:
    return (
        isinstance(value, str) and 0 < len(value) <= LONGEST_POLICY_VERSION and value.isprintable()
    )


def checked_roles(roles: object) -> list[str] | None:
    """``roles`` as a list if it is a non-empty collection of role names, else None.

    A bare string is refused: it is iterable, and "ops" would grant the roles o, p and s.
    """
    if isinstance(roles, str | bytes | bytearray | Mapping) or not isinstance(roles, Collection):
        return None
    found = list(roles)
    if not found or not all(isinstance(role, str) and role.strip() for role in found):
        return None
    return found
