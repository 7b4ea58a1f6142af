"""examples/pbmc3k.py (scanpy's tutorial with import scurry as sc) runs to its end on the bundled
data and finds the tutorial's cell types' markers."""
import os
import subprocess
import sys

from conftest import SOURCE_DIR


def test_pbmc3k_example(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(SOURCE_DIR, "examples", "pbmc3k.py"), "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "AnnData object with n_obs × n_vars = 983 × 1805" in out
    n_clusters = int(out.split(" Leiden clusters:")[0].split()[-1])
    assert 4 <= n_clusters <= 15, n_clusters
    # the tutorial's markers among the top 3 of some cluster: monocytes, B cells, NK cells
    for gene in ("LYZ", "CD79A", "NKG7"):
        assert f" {gene} " in out, gene


def test_version_is_the_clis_and_import_works_from_any_directory(tmp_path):
    """Issue 17 point 1: scurry.__version__ equals `scurry --version`; the import does not depend on
    the working directory."""
    from conftest import BINARY

    v = subprocess.run([BINARY, "--version"], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    cli_version = v.stdout.split()[1]
    p = subprocess.run([sys.executable, "-c", "import scurry, os; print(scurry.__version__, os.getcwd())"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    py_version, cwd = p.stdout.split()
    assert py_version == cli_version, f"scurry.__version__ {py_version} vs the CLI's {cli_version}"
    assert os.path.samefile(cwd, tmp_path)
