"""Shared fixtures of the package's tests: the scurry binary (the CLI whose results the package must
equal), fresh seeded synthetic data, and helpers to run a CLI step on an h5ad file."""
import os
import subprocess
import sys

# The package and the CLI compared bit for bit must run the same BLAS kernels: one explicit OpenBLAS
# kernel set for this process (set before numpy loads libopenblas) and the CLI it starts (inherited).
# Prescott (SSE3) runs on every x86-64 CPU; OPENBLAS_CORETYPE=SkylakeX (or any) in the environment
# runs the suite on that set instead. test_blas_core.py checks the default (no variable) path.
os.environ.setdefault("OPENBLAS_CORETYPE", "Prescott")

import numpy as np
import pytest
import scipy.sparse as sp

SOURCE_DIR = os.environ.get("SCURRY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BINARY = os.environ.get("SCURRY_BINARY", os.path.join(SOURCE_DIR, "build", "scurry"))
PBMC = os.path.join(SOURCE_DIR, "tests", "data", "pbmc3k_first1000.h5ad")


def _seed():
    s = os.environ.get("SCURRY_TEST_SEED")
    return int(s) if s else int.from_bytes(os.urandom(4), "little")


SEED = _seed()


def pytest_report_header(config):
    return f"scurry test seed: SCURRY_TEST_SEED={SEED}; binary {BINARY}"


@pytest.fixture
def rng():
    return np.random.default_rng(SEED)


def synthetic(rng, n_obs=400, n_vars=300, n_groups=4, density=0.2):
    """Counts with cluster structure (a negative binomial-ish mean per group), some MT- genes, a
    categorical obs 'group' and a bool var 'flag'. float32 CSR, as anndata writes counts."""
    import anndata
    import pandas as pd

    groups = rng.integers(0, n_groups, n_obs)
    base = rng.gamma(0.6, 1.0, n_vars)
    shift = rng.gamma(2.0, 1.0, (n_groups, n_vars)) * (rng.random((n_groups, n_vars)) < 0.1)
    mean = (base[None, :] + shift[groups]) * rng.uniform(0.5, 2.0, n_obs)[:, None]
    counts = rng.poisson(mean * 2).astype(np.float32)
    counts[rng.random(counts.shape) > density * 3] = 0
    names = [f"MT-{i}" if i < 5 else f"G{i}" for i in range(n_vars)]
    obs = pd.DataFrame({"group": pd.Categorical([f"g{g}" for g in groups])},
                       index=[f"c{i}" for i in range(n_obs)])
    var = pd.DataFrame({"flag": rng.random(n_vars) < 0.5}, index=names)
    return anndata.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var, dtype=np.float32)


@pytest.fixture
def counts(rng):
    return synthetic(rng)


def run_cli(*args):
    """Runs `scurry ARGS`; returns the completed process (stdout/stderr as text)."""
    p = subprocess.run([BINARY, "--quiet", *map(str, args)], capture_output=True, text=True)
    return p


def cli_step(tmp_path, adata, step, *opts, name="in"):
    """Writes adata to tmp_path/NAME.h5ad, runs `scurry STEP IN -o OUT OPTS`, returns the output read back."""
    import anndata

    src = tmp_path / f"{name}.h5ad"
    out = tmp_path / f"{name}.{step}.h5ad"
    adata.write_h5ad(src)
    p = run_cli(step, src, "-o", out, *opts)
    assert p.returncode == 0, f"scurry {step} failed: {p.stderr}"
    return anndata.read_h5ad(out)


def roundtrip(tmp_path, adata, name="rt"):
    """adata written and read back by anndata (the package's input then equals the CLI's)."""
    import anndata

    path = tmp_path / f"{name}.h5ad"
    adata.write_h5ad(path)
    return anndata.read_h5ad(path)


def assert_same_matrix(a, b, what):
    if sp.issparse(a) or sp.issparse(b):
        assert sp.issparse(a) and sp.issparse(b), f"{what}: sparse vs dense"
        a, b = sp.csr_matrix(a), sp.csr_matrix(b)
        a.sort_indices()
        b.sort_indices()
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
        assert np.array_equal(a.indptr, b.indptr), f"{what}: indptr differ"
        assert np.array_equal(a.indices, b.indices), f"{what}: indices differ"
        assert np.array_equal(a.data, b.data), f"{what}: values differ (max |d| {np.abs(a.data - b.data).max()})"
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: shape {a.shape} vs {b.shape}"
        assert np.array_equal(a, b, equal_nan=True), f"{what}: values differ"


def assert_same_column(a, b, what):
    import pandas as pd

    if isinstance(a.dtype, pd.CategoricalDtype) or isinstance(b.dtype, pd.CategoricalDtype):
        assert list(a.astype(str)) == list(b.astype(str)), f"{what}: categories differ"
        return
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    if a.dtype.kind in "fc":
        assert np.array_equal(a, b, equal_nan=True), f"{what}: values differ"
    else:
        assert np.array_equal(a, b), f"{what}: values differ"
