"""The formula interface (mechanisms/models/formula.py): the same model as the hand-written built-ins and
the Poisson rate plug-in (log-likelihoods and per-record bounds equal), the bound never below a brute force
over the schema's corners and interior points, one formula one model (compared as objects, across a JSON
round trip), and every refusal naming what was wrong."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from mechanisms.models.base import load_model
from mechanisms.models.formula import FormulaModel, corner_records
from mechanisms.models.linear import LinearRegression
from mechanisms.models.logistic import BayesLogistic
from mechanisms.models.random_effects import LogisticRandomIntercept
from mechanisms.models.weibull import WeibullRegression

PLUGINS = Path(__file__).resolve().parents[3] / "examples" / "plugins"
X2 = {"x1": [-3, 3], "x2": [-3, 3]}


def _pairs(model: FormulaModel, rng: np.random.Generator, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Parameter pairs at several scales (small steps near the prior's centre, and large ones)."""
    th = model.sample_prior(rng, n) * rng.choice([0.01, 0.1, 0.5], size=(n, 1))
    ts = th + rng.normal(size=th.shape) * rng.choice([0.001, 0.01, 0.1], size=(n, 1))
    return th, ts


def _records(model: FormulaModel, rng: np.random.Generator, n: int = 3000) -> dict[str, np.ndarray]:
    """Every corner of the schema plus random records inside it."""
    corners = corner_records(model)
    inside = {}
    for c in model.schema:
        if c.values is not None:
            inside[c.name] = rng.choice(np.asarray(c.values), n)
        elif c.integer:
            inside[c.name] = rng.integers(int(c.lower), int(c.upper) + 1, n).astype(np.float64)
        else:
            inside[c.name] = rng.uniform(c.lower, c.upper, n)
    return {k: np.concatenate([corners[k], inside[k]]) for k in corners}


STUDY_COLUMNS = {
    "age": [20, 90],
    "sex": {"values": [0, 1]},
    "creatinine": [0.4, 10],
    "person_years": [0.2, 10],
    "deaths": {"lower": 0, "upper": 8, "integer": True},
    "registry": {"values": [1, 2, 3, 4]},
    "time": [0.01, 20],
    "event": {"values": [0, 1]},
    "y": {"values": [0, 1]},
    "level": [-50, 50],
}

CASES = [
    dict(formula="y ~ age + C(sex) + age:creatinine", family="bernoulli"),
    dict(formula="y ~ age * creatinine + (1 | registry)", family="bernoulli"),
    dict(formula="deaths ~ age + sex + creatinine", family="poisson", offset="person_years"),
    dict(formula="deaths ~ 0 + C(sex) + creatinine + (1 | registry)", family="poisson"),
    dict(formula="level ~ age + C(sex):creatinine", family="gaussian", sigma=3.0),
    dict(formula="time ~ creatinine + C(sex) + (1 | registry)", family="weibull", event="event"),
]


@pytest.mark.parametrize("case", CASES, ids=[c["formula"] for c in CASES])
def test_bound_holds_against_brute_force(case: dict) -> None:
    """sup over records of |Δ log p| (corners and 3,000 interior records) <= the bound, for 40 pairs."""
    model = FormulaModel(columns=STUDY_COLUMNS, **case)
    rng = np.random.default_rng(7)
    data = _records(model, rng)
    th, ts = _pairs(model, rng)
    brute = np.abs(model.record_log_likelihood(data, ts) - model.record_log_likelihood(data, th)).max(axis=1)
    bound = model.record_ratio_bound(th, ts)
    assert bound is not None and np.all(np.isfinite(brute))
    assert np.all(brute <= bound * (1 + 1e-9) + 1e-12), np.max(brute / bound)
    if model.family in ("bernoulli", "gaussian"):  # exact up to the sup of a product <= product of sups
        assert np.median(brute / bound) > 0.5


