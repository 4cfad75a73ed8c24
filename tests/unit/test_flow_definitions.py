"""A flow's definition is checked where it is written: a mistake is one FlowDefinitionError line
when the module is imported (or the step declares its interrupt), not a run that misbehaves."""

from __future__ import annotations

import importlib
import math
import runpy
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from models.errors import ConfigurationError, FlowDefinitionError
from tests.scratch_flows import FlowFiles, flow_files, scratch_registry
from worker.flows import flow as registry
from worker.flows.declarations import declare
from worker.flows.flow import Flow, get_flow, load_flow_modules
from worker.flows.schemas import input_schema, lookup

__all__ = ["flow_files"]  # (a fixture)


@pytest.fixture(autouse=True)
def scratch() -> Iterator[None]:
    """Every flow and schema a test here defines is forgotten after it."""
    with scratch_registry():
        yield


@pytest.fixture()
def flows_setting(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Name the modules ``load_flow_modules`` imports (INTERLUDE_FLOWS), for this test only."""

    def name(*modules: str) -> None:
        settings = SimpleNamespace(flow_modules=lambda: list(modules))
        monkeypatch.setattr(registry, "get_settings", lambda: settings)

    return name


@input_schema("flowdef-unit.v1")
class Note(BaseModel):
    note: str = ""


def _declare(**overrides: Any) -> Any:
    declaration: dict[str, Any] = {
        "kind": "approval",
        "input": Note,
        "authority": ["approver"],
        "expires_in": 60,
    }
    declaration.update(overrides)
    return declare("gate", **{k: v for k, v in declaration.items() if v is not _MISSING})


_MISSING = object()


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


# --- roles: a bare string is not a list of roles (S3) -----------------------------------


@pytest.mark.parametrize("roles", ["ops", (), [], ["ops", ""], ["ops", "  "], ["ops", 5], None, 7])
def test_operator_roles_must_be_a_non_empty_collection_of_role_names(roles: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        Flow("flowdef_roles", operator_roles=roles)
    assert "flow 'flowdef_roles': operator_roles needs a non-empty list of role names" in (
        _one_line(refused)
    )
    with pytest.raises(Exception, match="unknown flow"):
        get_flow("flowdef_roles")


def test_operator_roles_given_as_a_list_are_kept_as_they_are() -> None:
    assert Flow("flowdef_roles_ok", operator_roles=["ops", "leads"]).operator_roles == (
        "ops",
        "leads",
    )


@pytest.mark.parametrize("roles", ["ops", ["ops", ""], ["ops", 5], 7])
def test_viewer_roles_must_be_a_collection_of_role_names(roles: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        Flow("flowdef_viewers", viewer_roles=roles)
    assert "flow 'flowdef_viewers': viewer_roles needs a list of role names" in _one_line(refused)


def test_viewer_roles_are_none_unless_given() -> None:
    assert Flow("flowdef_viewers_none").viewer_roles == ()
    assert Flow("flowdef_viewers_ok", viewer_roles=["audit"]).viewer_roles == ("audit",)


@pytest.mark.parametrize("escalate_to", ["lead", ["lead", ""], ["lead", None], [" "]])
def test_escalate_to_must_be_a_list_of_roles(escalate_to: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        _declare(on_expiry="escalate", escalate_to=escalate_to)
    assert "interrupt 'gate': escalate_to needs a list of roles" in _one_line(refused)


def test_escalation_keeps_a_list_of_roles_and_refuses_one_string() -> None:
    spec = _declare(on_expiry="escalate", escalate_to=["lead", "director"], max_escalations=0)
    assert spec.escalation == {"roles": ["lead", "director"], "expires_in": 60.0, "max": 0}
    with pytest.raises(FlowDefinitionError, match="escalate_to needs a list of roles"):
        _declare(on_expiry="escalate", escalate_to="director", max_escalations=0)


# --- max_escalations (L5) ----------------------------------------------------------------


@pytest.mark.parametrize("most", ["two", True, -1, 1.5, None])
def test_max_escalations_must_be_a_whole_number_at_least_zero(most: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        _declare(on_expiry="escalate", escalate_to=["lead"], max_escalations=most)
    assert "interrupt 'gate': max_escalations must be a whole number >= 0" in _one_line(refused)


# --- names and versions (L1) -------------------------------------------------------------


@pytest.mark.parametrize("version", [True, False, 1.5, 2.0, "2", "v2", 0, -1, None])
def test_a_flow_version_is_a_whole_number_at_least_one(version: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        Flow("flowdef_version", version=version)
    assert "flow 'flowdef_version': version must be a whole number >= 1" in _one_line(refused)
    with pytest.raises(Exception, match="unknown flow"):
        get_flow("flowdef_version")


@pytest.mark.parametrize("name", [123, None, b"refund"])
def test_a_flow_name_is_text_of_letters_digits_and_punctuation(name: Any) -> None:
    with pytest.raises(FlowDefinitionError, match="is not a valid name"):
        Flow(name)


# --- steps and their options (L6, U2) ----------------------------------------------------


def _step(flow: Flow, fn: Any = None, name: str | None = None, **options: Any) -> None:
    def a(ctx: Any) -> None:
        return None

    flow.step(name, **options)(a if fn is None else fn)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"retries": -1}, "retries must be a whole number >= 0"),
        ({"retries": True}, "retries must be a whole number >= 0"),
        ({"retries": 1.5}, "retries must be a whole number >= 0"),
        ({"retries": "3"}, "retries must be a whole number >= 0"),
        ({"backoff": -1.0}, "backoff must be a finite number of seconds >= 0"),
        ({"backoff": math.nan}, "backoff must be a finite number of seconds >= 0"),
        ({"backoff": math.inf}, "backoff must be a finite number of seconds >= 0"),
        ({"backoff": "1"}, "backoff must be a finite number of seconds >= 0"),
        ({"lease_seconds": 0}, "lease_seconds must be None or seconds above 0"),
        ({"lease_seconds": -5}, "lease_seconds must be None or seconds above 0"),
        ({"lease_seconds": math.nan}, "lease_seconds must be None or seconds above 0"),
        ({"lease_seconds": math.inf}, "lease_seconds must be None or seconds above 0"),
        ({"lease_seconds": 1e12}, "lease_seconds must be None or seconds above 0"),
        ({"lease_seconds": True}, "lease_seconds must be None or seconds above 0"),
    ],
)
def test_step_options_out_of_range_are_refused(options: dict[str, Any], message: str) -> None:
    flow = Flow("flowdef_options")
    with pytest.raises(FlowDefinitionError) as refused:
        _step(flow, **options)
    assert f"flow 'flowdef_options': step 'a': {message}" in _one_line(refused)
    assert flow.steps == {}


def test_step_options_at_their_bounds_are_kept_and_just_past_them_refused() -> None:
    flow = Flow("flowdef_options_ok")
    _step(flow, retries=0, backoff=0, lease_seconds=0.5)
    step = flow.steps["a"]
    assert (step.retries, step.backoff, step.lease_seconds) == (0, 0, 0.5)
    for past in ({"retries": -1}, {"backoff": -0.1}, {"lease_seconds": 0}):
        with pytest.raises(FlowDefinitionError):
            _step(flow, name="b", **past)
    assert list(flow.steps) == ["a"]


@pytest.mark.parametrize("name", ["", "has space", "line\nbreak", "x" * 201])
def test_a_step_name_is_checked_like_a_flow_name(name: str) -> None:
    flow = Flow("flowdef_step_name")
    with pytest.raises(FlowDefinitionError) as refused:
        _step(flow, name=name)
    assert f"step name {name!r} is not a valid name" in _one_line(refused)


def test_a_lambda_step_must_be_named() -> None:
    flow = Flow("flowdef_lambda")
    with pytest.raises(FlowDefinitionError, match="step name '<lambda>' is not a valid name"):
        flow.step()(lambda ctx: None)
    flow.step("named")(lambda ctx: None)
    assert list(flow.steps) == ["named"]


def test_a_step_decorator_without_parentheses_is_refused() -> None:
    flow = Flow("flowdef_no_parens")

    def a(ctx: Any) -> None:
        return None

    with pytest.raises(FlowDefinitionError, match=r"write @flow.step\(\) with parentheses"):
        flow.step(a)  # type: ignore[arg-type]


async def _async_step(ctx: Any) -> str:
    return "done"


def _generator_step(ctx: Any) -> Iterator[str]:
    yield "done"


def _no_context() -> None:
    return None


def _two_arguments(ctx: Any, extra: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (42, "step 42 is not a function"),
        ("a", "step 'a' is not a function"),
        (_async_step, "must be a plain function, not async def or a generator"),
        (_generator_step, "must be a plain function, not async def or a generator"),
        (_no_context, "must take one argument, its StepContext"),
        (_two_arguments, "must take one argument, its StepContext"),
    ],
)
def test_a_step_is_a_plain_function_of_its_context(fn: Any, message: str) -> None:
    flow = Flow("flowdef_step_fn")
    with pytest.raises(FlowDefinitionError) as refused:
        flow.step("a")(fn)
    assert message in _one_line(refused)
    assert flow.steps == {}


def test_a_step_called_with_its_context_alone_is_a_step_and_no_other() -> None:
    class Step:
        def __call__(self, ctx: Any) -> None:
            return None

    def a(ctx: Any, extra: int = 1, *more: Any) -> None:
        return None

    flow = Flow("flowdef_step_ok")
    flow.step()(a)
    flow.step("b")(Step())
    with pytest.raises(FlowDefinitionError, match="must take one argument"):
        flow.step("c")(_two_arguments)
    assert list(flow.steps) == ["a", "b"]


@pytest.mark.parametrize("budget", [-5, math.nan, math.inf, True, "10"])
def test_a_budget_is_none_or_a_finite_number_at_least_zero(budget: Any) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        Flow("flowdef_budget", budget=budget)
    assert "flow 'flowdef_budget': budget must be None or a finite number >= 0" in (
        _one_line(refused)
    )


def test_an_input_model_is_a_pydantic_model_class() -> None:
    with pytest.raises(FlowDefinitionError, match="input_model must be a pydantic model class"):
        Flow("flowdef_input_model", input_model=dict)  # type: ignore[arg-type]


def test_migrates_from_takes_a_version_number() -> None:
    flow = Flow("flowdef_migration", version=2)
    with pytest.raises(FlowDefinitionError, match="migrates_from needs a version number"):
        flow.migrates_from("1")(lambda state: state)  # type: ignore[arg-type]


# --- revalidations and reconcilers: one per name ------------------------------------------


def _recheck(context: Any) -> Any:
    return None


def _find(key: str) -> Any:
    return None


def test_a_second_revalidation_of_one_interrupt_is_refused() -> None:
    flow = Flow("flowdef_revalidate", version=2)
    flow.revalidate("approve")(_recheck)

    def other(context: Any) -> Any:
        return {}

    with pytest.raises(FlowDefinitionError) as refused:
        flow.revalidate("approve")(other)
    assert _one_line(refused) == (
        "flow definition is invalid: flow 'flowdef_revalidate' v2: interrupt 'approve' has a "
        "@flow.revalidate already: one interrupt, one revalidation"
    )
    # The first stays; another interrupt has its own
    flow.revalidate("approve-2")(other)
    assert flow.revalidators == {"approve": _recheck, "approve-2": other}


def test_a_second_reconciler_of_one_effect_is_refused() -> None:
    flow = Flow("flowdef_reconciler", version=3)
    flow.reconciler("pay")(_find)
    with pytest.raises(FlowDefinitionError) as refused:
        flow.reconciler("pay")(lambda key: None)
    assert _one_line(refused) == (
        "flow definition is invalid: flow 'flowdef_reconciler' v3: effect 'pay' has a "
        "@flow.reconciler already: one effect, one reconciler"
    )
    assert flow.reconcilers == {"pay": _find}


def test_a_second_migration_from_one_version_is_refused() -> None:
    flow = Flow("flowdef_migration", version=3)

    def first(state: dict[str, Any]) -> dict[str, Any]:
        return state

    flow.migrates_from(1)(first)
    with pytest.raises(FlowDefinitionError) as refused:
        flow.migrates_from(1)(lambda state: {})
    assert _one_line(refused) == (
        "flow definition is invalid: flow 'flowdef_migration' v3 has a @flow.migrates_from(1) "
        "already: one version, one migration"
    )
    assert flow.migrations == {1: first}


@pytest.mark.parametrize("what", ["revalidate", "reconciler"])
@pytest.mark.parametrize("name", ["", None, 7, b"approve", ["approve"]])
def test_a_revalidation_or_reconciler_needs_a_name(what: str, name: Any) -> None:
    flow = Flow("flowdef_unnamed")
    kind = "interrupt" if what == "revalidate" else "effect"
    with pytest.raises(FlowDefinitionError) as refused:
        getattr(flow, what)(name)
    assert _one_line(refused) == (
        f"flow definition is invalid: flow 'flowdef_unnamed' v1: @flow.{what} needs an {kind} "
        f"name (a non-empty str), got {name!r}: write @flow.{what}('name')"
    )
    assert (flow.revalidators, flow.reconcilers) == ({}, {})


@pytest.mark.parametrize(("what", "fn"), [("revalidate", _recheck), ("reconciler", _find)])
def test_a_revalidation_or_reconciler_decorator_without_parentheses_is_refused(
    what: str, fn: Any
) -> None:
    # (it bound the function to the name and registered nothing, silently)
    flow = Flow("flowdef_bare_decorator")
    with pytest.raises(FlowDefinitionError, match=rf"write @flow\.{what}\('name'\)"):
        getattr(flow, what)(fn)
    assert (flow.revalidators, flow.reconcilers) == ({}, {})


@pytest.mark.parametrize("what", ["revalidate", "reconciler"])
def test_a_revalidation_or_reconciler_is_a_function(what: str) -> None:
    flow = Flow("flowdef_not_a_function")
    with pytest.raises(FlowDefinitionError, match="'gate' is not a function"):
        getattr(flow, what)("gate")("not a function")


RECHECKED = """
from worker import Flow

flow = Flow("flowdef_rechecked", version=1)

@flow.step()
def only(ctx):
    return None

@flow.revalidate("approve")
def recheck(context):
    return None

@flow.reconciler("pay")
def find(key):
    return None
"""


def test_a_module_may_be_imported_again_but_not_revalidate_one_interrupt_twice(
    flow_files: FlowFiles,
) -> None:
    # Given a flow module with a revalidation and a reconciler, run as __main__ and imported
    # by name: each builds the flow anew, so neither is refused
    module = flow_files.write("flowdef_rechecked", RECHECKED)
    runpy.run_path(str(flow_files.path(module)), run_name="__main__")
    imported = importlib.import_module(module)
    flow = get_flow("flowdef_rechecked", 1)
    assert flow is imported.flow
    assert (flow.revalidators, flow.reconcilers) == (
        {"approve": imported.recheck},
        {"pay": imported.find},
    )
    # When a module revalidates one interrupt twice (say, a copy pasted under another name)
    twice = flow_files.write(
        "flowdef_rechecked_twice",
        RECHECKED.replace('"flowdef_rechecked"', '"flowdef_twice"')
        + '\n@flow.revalidate("approve")\ndef recheck_again(context):\n    return {}\n',
    )
    # Then its import is refused, naming the flow, its version and the interrupt
    with pytest.raises(FlowDefinitionError) as refused:
        importlib.import_module(twice)
    assert "flow 'flowdef_twice' v1: interrupt 'approve' has a @flow.revalidate already" in (
        _one_line(refused)
    )


# --- start= (L7) -------------------------------------------------------------------------


def test_a_start_naming_no_step_is_refused_before_a_run() -> None:
    flow = Flow("flowdef_start", start="nope")
    _step(flow)
    with pytest.raises(FlowDefinitionError) as refused:
        _ = flow.first_step
    assert (
        "flow 'flowdef_start' v1 starts at step 'nope', which it does not have (its steps: a)"
        in _one_line(refused)
    )


def test_loading_flow_modules_refuses_a_start_naming_no_step(
    flow_files: FlowFiles, flows_setting: Callable[..., None]
) -> None:
    # A flow whose start step a later module registers is complete once both are loaded
    first = flow_files.write(
        "flowdef_defines",
        """
        from worker import Flow

        flow = Flow("flowdef_split", start="begin")
        """,
    )
    second = flow_files.write(
        "flowdef_steps",
        f"""
        from {first} import flow

        @flow.step()
        def begin(ctx):
            return None
        """,
    )
    module = flow_files.write(
        "flowdef_start",
        """
        from worker import Flow

        flow = Flow("flowdef_start_module", start="nope")

        @flow.step()
        def a(ctx):
            return None
        """,
    )
    flows_setting(first, second, module)
    with pytest.raises(ConfigurationError) as refused:
        load_flow_modules()
    line = _one_line(refused)
    assert "INTERLUDE_FLOWS: flow 'flowdef_start_module' v1 starts at step 'nope'" in line
    # (checked in the order registered: the split flow, registered first, was found complete)
    assert "flowdef_split" not in line
    # Until it is fixed: a later load refuses again rather than let runs queue on no step
    with pytest.raises(ConfigurationError, match="starts at step 'nope'"):
        load_flow_modules()


# --- flow modules that fail at import (L3) -----------------------------------------------


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            "import os\nos.environ['FLOWDEF_NO_SUCH_SETTING']\n",
            "KeyError: 'FLOWDEF_NO_SUCH_SETTING'",
        ),
        (
            "from worker import Flow\nFlow('flowdef_broken', version=True)\n",
            "FlowDefinitionError: flow definition is invalid: flow 'flowdef_broken': version",
        ),
        ("raise RuntimeError('no\\nconfig')\n", "RuntimeError: no config"),
        ("import flowdef_not_installed_anywhere\n", "ModuleNotFoundError: No module named"),
    ],
)
def test_a_flow_module_that_fails_at_import_is_a_configuration_error(
    body: str, says: str, flow_files: FlowFiles, flows_setting: Callable[..., None]
) -> None:
    module = flow_files.write("flowdef_broken", body)
    flows_setting(module)
    with pytest.raises(ConfigurationError) as refused:
        load_flow_modules()
    line = _one_line(refused)
    assert f"INTERLUDE_FLOWS names {module!r}, which cannot be imported: {says}" in line


# --- one (name, version), one file (S2) --------------------------------------------------

TEAM = """
from worker import Flow

flow = Flow("flowdef_refund", version=1)

@flow.step()
def {step}(ctx):
    return None
"""


def test_a_flow_defined_again_by_another_file_is_refused(flow_files: FlowFiles) -> None:
    team_a = flow_files.write("team_a", TEAM.format(step="pay_a"))
    team_b = flow_files.write("team_b", TEAM.format(step="pay_b"))
    # The same file run as __main__ and imported by name defines it once
    runpy.run_path(str(flow_files.path(team_a)), run_name="__main__")
    imported = importlib.import_module(team_a)
    assert get_flow("flowdef_refund", 1) is imported.flow
    with pytest.raises(FlowDefinitionError) as refused:
        importlib.import_module(team_b)
    line = _one_line(refused)
    assert (
        f"flow 'flowdef_refund' v1 is defined in {flow_files.path(team_a)} "
        f"and again in {flow_files.path(team_b)}"
    ) in line
    # The first definition stays: its runs go on with its own steps
    assert get_flow("flowdef_refund", 1) is imported.flow


def test_a_flow_defined_again_through_a_shared_helper_is_refused(flow_files: FlowFiles) -> None:
    helper = flow_files.write(
        "flowdef_helper",
        """
        from worker import Flow

        def build(name):
            flow = Flow(name, version=1)

            @flow.step()
            def only(ctx):
                return None

            return flow
        """,
    )
    team_a = flow_files.write("team_a", f"from {helper} import build\nflow = build('flowdef_x')\n")
    team_b = flow_files.write("team_b", f"from {helper} import build\nflow = build('flowdef_x')\n")
    importlib.import_module(team_a)
    with pytest.raises(FlowDefinitionError) as refused:
        importlib.import_module(team_b)
    # The files that call the helper are named, not the helper's
    assert f"{flow_files.path(team_a)} and again in {flow_files.path(team_b)}" in (
        _one_line(refused)
    )


def test_two_flow_modules_defining_one_flow_stop_the_load(
    flow_files: FlowFiles, flows_setting: Callable[..., None]
) -> None:
    team_a = flow_files.write("team_a", TEAM.format(step="pay_a"))
    team_b = flow_files.write("team_b", TEAM.format(step="pay_b"))
    flows_setting(team_a, team_b)
    with pytest.raises(ConfigurationError) as refused:
        load_flow_modules()
    line = _one_line(refused)
    assert f"INTERLUDE_FLOWS names {team_b!r}, which cannot be imported" in line
    assert "flow 'flowdef_refund' v1 is defined in" in line


def test_a_test_may_build_the_same_flow_more_than_once_but_not_another_files(
    flow_files: FlowFiles,
) -> None:
    first = Flow("flowdef_refund", version=1)
    second = Flow("flowdef_refund", version=1)
    assert first is not second
    assert get_flow("flowdef_refund", 1) is second
    with pytest.raises(FlowDefinitionError, match="is defined in"):
        importlib.import_module(flow_files.write("team_a", TEAM.format(step="pay_a")))
    assert get_flow("flowdef_refund", 1) is second


# --- input schemas (S6, U2) --------------------------------------------------------------

SCHEMA = """
from pydantic import BaseModel
from worker import input_schema

@input_schema("flowdef-approval.v1")
class {cls}(BaseModel):
    {field}: str = ""
"""


def test_a_schema_id_registered_again_by_another_file_is_refused(flow_files: FlowFiles) -> None:
    team_a = flow_files.write("schema_a", SCHEMA.format(cls="Approval", field="ticket"))
    team_b = flow_files.write("schema_b", SCHEMA.format(cls="Approval", field="reason"))
    # The same file run as __main__ and imported by name registers its model once
    runpy.run_path(str(flow_files.path(team_a)), run_name="__main__")
    first = importlib.import_module(team_a)
    assert lookup("flowdef-approval", 1) is first.Approval
    with pytest.raises(FlowDefinitionError) as refused:
        importlib.import_module(team_b)
    assert (
        f"schema 'flowdef-approval.v1' is registered on Approval ({flow_files.path(team_a)}) "
        f"and again on Approval ({flow_files.path(team_b)})"
    ) in _one_line(refused)
    # Pending interrupts keep being validated against the model they were asked with
    assert lookup("flowdef-approval", 1) is first.Approval


def test_two_models_of_one_file_under_one_schema_id_are_refused() -> None:
    def build() -> type[BaseModel]:
        @input_schema("flowdef-twice.v1")
        class First(BaseModel):
            a: int = 0

        return First

    # The same class built again (a fixture, a test run twice) is the same model
    build()
    first = build()

    with pytest.raises(FlowDefinitionError, match=r"'flowdef-twice\.v1' is registered on"):

        @input_schema("flowdef-twice.v1")
        class Second(BaseModel):
            b: str = ""

    assert lookup("flowdef-twice", 1) is first


class _NotAModel:
    note: str = ""


class _WithCallable(BaseModel):
    hook: Callable[[int], int]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (_NotAModel, "@input_schema('flowdef-bad.v1') needs a pydantic model class"),
        (_no_context, "@input_schema('flowdef-bad.v1') needs a pydantic model class"),
        (Note(), "@input_schema('flowdef-bad.v1') needs a pydantic model class"),
        (_WithCallable, "@input_schema('flowdef-bad.v1'): _WithCallable has no JSON Schema"),
    ],
)
def test_an_input_schema_is_a_pydantic_model_with_a_json_schema(target: Any, message: str) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        input_schema("flowdef-bad.v1")(target)
    assert message in _one_line(refused)
    assert lookup("flowdef-bad", 1) is None


# --- interrupt declarations: text no database stores, arguments (L2, U2) -----------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"evidence": {"s": "a\x00b"}},
            "evidence holds NUL or unpaired surrogate characters at 's'",
        ),
        ({"evidence": ["ok", "\ud800"]}, "evidence holds NUL or unpaired surrogate characters"),
        ({"evidence": {"k\x00": 1}}, "evidence holds NUL or unpaired surrogate characters at"),
        ({"evidence": "\x00"}, "evidence holds NUL or unpaired surrogate characters"),
        ({"scope": {"env": "prod\x00"}}, "scope holds NUL or unpaired surrogate characters"),
        (
            {"on_expiry": "default", "default": {"note": "n\x00"}},
            "default input holds NUL or unpaired surrogate characters at 'note'",
        ),
        ({"reason": "why\x00"}, "reason must be text without NUL or unpaired surrogate"),
        ({"reason": "\udc80"}, "reason must be text without NUL or unpaired surrogate"),
        ({"reason": 5}, "reason must be text"),
        ({"expires_in": _MISSING}, "expires_in= is missing"),
        ({"authority": _MISSING, "kind": _MISSING}, "authority= is missing, kind= is missing"),
        ({"expire_in": 60}, "expire_in= is not an interrupt argument"),
        ({"expires_in": "60"}, "expires_in must be seconds (a number or a timedelta)"),
        ({"expires_in": True}, "expires_in must be seconds (a number or a timedelta)"),
        (
            {"on_expiry": "escalate", "escalate_to": ["lead"], "escalation_expires_in": "1"},
            "escalation_expires_in must be seconds",
        ),
    ],
)
def test_a_declaration_a_database_cannot_store_is_the_flows_bug(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(FlowDefinitionError) as refused:
        _declare(**overrides)
    assert f"interrupt 'gate': {message}" in _one_line(refused)


def test_storable_text_anywhere_in_a_declaration_is_kept_and_nul_next_to_it_is_not() -> None:
    spec = _declare(evidence={"é": ["ü", "\u2028"]}, scope={"env": "prod"}, reason="ça va")
    assert (spec.evidence, spec.reason) == ({"é": ["ü", "\u2028"]}, "ça va")
    with pytest.raises(FlowDefinitionError, match=r"evidence holds NUL .* at 'é\[1\]'"):
        _declare(evidence={"é": ["ü", "\x00"]})
