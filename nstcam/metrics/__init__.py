"""How faithful is a saliency map? Model-agnostic metrics that perturb the input by the map and
read the model's softmax score of the target class.

Every metric takes ``(model, x, maps, targets)``: ``x`` a normalised batch (N, 3, H, W), ``maps``
(N, H, W) in [0, 1] (tensor or array), ``targets`` one class for all images or one per image; it
returns one value per image. Perturbed images are scored in chunks on ``x``'s device, so memory
stays bounded, and the model is read in eval mode without flipping its flags.

Layout: ``confidence`` (confidence change, Average Drop / Increase in Confidence), ``curves``
(deletion and insertion AUC), ``road`` (ROAD with noisy linear imputation, in ``_impute``),
``baselines`` (maps with no information) and ``faithfulness`` (all of them for one batch, beside a
random map's); ``_scores`` holds the shared checks and the chunked scoring.
"""

from nstcam.metrics.baselines import centre_gaussian, random_map
from nstcam.metrics.confidence import average_drop_increase, confidence_change
from nstcam.metrics.curves import deletion_auc, insertion_auc
from nstcam.metrics.faithfulness import Faithfulness, faithfulness
from nstcam.metrics.road import road

__all__ = [
    "Faithfulness",
    "average_drop_increase",
    "centre_gaussian",
    "confidence_change",
    "deletion_auc",
    "faithfulness",
    "insertion_auc",
    "random_map",
    "road",
]
