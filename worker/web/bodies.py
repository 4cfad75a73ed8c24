"""Request bodies read within bounds: past a limit nothing more is read or held, whoever sends it.

The inbox's forms are read here before their CSRF token or session is checked (the token is
in the form), so the bound must hold for anyone at all: a form is at most ``MAX_FORM`` bytes of
``application/x-www-form-urlencoded`` (what the inbox's pages send), never a multipart body
with files to spool.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request

# An answer's form is its generated fields and a few hidden ones: far below this.
MAX_FORM = 256 * 1024
MAX_FORM_FIELDS = 1000
FORM_TYPE = "application/x-www-form-urlencoded"


class FormRefused(Exception):
    """Why a form was not read: said in one line, with the HTTP status that says it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


async def read_capped(request: Request, limit: int) -> tuple[bytes, bool]:
    """The body's first ``limit`` bytes, and whether the body went past them (the rest is not
    read: the request ends there)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], True
    return b"".join(chunks), False


async def form_of(request: Request) -> FormData:
    """The submitted form, or FormRefused: not URL-encoded, too large, or too many fields."""
    body, over = await read_capped(request, MAX_FORM)
    if over:
        raise FormRefused(f"the form is larger than {MAX_FORM // 1024} KB", 413)
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != FORM_TYPE and body:  # (no body at all is an empty form)
        raise FormRefused(f"a form is sent as {FORM_TYPE}", 415)
    try:
        fields: list[tuple[str, str | UploadFile]] = list(
            parse_qsl(
                body.decode("utf-8", "replace"),
                keep_blank_values=True,
                max_num_fields=MAX_FORM_FIELDS,
            )
        )
    except ValueError:
        raise FormRefused(f"the form has more than {MAX_FORM_FIELDS} fields", 413) from None
    return FormData(fields)
