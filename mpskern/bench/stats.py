"""Summary statistics of timing samples (milliseconds per call).

Medians and percentiles rather than means: timing noise is one-sided (a sample can only be
slowed down), so the median is the robust location and p10..p90 the spread. Outliers are
flagged by the modified z-score of Iglewicz and Hoaglin (0.6745 * (x - median) / MAD, beyond
3.5); they are counted, not dropped, since the median already ignores them.
"""
from dataclasses import asdict, dataclass

import numpy as np

MAD_Z_LIMIT = 3.5
UNSTABLE_REL_IQR = 0.10        # IQR above 10 % of the median
UNSTABLE_OUTLIER_FRACTION = 0.10
MIN_SAMPLES = 10               # fewer (a slow case that ran out of budget) is flagged


@dataclass
class Summary:
    median: float
    p10: float
    p90: float
    p25: float
    p75: float
    iqr: float
    mean: float
    min: float
    max: float
    n: int
    n_outliers: int
    unstable: bool
    unstable_reason: str       # "" when stable

    def as_dict(self):
        return asdict(self)


def mad_outliers(samples, limit=MAD_Z_LIMIT):
    """Boolean mask of the samples whose modified z-score exceeds `limit`. When more than
    half the samples are equal (MAD = 0) the mean absolute deviation stands in (scaled by
    1.2533, as Iglewicz and Hoaglin suggest); if that is 0 too, nothing is an outlier."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        return np.zeros(0, dtype=bool)
    med = np.median(x)
    dev = np.abs(x - med)
    mad = np.median(dev)
    if mad > 0:
        z = 0.6745 * dev / mad
    else:
        meanad = dev.mean()
        if meanad == 0:
            return np.zeros(x.size, dtype=bool)
        z = dev / (1.253314 * meanad)
    return z > limit


def summarize(samples, min_samples=MIN_SAMPLES):
    """Summary of per-call times. `unstable` says the median should not be trusted to a
    few percent: wide spread (IQR > 10 % of the median), many outliers (> 10 %), or fewer
    samples than `min_samples`; `unstable_reason` says which."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summarize: no samples")
    if not np.all(np.isfinite(x)):
        raise ValueError("summarize: samples must be finite")
    p10, p25, med, p75, p90 = np.percentile(x, [10, 25, 50, 75, 90])
    iqr = p75 - p25
    n_out = int(mad_outliers(x).sum())
    reasons = []
    if med > 0 and iqr / med > UNSTABLE_REL_IQR:
        reasons.append(f"IQR {100 * iqr / med:.0f}% of median")
    if n_out / x.size > UNSTABLE_OUTLIER_FRACTION:
        reasons.append(f"{n_out}/{x.size} outliers")
    if x.size < min_samples:
        reasons.append(f"only {x.size} samples")
    return Summary(median=float(med), p10=float(p10), p90=float(p90), p25=float(p25),
                   p75=float(p75), iqr=float(iqr), mean=float(x.mean()), min=float(x.min()),
                   max=float(x.max()), n=int(x.size), n_outliers=n_out,
                   unstable=bool(reasons), unstable_reason="; ".join(reasons))
