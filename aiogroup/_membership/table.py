"""The table engine every membership machine is written in (h11's two tables).

Why one engine: a machine is read from its tables, so every protocol's machine
should be read the same way.  Each machine declares

* an **event table**: (state, event type) -> :class:`Transition`, the handler and
  the states it may move to *directly*; a pair missing from the table is an
  illegal input (:func:`transition_for` ends the machine in its failed state and
  raises the machine's own error);
* an ordered tuple of **state rules** (:class:`StateRule`): in one of ``sources``,
  when ``guard`` holds, the machine moves to ``target`` by the rule's ``step``;
  :func:`first_rule` picks the first that fires, so each guard is read knowing
  the rules above it did not.

The diagram in docs/architecture.md is drawn from both (:func:`mermaid_diagram`),
for each machine, so the picture cannot drift from the code.

What a handler or a step receives is the machine's own business (the classic
machine passes the action list, the consumer-protocol machine collects actions on
itself), so those callables are type parameters here.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "StateRule",
    "Transition",
    "automatic_transitions",
    "first_rule",
    "mermaid_diagram",
    "transition",
    "transition_for",
]

StateT = TypeVar("StateT", bound=enum.Enum)
MachineT = TypeVar("MachineT")
HandlerT = TypeVar("HandlerT")
StepT = TypeVar("StepT")


@dataclass(frozen=True, slots=True)
class Transition(Generic[StateT, HandlerT]):
    """One event-table entry: the handler and the states it may move to directly."""

    handler: HandlerT
    targets: frozenset[StateT]


@dataclass(frozen=True, slots=True)
class StateRule(Generic[StateT, MachineT, StepT]):
    """A state-triggered move: in one of ``sources``, when ``guard`` holds, to ``target``.

    ``step`` is what the machine does on the way (None: nothing but the move);
    ``name`` names the rule in tests and the recorder of rule edges.
    """

    name: str
    sources: frozenset[StateT]
    guard: Callable[[MachineT], bool]
    target: StateT
    reason: str
    step: StepT | None = None


def transition(handler: HandlerT, *targets: StateT) -> Transition[StateT, HandlerT]:
    """An event-table entry: ``handler``, which may move the machine to ``targets``
    (none: the event never changes the state directly)."""
    return Transition(handler, frozenset(targets))


def transition_for(
    table: Mapping[tuple[StateT, type], Transition[StateT, HandlerT]],
    state: StateT,
    event: object,
    fail: Callable[[str], BaseException],
) -> Transition[StateT, HandlerT]:
    """The entry for ``event`` in ``state``; ``fail(text)`` is raised when there is none."""
    tr = table.get((state, type(event)))
    if tr is None:
        raise fail(f"{type(event).__name__} is not valid in state {state.value}")
    return tr


def first_rule(
    rules: Iterable[StateRule[StateT, MachineT, StepT]], machine: MachineT, state: StateT
) -> StateRule[StateT, MachineT, StepT] | None:
    """The first rule that fires from ``state`` (None: the machine rests)."""
    for rule in rules:
        if state in rule.sources and rule.guard(machine):
            return rule
    return None


def automatic_transitions(
    rules: Iterable[StateRule[StateT, MachineT, StepT]],
) -> dict[StateT, dict[StateT, str]]:
    """source -> target -> the reasons of the rules that move it there (self-moves left out)."""
    moves: dict[StateT, dict[StateT, str]] = {}
    for rule in rules:
        for source in sorted(rule.sources, key=lambda st: str(st.value)):
            if rule.target is source:
                continue
            out = moves.setdefault(source, {})
            out[rule.target] = (
                f"{out[rule.target]}; {rule.reason}" if rule.target in out else (rule.reason)
            )
    return moves


def mermaid_diagram(
    table: Mapping[tuple[StateT, type], Transition[StateT, HandlerT]],
    rules: Iterable[StateRule[StateT, MachineT, StepT]],
    *,
    initial: StateT,
    finals: Iterable[StateT],
) -> str:
    """Both tables as a mermaid stateDiagram.

    Self-loops (events handled without a state change) are left out so the picture
    shows movement; labels in brackets are the state rules' reasons.
    """
    edges: dict[tuple[StateT, StateT], set[str]] = {}
    for (state, event), tr in table.items():
        for target in tr.targets:
            if target is not state:
                edges.setdefault((state, target), set()).add(event.__name__)
    for rule in rules:
        for source in rule.sources:
            if rule.target is not source:
                edges.setdefault((source, rule.target), set()).add(f"[{rule.reason}]")
    lines = ["stateDiagram-v2", f"    [*] --> {initial.value}"]
    for (src, dst), labels in sorted(
        edges.items(), key=lambda kv: (str(kv[0][0].value), str(kv[0][1].value))
    ):
        lines.append(f"    {src.value} --> {dst.value}: {', '.join(sorted(labels))}")
    lines.extend(f"    {final.value} --> [*]" for final in finals)
    return "\n".join(lines) + "\n"
