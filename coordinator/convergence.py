"""Warnings when a run's posterior is not one to publish yet: each names what was seen, the likely cause and
the experiment key to change (they go to the terminal, ``summary.txt`` and ``provenance.json``).

Thresholds (Vehtari et al. 2021 for R-hat and ESS): max rank-normalised split R-hat > 1.01 when the chains'
means also disagree beyond their Monte Carlo error (below); min bulk or tail ESS < 100; acceptance outside
[0.05, 0.9]; more than half the proposals refused by the public sensitivity cap before any registry was
asked. ArviZ's own warnings raised while computing these are passed on, not hidden.

R-hat alone misfires on many short chains: with 16 chains of a few dozen effective draws each, R-hat - 1
is about 1 / (2 x the effective draws per split chain) under perfect mixing (1.016 for the demo's 16 x 333
draws at a total ESS of ~1,000). So an R-hat above 1.01 is reported only when the chains' means disagree more
than their own Monte Carlo errors explain: T = Σ_j w_j (m_j - m̄)², w_j = ESS_j / s_j² from each chain alone
(its own autocorrelation, not the between-chain variance), is χ²(C - 1) for chains sampling one
distribution; the warning needs p < 0.001 / d (d parameters).
"""

from __future__ import annotations

import warnings as py_warnings
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

RHAT_MAX, ESS_MIN, ACCEPT_LOW, ACCEPT_HIGH, CAPPED_MAX = 1.01, 100.0, 0.05, 0.9, 0.5
DISAGREE_P = 1e-3
RHAT_ESS = 400.0  # the bulk ESS at which split R-hat settles below 1.01 (Vehtari et al. 2021's advice)


def chains_agree_p(x: F64) -> float:
    """The p-value of "every chain samples one distribution" for one parameter's draws ``x`` (chains,
    draws): T = Σ_j w_j (m_j - m̄)² against χ²(C - 1), w_j = ESS_j / s_j² with each chain's own ESS and
    variance. NaN for one chain (nothing to compare); 0 when a chain is constant and the others differ."""
    import arviz as az
    from scipy.stats import chi2

    chains = x.shape[0]
    if chains < 2:
        return float("nan")
    means = x.mean(axis=1)
    var = x.var(axis=1, ddof=1)
    ess = np.array([float(az.ess(x[j][None, :])) for j in range(chains)])
    if np.any(var <= 0) or not np.all(np.isfinite(ess)):
        return 0.0 if np.ptp(means) > 0 else 1.0
    w = ess / var
    centre = float(np.sum(w * means) / np.sum(w))
    t = float(np.sum(w * (means - centre) ** 2))
    return float(chi2.sf(t, chains - 1))


def convergence_warnings(
    draws: F64,
    param_names: tuple[str, ...],
    accepted: int,
    proposed: int,
    asked: int,
    planned: bool = False,
    tuned: bool = False,
    more: Callable[[float], str] | None = None,
) -> list[str]:
    """``draws`` (chains, draws, d) after warm-up; ``accepted`` / ``proposed`` / ``asked`` over the run;
    ``tuned``: the proposal's scale was tuned from the accept bits during the warm-up (no proposal_scale),
    so the advice is a longer adaptation, not another scale; ``more``: under a budget, what a run with a
    factor more effective draws would cost (``coordinator.run.budget_advice``), the advice for too few
    effective draws instead of "more iterations" (which spends more ε)."""
    import arviz as az

    out: list[str] = []
    if draws.size == 0 or draws.shape[1] < 4:
        return [
            f"only {draws.shape[1] if draws.ndim > 1 else 0} draws per chain after warm-up: no diagnostics"
        ]
    with py_warnings.catch_warnings(record=True) as caught:
        py_warnings.simplefilter("always")
        ds = az.convert_to_dataset(draws)
        rhat = np.asarray(az.rhat(ds).to_array().values).ravel()
        bulk = np.asarray(az.ess(ds, method="bulk").to_array().values).ravel()
        tail = np.asarray(az.ess(ds, method="tail").to_array().values).ravel()
    names = list(param_names) or [f"theta[{k}]" for k in range(rhat.size)]
    longer = (
        "a larger [privacy] target_epsilon (more decisions), or fewer, longer chains"
        if planned
        else "more [sampler] iterations (or fewer, longer chains)"
    )
    low = float(np.nanmin(bulk)) if np.isfinite(bulk).any() else 0.0

    def advice(factor: float) -> str:  # ``factor`` times the effective draws: what they cost under a budget
        return longer if more is None else more(max(factor, 1.0))

    over = [k for k in np.argsort(-np.nan_to_num(rhat, nan=np.inf)) if not rhat[k] <= RHAT_MAX]
    p_values = {k: chains_agree_p(draws[:, :, k]) for k in over}
    disagree = [k for k in over if p_values[k] < DISAGREE_P / max(rhat.size, 1)]
    if disagree:
        k = disagree[0]
        out.append(
            f"not converged: R-hat of {names[k]} is {rhat[k]:.3f} > {RHAT_MAX} and its chains' means "
            f"disagree beyond their Monte Carlo error (p = {p_values[k]:.2g}); likely cause: chains too "
            f"short for their mixing; change: {advice(RHAT_ESS / max(low, 1.0))}"
        )
    for what, ess in (("bulk", bulk), ("tail", tail)):
        if np.nanmin(ess) < ESS_MIN:
            k = int(np.nanargmin(ess))
            out.append(
                f"{what} ESS of {names[k]} is {ess[k]:.0f} < {ESS_MIN:.0f}: its Monte Carlo error is above "
                f"{1 / np.sqrt(max(ess[k], 1.0)):.2f} posterior sd; "
                f"change: {advice(ESS_MIN / max(ess[k], 1.0))}"
            )
    rate = accepted / max(asked, 1)
    if asked and not ACCEPT_LOW <= rate <= ACCEPT_HIGH:
        side = "below" if rate < ACCEPT_LOW else "above"
        if tuned:
            cause = (
                "the automatic proposal tuning had too few warm-up iterations to reach its target, or "
                "penalty noise too large; change: more warm-up iterations ([sampler] adapt_stop and warmup "
                "larger, with iterations), or sd / tau smaller"
                if rate < ACCEPT_LOW
                else "proposals too close (the chain barely moves): the automatic proposal tuning had too "
                "few warm-up iterations to reach its target; change: more warm-up iterations ([sampler] "
                "adapt_stop and warmup larger, with iterations)"
            )
        else:
            cause = (
                "proposals too far or penalty noise too large; change: [sampler] proposal_scale smaller, or "
                "sd / tau smaller"
                if rate < ACCEPT_LOW
                else "proposals too close (the chain barely moves); change: [sampler] proposal_scale larger"
            )
        out.append(f"acceptance {rate:.3f} is {side} [{ACCEPT_LOW}, {ACCEPT_HIGH}]; likely cause: {cause}")
    refused = proposed - asked
    if proposed and refused / proposed > CAPPED_MAX:
        steps = "a higher target_accept (smaller tuned steps)" if tuned else "smaller steps (proposal_scale)"
        out.append(
            f"{refused} of {proposed} proposals ({refused / proposed:.0%}) were refused by the public "
            f"sensitivity cap before any registry was asked; change: [sampler] max_sensitivity larger, or "
            f"{steps}"
        )
    out += [f"ArviZ: {w.message}" for w in caught]
    return out
