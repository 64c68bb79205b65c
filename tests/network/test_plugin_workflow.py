"""A consortium's own model (issue 14) over daemon processes (``simulations.launcher``): a registry whose
``[data]`` names the session's model has one place for the model's public arguments, and the example's
plug-in runs ``--simulate`` with per-registry files, the daemons importing it from ``[allow] model_path``.
The coordinator's and the registry's checks without daemons are tests/coordinator/test_plugin_workflow.py
and tests/parties/test_plugin_workflow.py."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
from coordinator.cli import main as confar
from mechanisms.models.logistic import BayesLogistic, synthetic_registries
from simulations.launcher import LocalConsortium, write_csv
from tests.coordinator.test_plugin_workflow import PLUGINS


def test_model_args_have_one_place(tmp_path: Path) -> None:
    """A registry whose [data] names the session's model refuses other model_args, naming both keys; the
    same model written differently (defaults spelled out) is accepted."""
    g = np.random.default_rng(5)
    data = synthetic_registries(g, BayesLogistic(p=2), sizes=(40, 40, 40))
    with LocalConsortium.start(
        3,
        data,
        models=("bayes-logistic",),
        modes=("sign",),
        data_model="bayes-logistic",
        data_model_args={"p": 2},
    ) as lc:
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
            same = {"model_args": {"p": 2, "x_bound": 3.0}, "kind": "mh"}  # x_bound = 3.0 is the default
            sess = coord.open_session(
                SessionOptions(reveal_mode="sign", model="bayes-logistic", model_params=same)
            )
            sess.close()
            other = {"model_args": {"p": 2, "x_bound": 5.0}, "kind": "mh"}
            with pytest.raises(
                SessionError,
                match=r"session's model_args .*x_bound.* differ from this "
                r"registry's \[data\.model_args\] \{'p': 2\}.*\[model\.params\]",
            ):
                coord.open_session(
                    SessionOptions(reveal_mode="sign", model="bayes-logistic", model_params=other)
                )


@pytest.mark.slow
def test_plugin_model_with_registry_files_runs_simulated(tmp_path: Path) -> None:
    """The example's plug-in with ``[simulate] data`` files instead of its synthetic_data: the daemons
    import it from ``[allow] model_path`` and hold exactly the files' records; the run completes."""
    import sys

    shutil.copytree(PLUGINS, tmp_path / "plugins")
    sys.path.insert(0, str(tmp_path / "plugins"))
    try:
        from registry_models import PoissonRegression  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path / "plugins"))
    model = PoissonRegression(p=1)
    regs = model.synthetic_data(np.random.default_rng(9), (60, 80, 70))
    names = []
    for i, cols in enumerate(regs, start=1):
        write_csv(tmp_path / f"reg{i}.csv", cols)
        names.append(f"reg{i}.csv")
    cfg = tmp_path / "exp.toml"
    cfg.write_text(
        textwrap.dedent(
            f"""
            [experiment]
            name = "plugin-files"
            output_dir = "out"
            seed = 4
            [model]
            name = "registry_models:PoissonRegression"
            path = "plugins"
            [model.params]
            p = 1
            [sampler]
            kind = "mh"
            chains = 2
            iterations = 20
            warmup = 5
            proposal_scale = 0.05
            [reveal]
            mode = "sign"
            [simulate]
            parties = 3
            data = {names!r}
            """
        ).replace("'", '"')
    )
    out = tmp_path / "out"
    assert confar(["run", str(cfg), "--simulate", "--no-progress", "--out", str(out)]) == 0
    assert (out / "posterior.nc").is_file()
    for i, cols in enumerate(regs, start=1):
        party = (out / "simulation" / f"party-{i}" / "party.toml").read_text()
        assert str((tmp_path / "plugins").resolve()) in party  # [allow] model_path
        held = np.genfromtxt(out / "simulation" / f"party-{i}" / "data.csv", delimiter=",", names=True)
        for name, col in cols.items():
            np.testing.assert_array_equal(held[name], col)
