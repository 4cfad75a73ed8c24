"""Forms from an interrupt's JSON Schema, and the submitted form back to the input it means."""

from __future__ import annotations

from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from worker.web.forms import fields_of, input_from_form


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Review(BaseModel):
    ticket: str = Field(min_length=2, max_length=20, description="the change ticket")
    units: int = Field(ge=1, le=10)
    ratio: float = 0.5
    urgent: bool = False
    verdict: Literal["fit", "unfit"]
    priority: Priority | None = None
    note: str | None = None
    tags: list[str] = []


def test_every_property_becomes_a_field_of_its_kind() -> None:
    schema = Review.model_json_schema()
    fields = {f.name: f for f in fields_of(schema, order=list(Review.model_fields))}
    assert list(fields) == [
        "ticket", "units", "ratio", "urgent", "verdict", "priority", "note", "tags"
    ]  # fmt: skip
    assert {name: f.widget for name, f in fields.items()} == {
        "ticket": "text",
        "units": "integer",
        "ratio": "number",
        "urgent": "boolean",
        "verdict": "select",
        "priority": "select",
        "note": "text",
        "tags": "json",
    }
    assert {name for name, f in fields.items() if f.required} == {"ticket", "units", "verdict"}
    assert fields["ticket"].description == "the change ticket"
    assert (fields["ticket"].min_length, fields["ticket"].max_length) == (2, 20)
    assert (fields["units"].minimum, fields["units"].maximum) == (1, 10)
    assert fields["verdict"].options == ["fit", "unfit"]
    assert fields["priority"].options == ["low", "high"]
    assert fields["ratio"].shown == "0.5"


def test_previous_input_prefills_the_form() -> None:
    fields = fields_of(Review.model_json_schema(), {"ticket": "CH-1", "verdict": "unfit"})
    shown = {f.name: f.shown for f in fields}
    assert shown["ticket"] == "CH-1"
    assert next(f for f in fields if f.name == "verdict").selected("unfit")


def test_a_submitted_form_is_typed_and_blank_fields_are_left_to_their_defaults() -> None:
    fields = fields_of(Review.model_json_schema())
    form = {
        "input.ticket": "CH-7",
        "input.units": "3",
        "input.ratio": "",
        "input.verdict": "fit",
        "input.priority": "high",
        "input.tags": '["a", "b"]',
    }
    submitted = input_from_form(fields, form)
    assert submitted == {
        "ticket": "CH-7",
        "units": 3,
        "urgent": False,
        "verdict": "fit",
        "priority": "high",
        "tags": ["a", "b"],
    }
    assert Review.model_validate(submitted).priority is Priority.HIGH


def test_a_value_that_does_not_convert_is_passed_on_for_the_gateway_to_refuse() -> None:
    fields = fields_of(Review.model_json_schema())
    submitted = input_from_form(fields, {"input.units": "three", "input.urgent": "true"})
    assert submitted == {"units": "three", "urgent": True}


@pytest.mark.parametrize(
    ("name", "typed"),
    [
        ("ratio", "1e999"),
        ("ratio", "nan"),
        ("units", "9" * 5000),
        ("tags", '["a", NaN]'),
        ("tags", "[1e999]"),
        ("tags", "[" * 20_000 + "]" * 20_000),
    ],
    ids=["inf", "nan", "5000-digits", "json-nan", "json-inf", "json-deep"],
)
def test_a_number_json_cannot_carry_is_passed_on_as_typed(name: str, typed: str) -> None:
    # Converted, it would make the whole contract "not JSON": refused under no run, naming no
    # field. As typed, the gateway refuses the field by name, under its run.
    fields = fields_of(Review.model_json_schema())
    assert input_from_form(fields, {f"input.{name}": typed})[name] == typed


def test_without_the_model_required_fields_come_first_and_with_it_its_order() -> None:
    schema = Review.model_json_schema()
    # A stored schema whose properties came back in another order (as JSONB returns them)
    shuffled = {**schema, "properties": dict(sorted(schema["properties"].items()))}
    assert [f.name for f in fields_of(shuffled)][:3] == ["ticket", "units", "verdict"]
    declared = [f.name for f in fields_of(shuffled, order=list(Review.model_fields))]
    assert declared == list(Review.model_fields)
