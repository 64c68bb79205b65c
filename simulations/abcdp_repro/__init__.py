"""Reproductions of the ABCDP paper's experiments (single-owner ABCDP), each writing a figure and a table.

Usage (from the repository root)::

    python -m simulations.abcdp_repro flip  --out DIR [--n-rho 100 --mc-draws 20000]
    python -m simulations.abcdp_repro toy   --out DIR [--runs 60 --candidates 10000 --n-obs 5000]
    python -m simulations.abcdp_repro covid --out DIR [--candidates 50000 --c 10]
    python -m simulations.abcdp_repro tb    --out DIR [--records 100 1000 --candidates 1000 --pseudo 5]
    python -m simulations.abcdp_repro federated --out DIR [--parties 7 --reps 10 --full-grid]

Each command writes ``<name>.png``, ``<name>.csv`` and ``<name>.md`` into DIR and prints the table. The
defaults are the paper's sizes where we know them (toy: 60 runs × 10,000 candidates of 5,000 points takes
roughly half an hour on one core); pass smaller sizes while developing.

What is reproduced (Park, Vinaroz, Jitkrittum, "ABCDP", Entropy 23 (2021) 961):

* ``flip``: the flip probability G_b(a) for ρ ~ U[0, 1], ε_abc = 0.2, N ∈ {10, 100, 1000},
  c ∈ {10, 100, 1000}, ε_total from 0.01 to 100, with Δ = 2/N (the paper's value; the reference script
  uses 1/N) and b = 2cΔ/ε_total (RESAMPLE, as in the reference figure; ``--no-resample`` for (c+1)Δ/ε),
  next to a Monte Carlo estimate of the same probability from Laplace draws.
* ``toy``: MAE of the posterior mean vs ε_abc for c ∈ {10, 100, 1000}, ε_total ∈ {0.5, 1, 10, ∞}, with and
  without RESAMPLE, RFF-MMD (100 features) on the mixture-of-uniforms model. The kernel bandwidth is the
  paper's public constant 0.6 (not derived from any data) or, with ``--bandwidth median``, the median
  heuristic on prior-predictive simulations. One set of simulations per run serves the whole grid.
  The cells in ``abcdp_toy_reference.json`` (the published code run over independent candidate pools) are
  compared with ours: both figures, their standard errors and z = (ours − ref) / √(se_ours² + se_ref²),
  in ``toy.csv``, in ``toy_reference.csv`` and in the figure's last panel.
* ``covid``: posterior of the cubic growth model for the Dutch counts, non-private and private.
* ``federated``: the toy grid (N = 5000) run by the single-owner sampler and by federated ABCDP over m
  parties (the in-memory secret-shared protocol of ``hss.svt``), on the same public candidates with
  independent noise; MAE distributions compared with a two-sample KS test per setting. Default grid
  c = 10, ε_abc ∈ {0.1, 0.2}, ε_total ∈ {1, ∞}, both RESAMPLE modes, 10 reps; ``--full-grid`` takes the
  paper's grid from ``abcdp_toy.json`` (long).
* ``tb``: the tuberculosis model: the posterior error (MAE over (R1, t1, R2, β)) with n = 100 vs 1000
  private records at ε_total = 1 (each record a data set simulated at the reference parameters, as in
  the paper), and a non-private rejection-ABC posterior for the San Francisco data.

Randomness: a public generator (simulations, candidates, random features) spawned from ``--seed``, and a
separate noise generator for the privacy noise, seeded from the OS CSPRNG by default (DP noise never comes
from the public seed); ``--seeded-noise`` spawns it from ``--seed`` too, for an exactly repeatable
simulation that gives no privacy. The library functions take ``secure_noise`` explicitly.
"""
