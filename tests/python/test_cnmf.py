"""scurry.cnmf.cNMF (cNMF 1.7's Python API) against `scurry cnmf`: a run folder made through the
package has the CLI's file names and the same contents, load_results returns cNMF's four frames,
and bad arguments raise naming them."""
import filecmp
import os

import anndata
import numpy as np
import pandas as pd
import pytest

import scurry as sc
from conftest import SEED, assert_same_matrix, run_cli

K = [3, 4]


def tree(root):
    out = set()
    for d, _, fs in os.walk(root):
        for f in fs:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cnmf")
    counts = d / "in.h5ad"
    seed = SEED % 1000
    p = run_cli("simulate", counts, "--n-cells", "150", "--n-genes", "120", "--nnz-per-cell", "50", "--clusters", "3",
                "--seed", seed)
    assert p.returncode == 0, p.stderr
    common = ["--output-dir", d / "cli", "--name", "t"]
    for verb, opts in [("prepare", ["-c", counts, "-k", *K, "--n-iter", "4", "--numgenes", "80", "--seed", seed]),
                       ("factorize", []), ("combine", []), ("k_selection_plot", []),
                       ("consensus", ["-k", "3", "--show-clustering", "--build-reference"])]:
        p = run_cli("cnmf", verb, *common, *opts)
        assert p.returncode == 0, f"cnmf {verb}: {p.stderr}"
    c = sc.cnmf.cNMF(output_dir=str(d / "py"), name="t")
    c.prepare(str(counts), K, n_iter=4, seed=seed, num_highvar_genes=80)
    c.factorize()
    c.combine()
    c.k_selection_plot(close_fig=True)
    c.consensus(3)
    return d, c


def test_same_files_as_the_cli(runs):
    d, _ = runs
    cli, py = tree(d / "cli" / "t"), tree(d / "py" / "t")
    assert cli == py, f"only CLI: {sorted(cli - py)}; only Python: {sorted(py - cli)}"
    assert "t.clustering.k_3.dt_0_5.png" in py and "t.starcat_spectra.k_3.dt_0_5.txt" in py
    # byte for byte, but the h5ad files (HDF5 stores its objects' times): those by their contents
    differ = [f for f in sorted(py) if not f.endswith(".h5ad")
              and not filecmp.cmp(d / "cli" / "t" / f, d / "py" / "t" / f, shallow=False)]
    assert differ == [], f"files whose contents differ: {differ}"
    for f in sorted(f for f in py if f.endswith(".h5ad")):
        a, b = anndata.read_h5ad(d / "cli" / "t" / f), anndata.read_h5ad(d / "py" / "t" / f)
        assert_same_matrix(a.X, b.X, f + " X")
        assert a.obs.equals(b.obs) and a.var.equals(b.var), f
        assert sorted(a.uns) == sorted(b.uns), f


def test_load_results(runs):
    d, c = runs
    usage, scores, tpm, top = c.load_results(3, 0.5, n_top_genes=10)
    u = pd.read_csv(d / "cli" / "t" / "t.usages.k_3.dt_0_5.consensus.txt", sep="\t", index_col=0)
    assert usage.shape == (150, 3) and list(usage.columns) == [1, 2, 3]
    assert np.allclose(usage.sum(axis=1), 1)
    assert np.allclose(usage.to_numpy(), (u.T / u.sum(axis=1)).T.to_numpy())
    raw, _, _, _ = c.load_results(3, 0.5, norm_usage=False)
    assert np.array_equal(raw.to_numpy(), u.to_numpy())
    assert scores.shape == (120, 3) and tpm.shape == (120, 3)
    assert top.shape == (10, 3)
    for p in scores.columns:  # each column: the program's 10 best-scoring genes, best first
        want = scores[p].sort_values(ascending=False).index[:10]
        assert list(top[p]) == list(want)
    with pytest.raises(FileNotFoundError, match="consensus"):
        c.load_results(4, 0.5)


def test_errors(runs, tmp_path):
    d, c = runs
    with pytest.raises(NotImplementedError, match="alpha_usage"):
        c.prepare(str(d / "in.h5ad"), 3, alpha_usage=0.1)
    with pytest.raises(NotImplementedError, match="refit_usage"):
        c.consensus(3, refit_usage=False)
    with pytest.raises(ValueError, match="beta_loss"):
        c.prepare(str(d / "in.h5ad"), 3, beta_loss="l1")
    with pytest.raises(ValueError, match="device"):
        sc.cnmf.cNMF(output_dir=str(tmp_path), name="x", device="tpu").factorize()
    with pytest.raises(ValueError, match="missing.h5ad"):
        sc.cnmf.cNMF(output_dir=str(tmp_path), name="y").prepare(str(tmp_path / "missing.h5ad"), 3)
    auto = sc.cnmf.cNMF(output_dir=str(tmp_path))
    assert os.path.isdir(tmp_path / auto.name / "cnmf_tmp")  # cNMF's date_hash name, folders made