def test_same_model_as_the_builtins() -> None:
    """A formula over the built-ins' columns is their model (their prior: autoscale = false): equal
    log-likelihoods, priors and bounds."""
    rng = np.random.default_rng(3)
    pairs = [
        (
            BayesLogistic(p=2, x_bound=3.0),
            FormulaModel("y ~ x1 + x2", "bernoulli", X2 | {"y": {"values": [0, 1]}}, autoscale=False),
        ),
        (
            LinearRegression(p=2, sigma=1.5, x_bound=3.0, y_bound=20.0),
            FormulaModel(
                "y ~ x1 + x2", "gaussian", X2 | {"y": [-20, 20]}, prior_sd=10.0, sigma=1.5, autoscale=False
            ),
        ),
        (
            WeibullRegression(p=2, x_bound=3.0, t_min=0.01, t_max=20.0),
            FormulaModel(
                "time ~ x1 + x2",
                "weibull",
                X2 | {"time": [0.01, 20], "event": {"values": [0, 1]}},
                prior_sd=2.0,
                event="event",
                autoscale=False,
            ),
        ),
        (
            LogisticRandomIntercept(p=2, registries=3, x_bound=3.0),
            FormulaModel(
                "y ~ x1 + x2 + (1 | registry)",
                "bernoulli",
                X2 | {"y": {"values": [0, 1]}, "registry": {"values": [1, 2, 3]}},
                autoscale=False,
            ),
        ),
    ]
    for builtin, formula in pairs:
        assert formula.d == builtin.d
        data = builtin.synthetic_data(rng, (300, 200, 100))
        th = builtin.sample_prior(rng, 6) * 0.2
        ts = th + 0.01 * rng.normal(size=th.shape)
        for reg in data:
            np.testing.assert_allclose(
                formula.record_log_likelihood(reg, th),
                builtin.record_log_likelihood(reg, th),
                rtol=1e-12,
                atol=1e-12,
            )
        np.testing.assert_allclose(formula.log_prior(th), builtin.log_prior(th), rtol=1e-12)
        fb, bb = formula.record_ratio_bound(th, ts), builtin.record_ratio_bound(th, ts)
        assert fb is not None and bb is not None
        if isinstance(builtin, LogisticRandomIntercept):  # the built-in adds sup|Δβ·z| and max|Δu_j|; the
            assert np.all(fb <= bb * (1 + 1e-12))  # formula's joint extent is exact, never larger
        elif isinstance(builtin, WeibullRegression):  # the built-in also takes the sup jointly over records
            assert np.all(bb <= fb * (1 + 1e-12))  # (weibull_bound); the formula keeps the term-by-term bound
        else:
            np.testing.assert_allclose(fb, bb, rtol=1e-9)
        assert {c.name: (c.lower, c.upper) for c in formula.schema} == {
            c.name: (c.lower, c.upper) for c in builtin.schema
        }


def test_same_model_as_the_poisson_rate_plugin() -> None:
    """The study's formula and the hand-written plug-in (examples/plugins/poisson_rate.py) agree exactly."""
    sys.path.insert(0, str(PLUGINS))
    try:
        from poisson_rate import PoissonRate  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(PLUGINS))
    from simulations.poisson_study import registries

    cols = {k: STUDY_COLUMNS[k] for k in ("age", "sex", "creatinine", "person_years", "deaths")}
    f = FormulaModel("deaths ~ age + sex + creatinine", "poisson", cols, offset="person_years")
    p = PoissonRate()
    rng = np.random.default_rng(5)
    th = np.array([-7.0, 0.05, 0.3, 0.15]) + 0.01 * rng.normal(size=(8, 4))
    ts = th + 0.002 * rng.normal(size=th.shape)
    for reg in registries():
        np.testing.assert_array_equal(f.record_log_likelihood(reg, th), p.record_log_likelihood(reg, th))
    np.testing.assert_allclose(f.record_ratio_bound(th, ts), p.record_ratio_bound(th, ts), rtol=1e-11)
    np.testing.assert_allclose(f.log_prior(th), p.log_prior(th), rtol=1e-12)
    assert f.param_names == p.param_names


def test_one_formula_one_model() -> None:
    """The coordinator's model and a daemon's (rebuilt from the wire's JSON args) are equal objects, with
    equal hashes; another formula, family or bound is another model."""
    args = dict(
        formula="deaths ~ age + C(sex) + (1 | registry)",
        family="poisson",
        columns=STUDY_COLUMNS,
        offset="person_years",
    )
    here = load_model("formula", args)
    wire = json.loads(json.dumps(here.config()["args"]))
    there = load_model(here.config()["model"], wire)
    assert here == there and hash(here) == hash(there)
    assert load_model("formula", json.loads(json.dumps(args))) == here  # the TOML form and the canonical form
    assert load_model("formula", args | {"formula": "deaths ~ age + sex + (1 | registry)"}) != here
    assert load_model("formula", args | {"columns": STUDY_COLUMNS | {"age": [20, 95]}}) != here


