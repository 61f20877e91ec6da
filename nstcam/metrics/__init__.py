"""How faithful is a saliency map? Model-agnostic metrics that perturb the input by the map and
read the model's softmax score of the target class.

Every metric takes ``(model, x, maps, targets)``: ``x`` a normalised batch (N, 3, H, W), ``maps``
(N, H, W) in [0, 1] (tensor or array), ``targets`` one class for all images or one per image; it
returns one value per image. Perturbed images are scored in chunks on ``x``'s device, so memory
stays bounded, and the model is read in eval mode without flipping its flags.

Layout: ``confidence`` (confidence change, Average Drop / Increase in Confidence), ``curves``
(deletion and insertion AUC), ``road`` (ROAD with noisy linear imputation, in ``_impute``),
``baselines`` (maps with no information) and ``faithfulness`` (all of them for one batch, beside a
random map's); ``_scores`` holds the shared checks and the chunked scoring; ``registry``
(:data:`METRICS`: each metric's name, family and which way is better, what the reports read).

Faithfulness also has ``correlation`` (Bhatt et al.'s faithfulness correlation) and
``monotonicity`` (Arya et al.). Beyond faithfulness (issue 53): ``randomisation`` (Adebayo et al.'s
model parameter randomisation test), ``localisation`` (pointing game, energy in a mask, relevance
rank accuracy), ``robustness`` (max-sensitivity, local Lipschitz estimate), ``complexity``
(sparseness, entropy) and ``similarity`` (Spearman, SSIM: how maps are compared).
"""

from nstcam.metrics.baselines import centre_gaussian, random_map
from nstcam.metrics.complexity import complexity, sparseness
from nstcam.metrics.confidence import average_drop_increase, confidence_change
from nstcam.metrics.correlation import faithfulness_correlation
from nstcam.metrics.curves import deletion_auc, insertion_auc
from nstcam.metrics.faithfulness import Faithfulness, faithfulness
from nstcam.metrics.localisation import box_masks, energy_in_mask, pointing_game, relevance_rank_accuracy
from nstcam.metrics.monotonicity import monotonicity
from nstcam.metrics.randomisation import (
    Randomisation,
    parameter_randomisation,
    randomisation_layers,
    randomised_copy,
)
from nstcam.metrics.registry import METRICS, Metric
from nstcam.metrics.road import road
from nstcam.metrics.robustness import local_lipschitz, max_sensitivity
from nstcam.metrics.similarity import spearman, ssim

__all__ = [
    "METRICS",
    "Faithfulness",
    "Metric",
    "Randomisation",
    "box_masks",
    "complexity",
    "energy_in_mask",
    "faithfulness_correlation",
    "local_lipschitz",
    "max_sensitivity",
    "monotonicity",
    "parameter_randomisation",
    "pointing_game",
    "randomisation_layers",
    "randomised_copy",
    "relevance_rank_accuracy",
    "sparseness",
    "spearman",
    "ssim",
    "average_drop_increase",
    "centre_gaussian",
    "confidence_change",
    "deletion_auc",
    "faithfulness",
    "insertion_auc",
    "random_map",
    "road",
]
