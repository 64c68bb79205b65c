"""Testing only: a daemon that deviates from the protocol on purpose (``[testing] deviate``, issue 25).

A test of security with abort needs a registry that sends wrong messages over the real links, not only an
in-memory harness. ``deviate = ["additive@3", "drop@5", "additive@out"]`` makes this daemon alter, in every
decision step (session step >= 1; the key setup is not touched), the frames it sends in round 3 and 5 of
the step, or its output shares to the coordinator (``out``). Kinds:

- ``additive``: +1 on the first field element of the frame to the lowest-numbered other party;
- ``inconsistent``: +dst on the last element of every frame of the round (a different error to each peer;
  the last element is an opened share where the round opens values: hss.authenticated packs openings last);
- ``replace``: the frame to the lowest other party replaced by as many words from ``os.urandom``;
- ``drop``: the frame to the lowest other party is not sent (the peer times out: a missing message);
- ``duplicate``: the payload to the lowest other party sent twice over (twice the words);
- ``noncanonical``: the first element to the lowest other party set to 2^128 - 1 (not a field element).

The daemon warns loudly at start-up when the section is present (``parties.cli``), like ``fixed_rng_key``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import numpy as np

DEVIATIONS = ("additive", "inconsistent", "replace", "drop", "duplicate", "noncanonical")
OUT = 0  # the round number standing for the output shares to the coordinator ("<kind>@out")


def parse(items: list[Any]) -> frozenset[tuple[str, int]]:
    """``["<kind>@<round>" | "<kind>@out", ...]`` as (kind, round) pairs (round 0: the output shares);
    ValueError naming the entry otherwise."""
    out: set[tuple[str, int]] = set()
    for raw in items:
        kind, _, where = raw.partition("@") if isinstance(raw, str) else ("", "", "")
        if kind not in DEVIATIONS or not (where == "out" or (where.isdigit() and 1 <= int(where) <= 1000)):
            raise ValueError(
                f"{raw!r}: entries are '<kind>@<round>' (round 1..1000) or '<kind>@out', kind one of "
                f"{list(DEVIATIONS)}"
            )
        out.add((kind, OUT if where == "out" else int(where)))
    return frozenset(out)


def _altered(kind: str, payload: np.ndarray, delta: int, last: bool = False) -> np.ndarray | None:
    words = np.array(payload, dtype=np.uint64, copy=True)
    if kind == "drop":
        return None
    if kind == "duplicate":
        return np.concatenate([words, words])
    if kind == "replace":
        return np.frombuffer(os.urandom(8 * words.size), dtype=np.uint64).copy()
    if words.size >= 2:
        if kind == "noncanonical":
            words[0] = words[1] = np.uint64(2**64 - 1)
        else:  # additive / inconsistent: + delta on the low word (the element stays below 2^127 w.h.p.)
            at = words.size - 2 if last else 0
            words[at] = words[at] + np.uint64(delta)
    return words


def tamper_frame(deviations: frozenset[tuple[str, int]], frame: Any, first_peer: int) -> Any | None:
    """The frame as this deviating daemon sends it (None: not sent)."""
    if frame.step < 1 or frame.payload is None:
        return frame
    for kind, rnd in deviations:
        if rnd != frame.round or rnd == OUT:
            continue
        if kind == "inconsistent":
            return replace(frame, payload=_altered("additive", frame.payload, frame.dst, last=True))
        if frame.dst == first_peer:
            payload = _altered(kind, frame.payload, 1)
            return None if payload is None else replace(frame, payload=payload)
    return frame


def tamper_outputs(deviations: frozenset[tuple[str, int]], messages: tuple[Any, ...]) -> tuple[Any, ...]:
    """The output shares to the coordinator (``(round, payload)`` pairs) as this daemon sends them: the
    last one altered by each ``<kind>@out`` deviation (``drop``: sent empty)."""
    kinds = [kind for kind, rnd in deviations if rnd == OUT]
    if not kinds or not messages:
        return messages
    rnd, payload = messages[-1]
    for kind in kinds:
        payload = _altered(kind, payload, 1)
        if payload is None:
            payload = np.zeros(0, dtype=np.uint64)
    return (*messages[:-1], (rnd, payload))