def test_categorical_levels_fixed_by_the_declared_values() -> None:
    """A registry whose records hold only some of a categorical column's values gets the same design columns
    (the levels come from the declaration, not from the records)."""
    cols = {"y": {"values": [0, 1]}, "grade": {"values": [1, 2, 3]}, "age": [20, 90]}
    m = FormulaModel("y ~ C(grade) + age", "bernoulli", cols)
    assert m.param_names == ("Intercept", "grade[2]", "grade[3]", "age")
    data = {"y": np.array([0.0, 1.0]), "grade": np.array([1.0, 1.0]), "age": np.array([30.0, 40.0])}
    x = m.design(data)
    np.testing.assert_array_equal(x, [[1, 0, 0, 30], [1, 0, 0, 40]])


@pytest.mark.parametrize(
    ("formula", "names"),
    [
        ("y ~ age + C(sex) + age:creatinine", ("Intercept", "age", "sex[1]", "age.creatinine")),
        ("y ~ age * C(sex)", ("Intercept", "age", "sex[1]", "age.sex[1]")),
        ("y ~ 0 + C(sex) + creatinine", ("sex[0]", "sex[1]", "creatinine")),  # no intercept: every level
        ("y ~ C(sex):creatinine", ("Intercept", "sex[0].creatinine", "sex[1].creatinine")),
        ("y ~ C(half) + (1 | registry)", ("Intercept", "half[1e-05]", "half[1.5]", "registry_log_sd")),
        ("y ~ age + C( sex )", ("Intercept", "age", "sex[1]")),
    ],
)
def test_parameter_names_are_readable_and_output_safe(formula: str, names: tuple[str, ...]) -> None:
    """A category level is ``column[level]``, an interaction ``a.b`` (formulaic's ``C(sex)[T.1.0]`` and
    ``age:creatinine`` are refused by the output writer's rule, after a whole run): every name passes the
    rule the outputs apply (coordinator.outputs.result.name_problem), the plain names are as they were."""
    from coordinator.outputs.result import name_problem

    cols = STUDY_COLUMNS | {"half": {"values": [-0.5, 1e-5, 1.5]}}
    m = FormulaModel(formula, "bernoulli", cols)
    assert m.param_names[: len(names)] == names
    assert all(name_problem(n) is None for n in m.param_names), m.param_names
    if "registry" in formula:
        assert m.param_names[len(names) :] == ("registry_z1", "registry_z2", "registry_z3", "registry_z4")
    assert name_problem("C(sex)[T.1.0]") is not None and name_problem("age:creatinine") is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(formula="y ~ np.log(age)"), "transform confar cannot bound"),
        (dict(formula="y ~ I(age ** 2)"), "transform confar cannot bound"),
        (dict(formula="y ~ weight"), "column 'weight' has no declared bounds: add columns.weight"),
        (dict(formula="y ~ agee"), "'agee' has no declared bounds: did you mean 'age'? (or add columns.agee"),
        (dict(formula="deth ~ age", family="poisson"), "outcome: column 'deth' has no declared bounds: did"),
        (dict(formula="y ~ age + (1 | registri)"), "(1 | registri): did you mean 'registry'? (or add"),
        (dict(formula="y ~ C(age)"), "C(age) needs the column's values declared"),
        (dict(formula="y ~ age + (age | registry)"), "only a random intercept"),
        (dict(formula="y ~ (1 | registry) + (1 | sex)"), "at most one random intercept"),
        (dict(formula="y age"), "formula must be 'outcome ~ terms'"),
        (dict(formula="log(y) ~ age"), "the outcome must be one column name"),
        (dict(formula="y ~ age", family="binomial"), "family must be one of"),
        (dict(formula="y ~ age", sigma=1.0), "sigma (the known noise sd)"),
        (dict(formula="y ~ age", offset="person_years"), "offset (an exposure column)"),
        (dict(formula="level ~ age", family="gaussian"), "sigma (the known noise sd)"),
        (dict(formula="age ~ sex", family="bernoulli"), "a bernoulli outcome takes the values 0 and 1"),
        (dict(formula="level ~ age", family="poisson"), "a poisson outcome is a count"),
        (dict(formula="level ~ age", family="weibull", event="event"), "a weibull outcome is a time"),
        (dict(formula="y ~ age", columns={"y": [0, 1], "age": [90, 20]}), "need finite public bounds"),
        (dict(formula="y ~ age", columns={"y": [0, 1], "age": "old"}), "give [lower, upper]"),
        (dict(formula="y ~ age", columns={"y": [0, 1], "age": {"lo": 1}}), "unknown keys ['lo']"),
        (dict(formula="y ~ age", prior_sd=0), "prior_sd must be a number > 0"),
        (
            dict(
                formula="y ~ registry_log_sd + (1 | registry)",
                columns=STUDY_COLUMNS | {"registry_log_sd": [0, 1]},
            ),
            "parameters named twice: ['registry_log_sd']",
        ),
    ],
)
def test_refusals_say_what_was_wrong(args: dict, message: str) -> None:
    full = {"family": "bernoulli", "columns": STUDY_COLUMNS} | args
    with pytest.raises(ValueError, match=pytest.importorskip("re").escape(message)):
        FormulaModel(**full)


