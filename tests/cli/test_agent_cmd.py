"""`meshhealth agent`: a start-up error is one line and exit 2, however it leaves trio.

A start-up error cancels the agent's other tasks; when one of them fails on its way out
at the same moment, the error arrives inside an exception group (once seen as a
traceback instead of the one line). These runners raise exactly those shapes, every
time: both tasks raise before their first checkpoint, so trio collects both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from meshhealth.agent.app import AgentStartError
from meshhealth.agent.config.agent_config import AgentConfig, resolve_config
from meshhealth.agent.membership.registrar import NodeNameTaken
from meshhealth.cli.agent_cmd import run_agent_process, start_error_in

CONFIG = resolve_config({"node": "n1", "node_ip": "127.0.0.1", "health_mode": "none"}, {}, {})
Runner = Callable[[AgentConfig], Awaitable[None]]


async def _fail_to_start() -> None:
    raise AgentStartError("another agent is serving /tmp/x.sock: refusing to start")


async def _fail_on_the_way_out() -> None:
    raise RuntimeError("child exited without calling task_status.started()")


async def racing_tasks(config: AgentConfig) -> None:
    """The start-up error and a consequence in one nursery: ExceptionGroup([both])."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_fail_to_start)
        nursery.start_soon(_fail_on_the_way_out)


async def racing_tasks_rewrapped(config: AgentConfig) -> None:
    """As the agent does: `except*` turns the start error into a fresh one; the
    unmatched consequence rides along, so Python raises a group of both."""
    try:
        await racing_tasks(config)
    except* AgentStartError as group:
        raise AgentStartError(str(group.exceptions[0])) from None


async def name_taken_in_group(config: AgentConfig) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_fail_on_the_way_out)

        async def taken() -> None:
            raise NodeNameTaken("node c1/n1 is already registered by a live agent")

        nursery.start_soon(taken)


async def plain_start_error(config: AgentConfig) -> None:
    await _fail_to_start()


@pytest.mark.parametrize(
    ("runner", "message"),
    [
        (plain_start_error, "another agent is serving /tmp/x.sock: refusing to start"),
        (racing_tasks, "another agent is serving /tmp/x.sock: refusing to start"),
        (racing_tasks_rewrapped, "another agent is serving /tmp/x.sock: refusing to start"),
        (name_taken_in_group, "node c1/n1 is already registered by a live agent"),
    ],
    ids=["plain", "group", "rewrapped-group", "name-taken"],
)
def test_start_error_is_one_line_and_exit_2(
    runner: Runner, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_agent_process(CONFIG, runner) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"meshhealth agent: {message}"]


def test_a_group_without_start_error_is_not_hidden() -> None:
    async def crash(config: AgentConfig) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_fail_on_the_way_out)

    with pytest.raises(BaseExceptionGroup) as caught:
        run_agent_process(CONFIG, crash)
    assert start_error_in(caught.value) is None


def test_clean_exit_is_0() -> None:
    async def stop(config: AgentConfig) -> None:
        await trio.lowlevel.checkpoint()

    assert run_agent_process(CONFIG, stop) == 0


def test_start_error_in_finds_the_first_leaf_at_any_depth() -> None:
    leaf = AgentStartError("x")
    nested = ExceptionGroup("outer", [ValueError("a"), ExceptionGroup("inner", [leaf])])
    assert start_error_in(nested) is leaf
    assert start_error_in(ValueError("a")) is None
