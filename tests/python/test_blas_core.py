"""The BLAS kernels by default (exec/blas_core.hpp): without OPENBLAS_CORETYPE the package, imported
after numpy has loaded and used libopenblas, switches to the same kernel set as the CLI, and the two
give the same PCA bits; SCURRY_FAST_BLAS=0 keeps OpenBLAS's own choice in both."""
import os
import subprocess
import sys

import anndata
import numpy as np

from conftest import BINARY, SEED, synthetic

PROBE = """
import sys
import numpy as np
a = np.ones((64, 64), np.float32)
a @ a  # libopenblas mapped and used before scurry loads
import anndata
import scurry as sc
print(sc._scurry.blas_core())
print(sc.settings.blas_core)
ad = anndata.read_h5ad(sys.argv[1])
sc.pp.pca(ad, n_comps=20, svd_solver="arpack")
np.save(sys.argv[2], ad.obsm["X_pca"])
"""


def env_without(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "SCURRY_FAST_BLAS")}
    env.update(extra)
    return env


def cli_core(env):
    v = subprocess.run([BINARY, "--version"], capture_output=True, text=True, env=env)
    assert v.returncode == 0, v.stderr
    line = [s for s in v.stdout.splitlines() if s.startswith("BLAS: ")]
    assert line, f"`scurry --version` prints no 'BLAS:' line: {v.stdout!r}"
    return line[0][len("BLAS: "):]


def test_package_and_cli_run_the_same_kernels_by_default(tmp_path):
    rng = np.random.default_rng(SEED)
    a = synthetic(rng, n_obs=1500, n_vars=300, density=0.3)
    a.X.data = np.log1p(a.X.data)
    src = tmp_path / "in.h5ad"
    a.write_h5ad(src)
    for extra in ({}, {"SCURRY_FAST_BLAS": "0"}):
        env = env_without(**extra)
        p = subprocess.run([sys.executable, "-c", PROBE, str(src), str(tmp_path / "pkg.npy")],
                           capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
        core, status = p.stdout.splitlines()[:2]
        cli_status = cli_core(env)
        assert status == cli_status, f"{extra}: package {status!r} vs CLI {cli_status!r}"
        assert status.startswith(core + " "), status
        if extra:
            assert "SCURRY_FAST_BLAS=0" in status, status
        out = tmp_path / "cli.h5ad"
        c = subprocess.run([BINARY, "--quiet", "pca", str(src), "-o", str(out), "--n-comps", "20",
                            "--svd-solver", "arpack"], capture_output=True, text=True, env=env)
        assert c.returncode == 0, c.stderr
        ours = np.load(tmp_path / "pkg.npy")
        theirs = anndata.read_h5ad(out).obsm["X_pca"]
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), f"{extra}: X_pca differ ({status})"


def test_explicit_coretype_is_kept():
    env = env_without(OPENBLAS_CORETYPE="Prescott")
    p = subprocess.run([sys.executable, "-c", "import scurry as sc; print(sc.settings.blas_core)"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert "OPENBLAS_CORETYPE=Prescott" in p.stdout, p.stdout
    assert "OPENBLAS_CORETYPE=Prescott" in cli_core(env)