def test_too_many_corners_refused() -> None:
    cols = {f"x{k}": [-1, 1] for k in range(17)} | {"y": {"values": [0, 1]}}
    with pytest.raises(ValueError, match="corners of the declared box"):
        FormulaModel("y ~ " + " + ".join(f"x{k}" for k in range(17)), "bernoulli", cols)


def test_records_outside_the_declared_bounds_are_refused() -> None:
    m = FormulaModel("deaths ~ age", "poisson", STUDY_COLUMNS)
    with pytest.raises(
        ValueError, match=r"column 'age': values outside the declared public bounds \[20, 90\] in row 2"
    ):
        m.check_data({"age": [30.0, 95.0], "deaths": [0.0, 1.0]})
    with pytest.raises(ValueError, match="column 'deaths': non-integer values in row 1"):
        m.check_data({"age": [30.0, 35.0], "deaths": [0.5, 1.0]})


def test_corner_records_cover_the_box() -> None:
    m = FormulaModel("y ~ age + C(sex)", "bernoulli", STUDY_COLUMNS)
    c = corner_records(m)
    got = set(zip(c["age"], c["sex"], c["y"], strict=True))
    assert got == set(itertools.product([20.0, 90.0], [0.0, 1.0], [0.0, 1.0]))


def test_the_design_cache_is_per_model_and_read_only_records() -> None:
    """Two formulas over the same checked records each get their own design (a shared cache keyed by the
    records alone once gave the second formula the first one's, and a bound below the change); writeable
    records are never cached (an in-place change cannot leave a stale design); an entry goes with its
    records."""
    from mechanisms.models import formula as fm

    cols = {"y": [-5, 5], "x": [0, 0.01], "z": [-100, 100]}
    m1 = FormulaModel("y ~ x + z", "gaussian", cols, sigma=1.0)
    m2 = FormulaModel("y ~ x + x:z", "gaussian", cols, sigma=1.0)
    raw = {"y": np.array([0.0]), "x": np.array([0.01]), "z": np.array([100.0])}
    checked = m1.check_data(raw)
    assert not any(a.flags.writeable for a in checked.values())
    np.testing.assert_array_equal(m1.design(checked), [[1.0, 0.01, 100.0]])
    np.testing.assert_array_equal(m2.design(checked), [[1.0, 0.01, 1.0]])
    th, ts = np.zeros((1, 3)), np.array([[0.0, 0.0, 1.0]])
    change = np.abs(m2.record_log_likelihood(checked, ts) - m2.record_log_likelihood(checked, th))
    assert change.max() <= m2.record_ratio_bound(th, ts)[0]
    before = m1.design(raw)
    raw["z"][0] = -100.0  # writeable: recomputed, never stale
    assert m1.design(raw)[0, 2] == -100.0 and before[0, 2] == 100.0
    del checked
    import gc

    gc.collect()
    m1.design({"y": np.zeros(1), "x": np.zeros(1), "z": np.zeros(1)})  # a lookup purges dead entries
    assert all(all(r() is not None for r in refs) for refs, _ in fm._CACHE.entries.values())


def test_declared_values_are_the_levels_and_nothing_else() -> None:
    cols = {"y": [-5, 5], "g": {"lower": 0, "upper": 3, "values": [1, 2]}}
    m = FormulaModel("y ~ C(g)", "gaussian", cols, sigma=1.0)
    assert m.param_names == ("Intercept", "g[2]")  # not levels 0 and 3 of the bounds
    with pytest.raises(ValueError, match=r"column 'g': values outside the declared values \[1.0, 2.0\]"):
        m.design({"y": np.zeros(2), "g": np.array([1.0, 3.0])})


