"""Bundled scikit-learn datasets and their fixed splits (nothing is downloaded).

Splits are stratified 60/20/20 train/calibration/test with a fixed seed, so the routing
calibration and every benchmark see the same held-out data as the model builder did.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DATASETS", "Split", "load_splits"]

DATASETS = ("digits", "iris", "wine", "breast_cancer")


@dataclass(frozen=True, slots=True)
class Split:
    train_x: np.ndarray
    train_y: np.ndarray
    calib_x: np.ndarray
    calib_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray

    @property
    def n_features(self) -> int:
        return int(self.train_x.shape[1])

    @property
    def n_classes(self) -> int:
        return int(max(self.train_y.max(), self.test_y.max()) + 1)


def load_splits(name: str, seed: int = 0) -> Split:
    """Load a bundled dataset and split it 60/20/20 (stratified, seeded)."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    loaders = {
        "digits": datasets.load_digits,
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
    }
    if name not in loaders:
        raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(DATASETS)}")
    x, y = loaders[name](return_X_y=True)
    x = x.astype(np.float32)
    y = y.astype(np.int64)
    x_train, x_rest, y_train, y_rest = train_test_split(
        x, y, test_size=0.4, random_state=seed, stratify=y
    )
    x_calib, x_test, y_calib, y_test = train_test_split(
        x_rest, y_rest, test_size=0.5, random_state=seed, stratify=y_rest
    )
    return Split(x_train, y_train, x_calib, y_calib, x_test, y_test)
