# bench/gpu_package: the tutorial chain at 1.3M cells through `import scurry as sc` with X resident on the GPU: each
# step timed in this process (wall, time.perf_counter), twice (the first on a copy).
import cProfile
import gc
import io
import os
import pstats
import sys
import time

import scurry as sc

t = time.perf_counter()
a = sc.read_h5ad(sys.argv[1])
print(f"read {time.perf_counter() - t:.2f} s: {a.n_obs} x {a.n_vars}, nnz {a.X.nnz}", flush=True)
for rep in range(2):
    b = a.copy() if rep == 0 else a
    b.var["mt"] = b.var_names.str.startswith("MT-")
    if rep == 1 and os.environ.get("PROFILE"):
        os.environ["SCURRY_PROFILE"] = "1"  # the resident steps' phase times on stderr (PhaseClock)
    T = {}

    prof = {}

    def tm(name, f):
        pr = cProfile.Profile() if rep == 1 and os.environ.get("PROFILE") else None
        t = time.perf_counter()
        if pr:
            pr.enable()
        f()
        if pr:
            pr.disable()
            prof[name] = pr
        T[name] = time.perf_counter() - t

    tm("upload", lambda: sc.get.anndata_to_GPU(b))
    if rep == 1 and os.environ.get("GC_OFF"):  # the cyclic collector off for the steps (a probe)
        gc.disable()
    tm("qc", lambda: sc.pp.calculate_qc_metrics(b, qc_vars=["mt"], percent_top=[50, 100, 200, 500], inplace=True))
    tm("filter_cells", lambda: sc.pp.filter_cells(b, min_genes=200))
    tm("filter_genes", lambda: sc.pp.filter_genes(b, min_cells=3))
    tm("normalize_total", lambda: sc.pp.normalize_total(b, target_sum=1e4))
    tm("log1p", lambda: sc.pp.log1p(b))
    tm("hvg", lambda: sc.pp.highly_variable_genes(b, n_top_genes=2000, flavor="cell_ranger", subset=True))
    tm("scale", lambda: sc.pp.scale(b, max_value=10))
    tm("pca", lambda: sc.pp.pca(b, n_comps=50))
    chain = sum(v for k, v in T.items() if k != "upload")
    print(f"run {rep}: " + ", ".join(f"{k} {v:.4f}" for k, v in T.items()) + f"; QC->PCA {chain:.3f} s; "
          f"{b.n_obs} x {b.n_vars}, X_pca {b.obsm['X_pca'].shape}", flush=True)
    for name, pr in prof.items():  # PROFILE=1: where each step of run 1 spends its time, by own time
        out = io.StringIO()
        st = pstats.Stats(pr, stream=out)
        st.sort_stats("tottime").print_stats(int(os.environ.get("PROFILE_LINES", "8")))
        if os.environ.get("PROFILE_CALLERS"):  # who calls the largest Python-side entries
            st.print_callers(os.environ["PROFILE_CALLERS"])
        print(f"--- profile {name} ({T[name]:.4f} s)\n" + "\n".join(out.getvalue().splitlines()[6:]), flush=True)
    gc.enable()
    del b
    gc.collect()  # run 0's copy (and its device arrays) freed before run 1, as the bench frees its last run