def test_an_overflowing_bound_is_infinite_not_capped() -> None:
    """A bound whose exponential overflows is +inf (no finite bound claimed), not a capped exponent times a
    tiny step (which once gave 1e4 where the true sup was ~5e25)."""
    m = FormulaModel("y ~ x", "poisson", {"y": {"lower": 0, "upper": 10, "integer": True}, "x": [0, 1]})
    assert m.record_ratio_bound([[0.0, 750.0]], [[1e-300, 750.0]])[0] == np.inf
    assert m.record_ratio_bound([[0.0, 750.0]], [[0.0, 750.0]])[0] == 0.0  # no step, no change
    w = FormulaModel("t ~ x", "weibull", {"t": [0.01, 20], "x": [0, 1], "e": {"values": [0, 1]}}, event="e")
    assert w.record_ratio_bound([[3.0, -300.0, 0.0]], [[3.0, -300.0, 1e-9]])[0] == np.inf


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (dict(columns=[["y", 0, 1, False, [0.0, 1.0]], ["y", 0, 1, False, None]]), "declared more than once"),
        (dict(columns={"y": {"values": "ab"}}), "columns.y.values must be a list of numbers"),
        (dict(formula="y ~ x +"), "formula 'y ~ x +': "),
        (
            dict(
                formula="y ~ (1 | g)",
                columns={"y": {"values": [0, 1]}, "g": {"lower": 0.5, "upper": 3.5, "integer": True}},
            ),
            "declare values, or integer = true with integer bounds",
        ),
    ],
)
def test_more_refusals(args: dict, message: str) -> None:
    full = {
        "formula": "y ~ 1",
        "family": "bernoulli",
        "columns": {"y": {"values": [0, 1]}, "x": [0, 1]},
    } | args
    with pytest.raises(ValueError, match=pytest.importorskip("re").escape(message)) as info:
        FormulaModel(**full)
    assert "\x1b[" not in str(info.value)  # formulaic's terminal colours are not in the message


def test_formula_and_family_are_required() -> None:
    with pytest.raises(ValueError, match="bad arguments"):
        load_model("formula", {"columns": {"y": [0, 1]}})


LABELLED = {
    "died": {"values": [0, 1]},
    "age": [20, 90],
    "sex": {"values": ["F", "M"]},
    "site": {"values": ["north", "south-2", "east_1"]},
    "registry": {"values": ["DK", "SE"]},
}


def test_text_labels_are_codes_with_names() -> None:
    """Issue 40 item 2: a category stored as text ('F', 'M'). The levels are the declared labels in the
    declared order (the first is the reference), held as codes 0, 1, ...; the parameters are named by the
    labels; the canonical form round-trips through config() and JSON to an equal model."""
    m = FormulaModel("died ~ age * C(sex) + C(site) + (1 | registry)", "bernoulli", LABELLED)
    assert m.param_names == (
        "Intercept", "age", "sex[M]", "site[south-2]", "site[east_1]", "age.sex[M]",
        "registry_log_sd", "registry_z[DK]", "registry_z[SE]",
    )  # fmt: skip
    sex = next(c for c in m.schema if c.name == "sex")
    assert (sex.values, sex.labels, sex.integer, sex.lower, sex.upper) == ((0.0, 1.0), ("F", "M"), True, 0, 1)
    site = dict((c[0], c) for c in m.columns)["site"]
    assert site == ("site", 0.0, 2.0, True, ("north", "south-2", "east_1"))  # the canonical 5-tuple
    wire = json.loads(json.dumps(m.config()["args"]))
    assert load_model("formula", wire) == m and hash(load_model("formula", wire)) == hash(m)
    other = LABELLED | {"sex": {"values": ["M", "F"]}}  # another reference level: another model
    assert FormulaModel("died ~ age * C(sex) + C(site) + (1 | registry)", "bernoulli", other) != m
    # records: text labels become their codes (numbers are taken as codes: a registry's records once read)
    raw = {
        "died": [0, 1, 1],
        "age": [30.0, 40.0, 50.0],
        "sex": ["M", "F", "M"],
        "site": ["east_1", "north", "south-2"],
        "registry": ["SE", "DK", "SE"],
    }
    got = m.check_data(raw)
    np.testing.assert_array_equal(got["sex"], [1.0, 0.0, 1.0])
    np.testing.assert_array_equal(got["site"], [2.0, 0.0, 1.0])
    np.testing.assert_array_equal(m.check_data(got)["sex"], got["sex"])
    x = m.design(got)  # Intercept, age, sex[M], site[south-2], site[east_1], age.sex[M]
    np.testing.assert_array_equal(x[0], [1, 30, 1, 0, 1, 30])
    th = m.sample_prior(np.random.default_rng(1), 4)
    assert np.isfinite(m.record_log_likelihood(got, th)).all()
    undeclared = r"column 'sex': labels outside the declared labels \['F', 'M'\] in row 2 \(e.g. 'f'\)"
    with pytest.raises(ValueError, match=undeclared):  # in memory: as for text that is not a number
        m.check_data(raw | {"sex": ["M", "f", "M"]})


