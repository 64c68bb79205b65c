"""Model plug-ins: schema checks, the loader, and the public bounds the penalty relies on."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.models import Column, SchemaError, load_model, validate_columns
from mechanisms.models.beta_bernoulli import BetaBernoulli
from mechanisms.models.linear import LinearRegression
from mechanisms.models.logistic import REGISTRY_SIZES, BayesLogistic, synthetic_registries


def test_schema_refusals_name_column_and_rows() -> None:
    schema = (Column("x1", -1, 1), Column("y", 0, 1, integer=True, values=(0, 1)))
    with pytest.raises(SchemaError, match=r"missing column.*'y'"):
        validate_columns({"x1": ["0.5"]}, schema)
    with pytest.raises(SchemaError, match=r"column 'x1': non-numeric values in row 2 \(e\.g\. 'abc'\)"):
        validate_columns({"x1": ["0.5", "abc"], "y": ["1", "0"]}, schema)
    with pytest.raises(SchemaError, match=r"column 'x1': NaN or infinite values in rows 1, 3"):
        validate_columns({"x1": ["nan", "0", "inf"], "y": ["1", "0", "1"]}, schema)
    with pytest.raises(
        SchemaError, match=r"column 'x1': values outside the declared public bounds \[-1, 1\] in row 2"
    ):
        validate_columns({"x1": np.array([0.5, 1.5]), "y": np.array([1.0, 0.0])}, schema)
    with pytest.raises(SchemaError, match=r"column 'y': non-integer values in row 1"):
        validate_columns({"x1": np.array([0.5]), "y": np.array([0.5])}, schema)
    with pytest.raises(SchemaError, match=r"column 'y': values outside the allowed set"):
        validate_columns({"x1": np.array([0.5]), "y": np.array([2.0])}, schema)
    out = validate_columns({"x1": ["0.25"], "y": ["1"], "extra": ["z"]}, schema)
    assert out["x1"][0] == 0.25 and "extra" not in out


def test_load_model_by_name_and_reference() -> None:
    assert isinstance(load_model("beta-bernoulli"), BetaBernoulli)
    m = load_model("mechanisms.models.logistic:BayesLogistic", {"p": 2})
    assert isinstance(m, BayesLogistic) and m.d == 3
    assert m.config()["args"]["p"] == 2
    with pytest.raises(ValueError, match=r"not a mechanisms\.models\.Model"):
        load_model("numpy:ndarray")
    with pytest.raises(ValueError, match="unknown model"):
        load_model("no-such-model")
    with pytest.raises(ValueError, match="bad arguments"):
        load_model("beta-bernoulli", {"nope": 1})


@pytest.mark.parametrize(
    "model",
    [BetaBernoulli(), BayesLogistic(p=3, x_bound=2.0), LinearRegression(p=2, x_bound=2.0, y_bound=10.0)],
    ids=lambda mdl: mdl.name,
)
def test_likelihood_vectorised_and_bounds_hold(model) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    n = 300
    cols = {}
    for c in model.schema:
        if c.values is not None:
            cols[c.name] = rng.choice(np.asarray(c.values, dtype=float), n)
        else:
            cols[c.name] = rng.uniform(c.lower, c.upper, n)  # the whole declared range: worst cases
    data = model.check_data(cols)
    th = model.sample_prior(rng, 20)
    ts = model.sample_prior(rng, 20)
    if model.name == "beta-bernoulli":
        th, ts = np.clip(th, 0.02, 0.98), np.clip(ts, 0.02, 0.98)
    rec = model.record_log_likelihood(data, th)
    assert rec.shape == (20, n)
    np.testing.assert_allclose(model.log_likelihood(data, th), rec.sum(axis=1), rtol=1e-9, atol=1e-8)
    per = np.abs(model.record_log_likelihood(data, ts) - rec)
    bound = model.record_ratio_bound(th, ts)
    assert bound is not None and (per <= bound[:, None] + 1e-9).all()
    np.testing.assert_allclose(bound, model.record_ratio_bound(ts, th))  # symmetric
    assert (model.log_likelihood(data, th) <= model.max_log_likelihood(data) + 1e-9).all()
    assert np.isfinite(model.log_prior(th)).all()


def test_synthetic_registries_differ_in_size_and_case_mix() -> None:
    model = BayesLogistic(p=4)
    regs = synthetic_registries(np.random.default_rng(0), model)
    assert len(regs) == 7 and [len(r["y"]) for r in regs] == list(REGISTRY_SIZES)
    prevalence = [r["y"].mean() for r in regs]
    assert max(prevalence) - min(prevalence) > 0.05
    for r in regs:
        model.check_data(r)  # within the public bounds


def test_a_non_numeric_value_does_not_hide_the_column_s_other_problems() -> None:
    """One non-numeric value used to stop the column's checks: row 3's bound violation went unreported."""
    schema = (Column("x", -1.0, 1.0), Column("y", 0.0, 1.0, integer=True, values=(0.0, 1.0)))
    raw = {"x": np.array(["0.5", "abc", "7.0"], dtype=object), "y": np.array(["1", "0", "1"], dtype=object)}
    with pytest.raises(SchemaError) as ei:
        validate_columns(raw, schema)
    msg = str(ei.value)
    assert "column 'x': non-numeric values in row 2" in msg
    assert "column 'x': values outside the declared public bounds [-1, 1] in row 3" in msg


def test_a_misspelled_class_says_no_such_class() -> None:
    want = r"has no class 'BetaBernouli' \(its Model subclasses: BetaBernoulli\)"
    with pytest.raises(ValueError, match=want):
        load_model("mechanisms.models.beta_bernoulli:BetaBernouli")
    with pytest.raises(ValueError, match=r"is not a mechanisms\.models\.Model subclass"):
        load_model("mechanisms.models.base:Column")


def test_an_mh_only_model_needs_no_max_log_likelihood() -> None:
    """Issue 24 item 7: max_log_likelihood is optional; rejection sampling refuses a model without it,
    naming the method (it used to be abstract, so an MH-only plug-in had to implement it)."""
    from dataclasses import dataclass

    from mechanisms.models.base import F64, Column, Data, Model
    from mechanisms.samplers import BernoulliRule, LocalParties
    from mechanisms.samplers.requests import DecisionRequest

    @dataclass(frozen=True)
    class Mean(Model):
        name = "mean-only"

        @property
        def param_names(self) -> tuple[str, ...]:
            return ("mu",)

        @property
        def schema(self) -> tuple[Column, ...]:
            return (Column("x", -5.0, 5.0),)

        def log_prior(self, theta: F64) -> F64:
            return -0.5 * np.asarray(theta, dtype=np.float64).reshape(-1, 1)[:, 0] ** 2

        def sample_prior(self, rng: np.random.Generator, n: int) -> F64:
            return rng.normal(size=(n, 1))

        def record_log_likelihood(self, data: Data, theta: F64) -> F64:
            return -0.5 * (data["x"][None, :] - np.asarray(theta).reshape(-1, 1)) ** 2

    model = Mean()
    assert model.max_log_likelihood({"x": np.zeros(3)}) is None
    parties = LocalParties(model, [{"x": np.zeros(3)}], BernoulliRule(np.random.default_rng(0)))
    req = DecisionRequest("rejection", np.zeros((2, 1)), np.zeros(2))
    with pytest.raises(ValueError, match="has no max_log_likelihood"):
        parties(req)
