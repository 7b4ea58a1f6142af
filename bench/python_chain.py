#!/usr/bin/env python3
"""The tutorial chain through the Python package, as `scurry run` runs it with its defaults (QC with
mt, filter_cells min_genes 200, filter_genes min_cells 3, layers['counts'], normalize_total 1e4,
log1p, HVG seurat top 2000, raw, HVG subset, scale max_value 10, PCA 50, neighbors 15, UMAP, Leiden,
rank_genes_groups t-test), from an h5ad to an h5ad. The HVG subset as scanpy's pbmc3k tutorial
writes it (and examples/pbmc3k.py): ``adata.raw = adata; adata = adata[:, adata.var.highly_variable]``,
a view that scale makes actual; --copy: ``adata[:, hvg].copy()`` instead (sections 18 and 22 of
bench/RESULTS.md measured that form: anndata's copy of the view copies raw a second time while the
old AnnData is alive, which the package cannot change). For peak-RSS comparisons with the CLI:

    /usr/bin/time -v python3 bench/python_chain.py IN.h5ad OUT.h5ad
    /usr/bin/time -v scurry run IN.h5ad -o OUT.h5ad

--trace: after each step, the step's peak RSS (VmHWM, reset before the step through
/proc/self/clear_refs) and the RSS after it, on stderr: which step sets the chain's peak.
"""
import sys
import time

import scurry as sc

args = [a for a in sys.argv[1:] if a not in ("--trace", "--copy")]
TRACE = "--trace" in sys.argv[1:]
COPY = "--copy" in sys.argv[1:]
src, dst = args[0], args[1]
t0 = time.time()


def _kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def step(label):
    """Prints the peak and current RSS since the last call, then resets the peak."""
    if not TRACE:
        return
    print(f"trace {label:<22} peak {_kb('VmHWM:') / 1e6:6.2f} GB  after {_kb('VmRSS:') / 1e6:6.2f} GB  "
          f"{time.time() - t0:7.1f} s", file=sys.stderr, flush=True)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


step("start")
adata = sc.read_h5ad(src)
step("read_h5ad")
adata.var["mt"] = adata.var_names.str.startswith("MT-") | adata.var_names.str.startswith("mt-")
sc.pp.calculate_qc_metrics(adata, qc_vars=["mt"], inplace=True)
step("qc")
sc.pp.filter_cells(adata, min_genes=200)
step("filter_cells")
sc.pp.filter_genes(adata, min_cells=3)
step("filter_genes")
adata.layers["counts"] = adata.X.copy()
step("counts layer")
sc.pp.normalize_total(adata, target_sum=1e4)
step("normalize_total")
sc.pp.log1p(adata)
step("log1p")
sc.pp.highly_variable_genes(adata, n_top_genes=2000)
step("hvg")
adata.raw = adata
step("raw")
adata = adata[:, adata.var.highly_variable]
if COPY:
    adata = adata.copy()
step("subset")
sc.pp.scale(adata, max_value=10)
step("scale")
sc.pp.pca(adata, n_comps=50)
step("pca")
sc.pp.neighbors(adata, n_neighbors=15)
step("neighbors")
sc.tl.umap(adata)
step("umap")
sc.tl.leiden(adata)
step("leiden")
sc.tl.rank_genes_groups(adata, "leiden", method="t-test")
step("rank_genes_groups")
adata.write_h5ad(dst)
step("write_h5ad")
print(f"python chain: {adata.n_obs} cells x {adata.n_vars} genes, "
      f"{adata.obs['leiden'].cat.categories.size} clusters, {time.time() - t0:.1f} s", file=sys.stderr)