FM = ["F", "M"]


@pytest.mark.parametrize(
    ("sex", "formula", "message"),
    [
        ({"values": ["F", 1]}, "y ~ C(sex)", "columns.sex.values: give numbers or text labels, not both"),
        ({"values": ["F", "M f"]}, "y ~ C(sex)", "'M f' is not a usable label (letters, digits, _ . - only"),
        ({"values": ["F", "F"]}, "y ~ C(sex)", "columns.sex.values: labels ['F'] given more than once"),
        ({"values": FM, "upper": 3}, "y ~ C(sex)", "columns.sex: text labels take no ['upper']"),
        ({"values": FM}, "y ~ sex", "column 'sex' holds text labels ['F', 'M']: write C(sex)"),
        ({"values": FM}, "sex ~ 1", "the outcome: column 'sex' holds text labels"),
        (["sex", 0, 2, True, FM], "y ~ C(sex)", "the canonical form of labels ['F', 'M'] is"),
    ],
)
def test_text_label_refusals(sex: object, formula: str, message: str) -> None:
    full = {"y": {"values": [0, 1]}, "sex": sex}
    with pytest.raises(ValueError, match=pytest.importorskip("re").escape(message)):
        FormulaModel(formula, "bernoulli", full)


def test_a_column_of_labels_holds_their_codes() -> None:
    from mechanisms.models.base import Column

    Column("sex", 0.0, 1.0, integer=True, values=(0.0, 1.0), labels=("F", "M"))
    for kw, message in (
        (dict(values=(1.0, 2.0), labels=("F", "M")), "need values = their codes [0.0, 1.0]"),
        (dict(values=(0.0, 1.0), labels=("F", "F")), "a label given twice"),
        (dict(values=(0.0, 1.0), labels=("F", "M/2")), "'M/2' is not a usable label"),
    ):
        with pytest.raises(ValueError, match=pytest.importorskip("re").escape(message)):
            Column("sex", 0.0, 1.0, integer=True, **kw)  # type: ignore[arg-type]


def test_likelihood_coordinates_of_a_random_intercept() -> None:
    """u = σ z is what the likelihood sees (the reference's surrogate is fitted in it): a θ rebuilt from ψ
    has the same likelihood and ψ round-trips, for the formula model and the built-in
    logistic-random-intercept; without a random intercept ψ is θ itself."""
    rng = np.random.default_rng(1)
    n = 300
    age, reg = rng.uniform(20, 90, n), rng.integers(1, 5, n).astype(np.float64)
    y = (rng.random(n) < 0.3).astype(np.float64)
    columns = {"age": [20, 90], "registry": {"values": [1, 2, 3, 4]}, "y": {"values": [0, 1]}}
    formula = FormulaModel("y ~ age + (1 | registry)", "bernoulli", columns)
    builtin = LogisticRandomIntercept(p=1, registries=4)
    cases = [
        (formula, {"age": age, "registry": reg, "y": y}),
        (builtin, {"x1": (age - 55) / 20, "registry": reg, "y": y}),
    ]
    for model, records in cases:
        th = model.sample_prior(rng, 6)
        psi = model.likelihood_coordinates(th)
        assert psi.shape == (6, model.d - 1)
        np.testing.assert_allclose(psi[:, -4:], np.exp(th[:, -5:-4]) * th[:, -4:])  # u = σ z
        back = model.from_likelihood_coordinates(psi)
        np.testing.assert_allclose(model.likelihood_coordinates(back), psi, rtol=1e-12)
        np.testing.assert_allclose(
            model.log_likelihood(records, back), model.log_likelihood(records, th), rtol=1e-10
        )
    plain = FormulaModel("y ~ age", "bernoulli", columns)
    th = plain.sample_prior(rng, 3)
    np.testing.assert_array_equal(plain.likelihood_coordinates(th), th)
    np.testing.assert_array_equal(plain.from_likelihood_coordinates(th), th)
