"""Actor ids: the one normal form they are created, stored and compared in.

Two spellings of one person (``Bob``, `` bob ``, a full-width ``bob``) are one id, so
separation of duties cannot be sidestepped by typing a name differently, and the prefixes
interlude writes for itself (``system:expiry``) cannot be taken by an actor, nor can text
shaped like a credential (stored attempts redact such text, so the actor could not be told
apart from its own redaction).
"""

from __future__ import annotations

import re
import unicodedata

# Records name an actor as ``kind:id`` (``service:`` is the longest kind) in columns of 200.
MAX_ACTOR_ID = 190
ACTOR_ID = re.compile(rf"^[a-z0-9_.@:\-]{{1,{MAX_ACTOR_ID}}}$")
# interlude records its own decisions under these; no actor may look like them.
RESERVED_PREFIXES = ("system:", "worker:")
CREDENTIAL_PREFIX = "ilc_"
# What a credential interlude issued looks like (its prefix, then token_urlsafe(32): 43
# characters). Such text is redacted wherever a submission is stored.
CREDENTIAL_SHAPE = re.compile(rf"{CREDENTIAL_PREFIX}[A-Za-z0-9_\-]{{20,}}")


def normal_actor_id(value: str) -> str:
    """Trimmed, Unicode NFKC, case-folded: the form ids are stored and compared in."""
    return unicodedata.normalize("NFKC", value.strip()).casefold()


def actor_id_problem(value: object) -> str | None:
    """Why ``value`` cannot be an actor id (None if it can, once normalised)."""
    if not isinstance(value, str):
        return "an actor id must be text"
    if len(value) > 4 * MAX_ACTOR_ID:
        return f"an actor id is at most {MAX_ACTOR_ID} characters"
    normal = normal_actor_id(value)
    if not ACTOR_ID.fullmatch(normal):
        return f"an actor id may only hold letters, digits and ._@:- (1 to {MAX_ACTOR_ID})"
    if normal.startswith(RESERVED_PREFIXES):
        return f"the prefixes {' and '.join(RESERVED_PREFIXES)} are reserved for interlude"
    if CREDENTIAL_SHAPE.search(normal):
        return (
            f"an actor id may not hold {CREDENTIAL_PREFIX} followed by 20 or more letters, "
            "digits, _ or - (that is the shape of a credential, redacted where stored)"
        )
    return None
