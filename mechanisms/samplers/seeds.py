"""Public seeds: one root per job, a stream per (party, batch), the same in memory and over the network.

``public_rng(root, batch, party)`` is numpy's ``SeedSequence(root, spawn_key=(party, batch))``: streams for
distinct (party, batch) keys are independent, and a stream does not depend on which process, worker or
transport asked for it (ELFI's per-batch sub-seeds). Party 0 is the coordinator (proposals, the starting
points of the chains); parties 1..m may use theirs for public, data-independent choices (e.g. synthetic data
in simulations). These seeds are PUBLIC: secret noise (Gamma, penalty) never comes from them but from each
party's CSPRNG (``hss.randomness.SecureRandom``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COORDINATOR = 0
INIT_BATCH = 2**32 - 1  # the batch key of a sampler's initial draws (before batch 0)


def public_rng(root: int, batch: int, party: int = COORDINATOR) -> np.random.Generator:
    if root < 0 or batch < 0 or party < 0:
        raise ValueError(f"root, batch and party must be non-negative, got {root}, {batch}, {party}")
    return np.random.default_rng(np.random.SeedSequence(root, spawn_key=(party, batch)))


@dataclass(frozen=True)
class PublicSeeds:
    """The root of a seeded job; ``rng(batch, party)`` gives the stream of one batch of one party."""

    root: int

    def rng(self, batch: int, party: int = COORDINATOR) -> np.random.Generator:
        return public_rng(self.root, batch, party)

    def init_rng(self, party: int = COORDINATOR) -> np.random.Generator:
        return public_rng(self.root, INIT_BATCH, party)
