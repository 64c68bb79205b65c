"""``confar demo``: the main job on an embedded default.

Seven registries each hold Bernoulli outcomes; 16 random-walk Metropolis-Hastings chains on the log-odds
run in lockstep, and every accept/reject decision is made by the sign protocol on secret shares: each
registry adds its own Gamma(1/7, 1) noise share (from a CSPRNG) to its log-likelihood-ratio term, and the
coordinator (here: the in-memory receiver) learns only the accept bits. The same decisions recomputed in
the clear from the same noise must agree bit for bit, and the posterior must match the exact Beta posterior.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy import stats

from hss.protocols import plaintext_decisions, sign_party, sign_receiver
from hss.randomness import SecureRandom
from hss.runtime import run_in_memory
from hss.session import PartyContext, SessionParams, key_setup
from mechanisms.noise import gamma_shares

HELP = "run the main job: a confidential 7-registry MCMC demo"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parties", type=int, default=7)
    p.add_argument("--chains", type=int, default=16)
    p.add_argument("--iterations", type=int, default=600)
    p.add_argument(
        "--seed", type=int, default=2026, help="public seed: data and proposals (never secret noise)"
    )


def run(args: argparse.Namespace) -> int:
    m, chains, iters = args.parties, args.chains, args.iterations
    pub = np.random.default_rng(args.seed)
    sizes = pub.integers(200, 2000, m)
    successes = np.array([pub.binomial(n, 0.3) for n in sizes])
    print(f"{m} registries, records per registry: {sizes.tolist()}, total {int(sizes.sum())}")
    params = SessionParams(m=m, t=(m - 1) // 2, session_id=os.urandom(16))
    rngs = {p: SecureRandom.from_os() for p in range(1, m + 1)}
    keys, tr = run_in_memory({p: key_setup(params, p, rngs[p]) for p in rngs})
    ctxs = {p: PartyContext(params, keys[p]) for p in rngs}
    noise = {p: SecureRandom.from_os() for p in rngs}

    def loglik(j: int, eta: np.ndarray) -> np.ndarray:  # party j's own records, Bernoulli with logit eta
        return successes[j] * eta - sizes[j] * np.logaddexp(0.0, eta)

    def logprior(eta: np.ndarray) -> np.ndarray:  # theta ~ Beta(1, 1)  <=>  eta = logit(theta) ~ Logistic
        return eta - 2 * np.logaddexp(0.0, eta)

    eta = pub.normal(0, 1, chains)
    draws = np.empty((iters, chains))
    agree, accepted, t0 = 0, 0, time.perf_counter()
    for it in range(iters):
        prop = eta + pub.normal(0, 0.08, chains)
        public = logprior(prop) - logprior(eta)
        terms = [loglik(j, prop) - loglik(j, eta) + gamma_shares(noise[j + 1], m, chains) for j in range(m)]
        machines = {p: sign_party(c, terms[p - 1], public, it + 1, rngs[p]) for p, c in ctxs.items()}
        _, tr = run_in_memory(machines)
        acc = sign_receiver(params, tr.to_receiver[-1], chains).accept
        agree += int((acc == plaintext_decisions(terms, public, params.fmt)).sum())
        accepted += int(acc.sum())
        eta = np.where(acc, prop, eta)
        draws[it] = eta
    wall = time.perf_counter() - t0
    n_dec = iters * chains
    theta = 1 / (1 + np.exp(-draws[iters // 3 :]))
    post = stats.beta(1 + successes.sum(), 1 + sizes.sum() - successes.sum())
    print(
        f"{n_dec} confidential decisions in {wall:.1f} s "
        f"({n_dec / wall:.0f}/s, {tr.rounds} rounds each batch)"
    )
    print(f"acceptance rate {accepted / n_dec:.3f}; equal to the plaintext decisions: {agree}/{n_dec}")
    print(
        f"posterior mean of theta: confidential MH {theta.mean():.4f}, "
        f"exact Beta posterior {post.mean():.4f} "
        f"(sd {post.std():.4f})"
    )
    print("The coordinator saw only accept bits; no registry saw another's term.")
    return 0 if agree == n_dec else 1


def main() -> int:
    p = argparse.ArgumentParser(description=HELP)
    add_arguments(p)
    return run(p.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
