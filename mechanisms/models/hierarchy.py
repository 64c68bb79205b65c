"""A model's registry random intercept as blocks: the shared parameters and each registry's own effect.

A model with a random intercept per registry, u_j = σ_u z_j, z_j ~ N(0, 1) a priori (independent of every
other parameter), where every record of registry j carries level j of a public column, has a likelihood in
which registry j's records depend on z_j and on the *shared* parameters (the fixed effects, log σ_u, a
Weibull shape) only. :class:`RandomIntercept` says where those sit in θ; :class:`SharedModel` is the model
seen by the coordinator of a blocked sampler (``mechanisms.samplers.blocked``): the shared parameters only,
with their prior (the model's prior with the z part removed, which is the marginal prior of the shared block
because the z_j are independent of it a priori). A model offers the blocks by returning a
:class:`RandomIntercept` from ``Model.random_intercept()`` and the mean design row of a registry's records
from ``Model.covariate_means(data)`` (a registry's private centring constant: it never leaves the registry).

Pure: no I/O, no randomness except through the generators passed in.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.models.base import F64, Column, Data, Model, as_batch


@dataclass(frozen=True)
class RandomIntercept:
    """Where a model's registry random intercept sits in θ (indices into the full parameter vector).

    ``column``: the records' registry column; ``levels``: its values in order (level k ↔ parameter
    ``z[k]``); ``log_sd``: the index of log σ_u; ``z``: the index of each level's z; ``beta``: the indices of
    the coefficients of the linear predictor, in the order of the model's design columns (the centring
    constant of ``covariate_means`` is dotted with them)."""

    column: str
    levels: tuple[float, ...]
    log_sd: int
    z: tuple[int, ...]
    beta: tuple[int, ...]
    intercept: int | None = None  # the fixed intercept's index (one of beta), None without one

    def __post_init__(self) -> None:
        if len(self.z) != len(self.levels) or not self.levels:
            raise ValueError(f"a random intercept needs one z per level, got {len(self.z)} for {self.levels}")
        used = [self.log_sd, *self.z, *self.beta]
        if len(set(used)) != len(used) or min(used) < 0:
            raise ValueError(f"random intercept indices must be distinct and >= 0, got {used}")
        if self.intercept is not None and self.intercept not in self.beta:
            raise ValueError(
                f"the intercept's index {self.intercept} is not one of the coefficients {self.beta}"
            )

    @property
    def m(self) -> int:
        """The number of levels (registries)."""
        return len(self.levels)

    def shared(self, d: int) -> tuple[int, ...]:
        """The indices of the shared block: every parameter but the z's, in θ's order."""
        zs = set(self.z)
        return tuple(i for i in range(d) if i not in zs)

    def level_of(self, data: Data, where: str = "this registry's records") -> int:
        """The one level every record of ``data`` carries (its index into ``levels``); ValueError naming the
        column and the levels found when the records hold none, several or an undeclared one."""
        g = np.unique(np.asarray(data[self.column], dtype=np.float64))
        if g.size != 1:
            found = "no records" if g.size == 0 else f"{g.size} levels"
            raise ValueError(
                f"{where}: a registry's records must all carry one level of {self.column!r} for its own "
                f"random effect (blocked sampling), found {found}"
            )
        hit = [k for k, v in enumerate(self.levels) if v == float(g[0])]
        if not hit:
            raise ValueError(f"{where}: {self.column!r} holds a level that is not one of {list(self.levels)}")
        return hit[0]


@dataclass(frozen=True)
class SharedModel(Model):
    """The shared block of a model with a registry random intercept, as the coordinator's model: its
    parameters are ``full``'s without the z's; its prior is the marginal prior of the shared block. It has
    no likelihood here (each registry evaluates the full model with its own z_j)."""

    full: Any  # the Model (a dataclass field typed Any: Model is abstract)

    name = "shared-block"

    def __post_init__(self) -> None:
        if self.full.random_intercept() is None:
            raise ValueError(f"model {self.full.name!r} has no registry random intercept to block")

    @functools.cached_property
    def hierarchy(self) -> RandomIntercept:
        ri = self.full.random_intercept()
        assert ri is not None
        return ri  # type: ignore[no-any-return]

    @functools.cached_property
    def index(self) -> tuple[int, ...]:
        """The shared parameters' indices in the full θ."""
        return self.hierarchy.shared(self.full.d)

    @functools.cached_property
    def param_names(self) -> tuple[str, ...]:  # type: ignore[override]
        names = self.full.param_names
        return tuple(names[i] for i in self.index)

    @functools.cached_property
    def d(self) -> int:  # type: ignore[override]
        return len(self.index)

    def position(self, full_index: int) -> int:
        """Where the full θ's parameter ``full_index`` (not a z) sits in the shared block."""
        return self.index.index(full_index)

    @property
    def lower(self) -> F64:
        return np.asarray(self.full.lower[list(self.index)], dtype=np.float64)

    @property
    def upper(self) -> F64:
        return np.asarray(self.full.upper[list(self.index)], dtype=np.float64)

    @property
    def schema(self) -> tuple[Column, ...]:
        return tuple(self.full.schema)

    def embed(self, shared: F64, z: F64 | None = None) -> F64:
        """The full θ (n, d) of shared values (n, d_s) and the z's (n, m) (zeros when None)."""
        s = as_batch(shared, self.d)
        out = np.zeros((s.shape[0], len(self.index) + self.hierarchy.m))
        out[:, self.index] = s
        if z is not None:
            out[:, self.hierarchy.z] = np.asarray(z, dtype=np.float64).reshape(s.shape[0], -1)
        return out

    def log_prior(self, theta: F64) -> F64:
        """log π(shared) = log π(shared, z = 0) − m log φ(0): the z_j are standard normal a priori and
        independent of the shared block, so removing their density at 0 leaves the shared block's prior."""
        lp = np.asarray(self.full.log_prior(self.embed(theta)), dtype=np.float64)
        return np.asarray(lp + self.hierarchy.m * 0.5 * math.log(2.0 * math.pi), dtype=np.float64)

    def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
        return np.asarray(self.full.sample_prior(rng, n)[:, list(self.index)], dtype=np.float64)

    def held_coordinates(self, theta: F64) -> F64:
        """The full θ (n, d) at which the full model sees a shared state s (n, d_s) when each registry holds
        its effect in the public intercept-centred coordinate v_j = β_0 + u_j (``local``'s noisy mode): the
        intercept and log σ_u set to 0 and z = 0, so the linear predictor is x·β without β_0 and u_j, the
        part of η a shared move changes at fixed v_j (v_j is an offset)."""
        s = np.array(as_batch(theta, self.d), dtype=np.float64)
        ri = self.hierarchy
        if ri.intercept is not None:
            s[:, self.position(ri.intercept)] = 0.0
        s[:, self.position(ri.log_sd)] = 0.0
        return self.embed(s)

    def record_ratio_bound(self, theta: F64, theta_star: F64) -> F64 | None:
        """The full model's bound of a shared move s → s* with each registry's effect held at fixed v_j =
        β_0 + u_j (:meth:`held_coordinates`; symmetric in s, s* as the full model's bound is). It bounds the
        change of one record's log-likelihood in a registry's term only for a model whose bound holds at
        any offset of the linear predictor (``Model.offset_uniform_bound``, which the privacy charge
        checks); for any model it is a public symmetric function of (s, s*), so a cap on it restricts the
        shared proposal symmetrically and the chain stays exact."""
        return self.full.record_ratio_bound(  # type: ignore[no-any-return]
            self.held_coordinates(theta), self.held_coordinates(theta_star)
        )

    def record_log_likelihood(self, data: Data, theta: F64) -> F64:
        raise ValueError(
            "the shared block has no likelihood of its own: each registry evaluates the full model with its "
            "own random effect (mechanisms.samplers.local)"
        )


__all__ = ["RandomIntercept", "SharedModel"]
