"""ABCDP: rejection ABC with differential privacy (Park, Vinaroz, Jitkrittum, Entropy 23 (2021) 961).

Single-owner algorithms: c-sample ABCDP via the sparse vector technique (Laplace, or Gaussian with
RESAMPLE), the arXiv version's rejection ABCDP with Gaussian noise and soft ABCDP, distances with declared
sensitivities, the flip probability and the posterior error bound. Pure: no I/O, no networking; all
randomness comes in as arguments (secret noise from a CSPRNG-seeded generator for real runs, see
``noise``). Module map in README.md.
"""

from mechanisms.abcdp.accounting import (
    rejection_gaussian_exact_eps,
    rejection_gaussian_h,
    rejection_gaussian_sigma,
    soft_abcdp_eps,
    soft_abcdp_sigma,
    svt_gaussian_eps,
    svt_gaussian_scale,
    svt_laplace_eps,
    svt_laplace_scale,
)
from mechanisms.abcdp.bounds import (
    expected_flips,
    flip_probability,
    posterior_mean_error_bound,
    posterior_mmd_bound,
    posterior_tv_bound,
)
from mechanisms.abcdp.distances import (
    RFFMMD,
    ClippedAveragedDistance,
    DeclaredDistance,
    GaussianKernelMMD,
    PrivateDistance,
    RandomFourierFeatures,
    clip_bound_from_simulations,
    median_heuristic_bandwidth,
)
from mechanisms.abcdp.events import AbcdpPrivacyEvent
from mechanisms.abcdp.rejection import (
    RejectionGaussianConfig,
    SoftABCDPConfig,
    rejection_abcdp_gaussian,
    soft_abcdp_weights,
)
from mechanisms.abcdp.svt import (
    ABCDPResult,
    SVTConfig,
    SVTNoise,
    SVTState,
    c_sample_abcdp,
    draw_batch_noise,
    draw_threshold_noise,
    run_svt_on_distances,
    svt_batch,
    svt_decide,
    svt_decide_squared,
    svt_init,
    svt_step,
)

__all__ = [
    "RFFMMD",
    "ABCDPResult",
    "AbcdpPrivacyEvent",
    "ClippedAveragedDistance",
    "DeclaredDistance",
    "GaussianKernelMMD",
    "PrivateDistance",
    "RandomFourierFeatures",
    "RejectionGaussianConfig",
    "SVTConfig",
    "SVTNoise",
    "SVTState",
    "SoftABCDPConfig",
    "c_sample_abcdp",
    "clip_bound_from_simulations",
    "draw_batch_noise",
    "draw_threshold_noise",
    "expected_flips",
    "flip_probability",
    "median_heuristic_bandwidth",
    "posterior_mean_error_bound",
    "posterior_mmd_bound",
    "posterior_tv_bound",
    "rejection_abcdp_gaussian",
    "rejection_gaussian_exact_eps",
    "rejection_gaussian_h",
    "rejection_gaussian_sigma",
    "run_svt_on_distances",
    "soft_abcdp_eps",
    "soft_abcdp_sigma",
    "soft_abcdp_weights",
    "svt_batch",
    "svt_decide",
    "svt_decide_squared",
    "svt_gaussian_eps",
    "svt_gaussian_scale",
    "svt_init",
    "svt_laplace_eps",
    "svt_laplace_scale",
    "svt_step",
]
