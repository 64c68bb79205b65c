"""``confar privacy audit AUDIT.toml``: membership-inference auditing of a registry's stated guarantee, on the
real decision protocol.

For one analysis (model, sampler kind, reveal mode, parameters) and one threat model (the coordinator, or q
colluding registries that know their own noise), the audit builds two neighbouring datasets for registry 1 —
one record replaced by a worst-case canary the model's schema allows (the record that moves registry 1's
log-ratio most at the audited proposal) — and runs the mechanism ``runs`` times on each: every registry
computes its term with fresh noise from the OS CSPRNG (``SecureRandom.from_os``, as in production) and the
decision runs through the secret-sharing engine in memory (``mechanisms.samplers.HssDecide``: the same
protocol code the daemons run). With ``daemon_runs`` a smaller confirmation run goes through real party
daemons (local consortium, mutual TLS) for the outside observer. It records what the observer sees (the
accept bits, the sum, the blinded product; with colluders, also the sum of their noise), turns it into
membership-inference tests (the log-likelihood-ratio test where the two laws are known — bits, K-step bit
transcripts, the colluders' view of the bit — and threshold tests on the observation otherwise),
Clopper–Pearson-bounds their errors (``mechanisms.privacy.audit``) and compares them with the claim: the
trade-off curve of the events the registry would charge for ``steps`` decisions (``parties/models_bridge.py``
with ``coalition_view``; none for an analysis it refuses, e.g. exact MH with the sign reveal), read by the
PLD accountant or, with ``[audit] accountant = "renyi"``, the Rényi accountant's ε at δ (``claim``).

AUDIT.toml's schema is in :mod:`simulations.privacy_audit.config`. Exit codes: 0 consistent (or no finite
claim, reported as such), 1 VIOLATED, 2 bad file or arguments.

Modules, in dependency order: ``config`` (AUDIT.toml read and checked), ``setup`` (the neighbouring datasets
and the audited proposal), ``observe`` (the decision run in memory or on daemons, the observer's tests),
``claim`` (what registry 1's ledger would charge, read by the PLD or the Rényi accountant), ``report`` (the
JSON document and the plot), ``svt`` (the federated ABCDP audit), ``release`` (the DP warm start's releases,
kind ``warm-start``: the noisy sums the observer sees in reveal mode ``sum``, tested by the Gaussian
likelihood ratio against the release's μ), ``worst`` (a run charged at its worst record, kind
``worst-record``: an independence sampler's decisions in the ``sum`` reveal, the record the run moves most as
the canary, against the ledger's per-run event), ``command`` (the whole audit and the entry point ``run``).
"""

from simulations.privacy_audit.command import HELP, run, run_audit
from simulations.privacy_audit.config import MODELS, AuditConfig, AuditConfigError, load_audit

__all__ = ["HELP", "MODELS", "AuditConfig", "AuditConfigError", "load_audit", "run", "run_audit"]
