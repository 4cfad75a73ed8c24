"""The input schema both generations of the deployment tests register (same name, version)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from worker import input_schema


@input_schema("ver-approval.v1")
class VerApproval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: str = ""
