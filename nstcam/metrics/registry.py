"""Every metric's record, in one place (:data:`METRICS`): its name, family, which way is better and
what it measures. The trust report (:mod:`nstcam.cam.trust`), ``target_layer="auto"``'s choice, the
app's faithfulness panel and plots, and ``nstcam cam --metrics`` read them from here."""

from __future__ import annotations

from dataclasses import dataclass

from nstcam._choices import Registry

__all__ = ["FAITHFULNESS_FIGURES", "METRICS", "Metric", "better_word"]


@dataclass(frozen=True)
class Metric:
    """One metric of a saliency map.

    Attributes:
        name: what the trust report and ``layer_metric=`` call it (``"deletion"``).
        key: the figure's name in :class:`nstcam.metrics.Faithfulness` and the CSVs (``"deletion_auc"``);
            the function of :mod:`nstcam.metrics` that computes it, where one does.
        family: ``"faithfulness"``, ``"randomisation"``, ``"robustness"``, ``"complexity"`` or
            ``"localisation"``.
        higher_is_better: which way a better map moves it.
        what: one line: what it measures.
        paper: who proposed it.
    """

    name: str
    key: str
    family: str
    higher_is_better: bool
    what: str
    paper: str


_RECORDS = (
    Metric(
        "confidence_change",
        "confidence_change",
        "faithfulness",
        True,
        "confidence change (score on image x map minus on image)",
        "Chattopadhay et al. 2018",
    ),
    Metric(
        "deletion",
        "deletion_auc",
        "faithfulness",
        False,
        "deletion AUC (most relevant pixels removed first)",
        "Petsiuk et al. 2018",
    ),
    Metric(
        "insertion",
        "insertion_auc",
        "faithfulness",
        True,
        "insertion AUC (most relevant pixels put back first)",
        "Petsiuk et al. 2018",
    ),
    Metric(
        "road",
        "road",
        "faithfulness",
        True,
        "ROAD, (LeRF - MoRF) / 2 with noisy imputation",
        "Rong et al. 2022",
    ),
    Metric(
        "correlation",
        "faithfulness_correlation",
        "faithfulness",
        True,
        "faithfulness correlation (score drops against the map's sums over random subsets)",
        "Bhatt et al. 2020",
    ),
    Metric(
        "randomisation",
        "parameter_randomisation",
        "randomisation",
        False,
        "Spearman of the map with the map of the model with its top layer re-initialised",
        "Adebayo et al. 2018",
    ),
    Metric(
        "sensitivity",
        "max_sensitivity",
        "robustness",
        False,
        "max-sensitivity: the map's largest change under small uniform noise",
        "Yeh et al. 2019",
    ),
    Metric("sparseness", "sparseness", "complexity", True, "the map's Gini index", "Chalasani et al. 2020"),
    Metric(
        "energy", "energy_in_mask", "localisation", True, "the map's share inside the box", "Wang et al. 2020"
    ),
    Metric(
        "pointing",
        "pointing_game",
        "localisation",
        True,
        "the map's peak inside the box",
        "Zhang et al. 2018",
    ),
)

METRICS: Registry[Metric] = Registry("metric", ((m.name, m) for m in _RECORDS))
"""Every metric: name -> its record."""

FAITHFULNESS_FIGURES: tuple[Metric, ...] = tuple(
    METRICS[n] for n in ("confidence_change", "deletion", "insertion", "road")
)
"""The figures of :func:`nstcam.metrics.faithfulness` (one image, beside a random map's), in order."""


def better_word(metric: Metric) -> str:
    """``"higher"`` or ``"lower"``: which way is better, as a table's column says it."""
    return "higher" if metric.higher_is_better else "lower"
