"""What the surfaces make of a tool-call review: the call read from the interrupt, the
command's --approve / --edit / --reject, and the inbox's edit form from the arguments' schema."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from models.contracts import REVIEW_SCHEMA_SUFFIX, proposed_call
from tests.flows.agents import RefundArgs
from worker.cli import main
from worker.cli.exits import BAD_INPUT, CliError
from worker.cli.review import (
    MESSAGE_LIMIT,
    call_text,
    changes,
    decision_of,
    summary_lines,
)
from worker.flows.schemas import json_schema_of, schema_id_of
from worker.flows.toolcalls import LONGEST_MESSAGE, answer_model, evidence_of
from worker.web.forms import ARGS_PREFIX, args_schema_of, fields_of, input_from_form

PROPOSED = {"order": "B-7", "amount": 300}


def test_the_call_is_read_from_the_interrupt_alone() -> None:
    # The schema name the core gives a review's input is the one the surfaces recognise
    model = answer_model(RefundArgs)
    name, version = schema_id_of(model)
    assert name.endswith(REVIEW_SCHEMA_SUFFIX) and version == 1
    evidence = evidence_of("refund", PROPOSED, {"customer": "c-9"})
    call = proposed_call(name, evidence)
    assert call is not None and (call.tool, call.args) == ("refund", PROPOSED)
    # Another interrupt is not a review, whatever its evidence looks like
    assert proposed_call("certificate", evidence) is None
    assert proposed_call(name, {"tool": "refund"}) is None
    assert proposed_call(name, ["refund", PROPOSED]) is None


def test_the_message_bound_is_the_review_inputs() -> None:
    assert MESSAGE_LIMIT == LONGEST_MESSAGE


def _args(**given: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "decision": None,
        "approve": False,
        "reject": False,
        "edit": None,
        "message": None,
        "input": None,
    }
    values.update(given)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(
    ("given", "decision"),
    [
        ({"approve": True}, "approved"),
        ({"edit": '{"amount": 250}'}, "approved"),
        ({"reject": True}, "rejected"),
        ({"reject": True, "message": "no"}, "rejected"),
        ({"decision": "rejected", "message": "no"}, "rejected"),
        ({"decision": "approved", "input": "{}"}, "approved"),
        ({}, None),
    ],
)
def test_each_shorthand_is_one_decision(given: dict[str, Any], decision: str | None) -> None:
    assert decision_of(_args(**given)) == decision


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"approve": True, "reject": True}, "choose one of --approve, --reject"),
        ({"decision": "approved", "edit": "{}"}, "choose one of --decision, --edit"),
        ({"approve": True, "message": "no"}, "--message goes with --reject"),
        ({"message": "no"}, "--message goes with --reject"),
        ({"edit": "{}", "input": "{}"}, "--edit cannot be combined with --input"),
        ({"reject": True, "message": "x", "input": "{}"}, "--message cannot be combined"),
    ],
)
def test_contradicting_options_are_refused_naming_them(given: dict[str, Any], says: str) -> None:
    with pytest.raises(CliError) as refused:
        decision_of(_args(**given))
    assert says in str(refused.value) and refused.value.status == BAD_INPUT


@pytest.mark.parametrize(
    "argv",
    [
        ["resume", "abcdef12", "--actor", "mia", "--approve", "--reject"],
        ["resume", "abcdef12", "--actor", "mia", "--edit", "{not json"],
        ["resume", "abcdef12", "--actor", "mia", "--edit", "[1, 2]"],
        ["resume", "abcdef12", "--actor", "mia", "--approve", "--message", "why"],
        ["resume", "abcdef12", "--actor", "mia", "--reject", "--message", "x" * 4001],
        ["resume", "--contract", "c.json", "--approve", "--yes"],
    ],
)
def test_bad_review_options_are_one_line_and_open_no_database(
    argv: list[str], no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured.err
    assert not no_database.exists()


def test_a_call_reads_as_code_and_an_edit_as_what_changed() -> None:
    assert call_text("refund", PROPOSED) == 'refund(order="B-7", amount=300)'
    assert changes(PROPOSED, {**PROPOSED, "amount": 250}) == "amount 300 -> 250"
    assert changes(PROPOSED, {"order": "B-8"}) == 'order "B-7" -> "B-8", amount 300 -> null'
    assert changes(PROPOSED, PROPOSED) == "nothing"


def test_the_confirmation_says_what_happens_to_the_call() -> None:
    call = proposed_call("refund_args-review", {"tool": "refund", "args": PROPOSED})
    assert call is not None
    approve = summary_lines(call, {"decision": "approved", "input": {}})
    assert approve == ['  approve the call refund(order="B-7", amount=300) as proposed']
    edit = {"decision": "approved", "input": {"args": {**PROPOSED, "amount": 250}}}
    assert summary_lines(call, edit)[1] == "  edited: amount 300 -> 250"
    reject = {"decision": "rejected", "input": {"message": "refund the shipping only"}}
    assert summary_lines(call, reject)[1] == "  message to the agent: refund the shipping only"


def test_the_edit_form_is_the_arguments_schema_prefilled_with_the_proposal() -> None:
    schema = json_schema_of(answer_model(RefundArgs))
    fields = fields_of(args_schema_of(schema), PROPOSED, ["order", "amount"], prefix=ARGS_PREFIX)
    assert [(f.input_name, f.widget, f.required, f.value) for f in fields] == [
        ("args.order", "text", True, "B-7"),
        ("args.amount", "integer", True, 300),
    ]
    # What the form sends back is the edited call
    assert input_from_form(fields, {"args.order": "B-7", "args.amount": "250"}) == {
        "order": "B-7",
        "amount": 250,
    }
    # A schema with no arguments gives no fields, not an error
    assert args_schema_of({"properties": {}}) == {}
