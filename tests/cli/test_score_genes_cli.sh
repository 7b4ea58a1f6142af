#!/usr/bin/env bash
# scurry score-genes and score-genes-cell-cycle end to end: exit codes, and the output read by
# anndata 0.8 (warnings as errors) against scanpy 1.9.6's own scores on pbmc3k
# (golden/pbmc3k_first1000.scanpy_tl.h5: score_genes with its gene list and random_state 0, use_raw;
# score_genes_cell_cycle with Tirosh et al.'s genes): Pearson >= 0.98 and the phases on >= 95% of
# the cells, as the library's tests ask.
# usage: test_score_genes_cli.sh <scurry-binary> <repo-root>
set -euo pipefail
scurry=$1
repo=$2
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden="$repo/tests/data/golden/pbmc3k_first1000.scanpy.h5ad"
tl="$repo/tests/data/golden/pbmc3k_first1000.scanpy_tl.h5"

genes=$("$py" -c "import h5py, sys; print(','.join(s.decode() for s in h5py.File(sys.argv[1])['score_genes/gene_list'][()]))" "$tl")
"$scurry" -q score-genes "$golden" -o "$tmp/s.h5ad" --genes "$genes" --use-raw --score-name my_score
"$scurry" -q score-genes-cell-cycle "$golden" -o "$tmp/c.h5ad" --use-raw
set +e
"$scurry" -q score-genes "$golden" -o "$tmp/bad.h5ad" --genes NOT_A_GENE,NOR_THIS 2>"$tmp/err"; rc1=$?
"$scurry" -q score-genes "$golden" -o "$tmp/bad.h5ad" --genes "$genes" --n-bins 1 2>/dev/null; rc2=$?
set -e
test "$rc1" -eq 2 && test "$rc2" -eq 2 && grep -q "no gene of the list" "$tmp/err" && test ! -e "$tmp/bad.h5ad"

"$py" -W error - "$tmp" "$tl" <<'PY'
import sys
import h5py
import numpy as np
import anndata as ad

tmp, tl = sys.argv[1], sys.argv[2]
g = h5py.File(tl)["score_genes"]
s = ad.read_h5ad(f"{tmp}/s.h5ad")
r = np.corrcoef(s.obs["my_score"].to_numpy(), g["score"][()])[0, 1]
assert r >= 0.98, r
c = ad.read_h5ad(f"{tmp}/c.h5ad")
for k in ("S_score", "G2M_score"):
    rk = np.corrcoef(c.obs[k].to_numpy(), g[k][()])[0, 1]
    assert rk >= 0.98, (k, rk)
cats = [x.decode() for x in g["phase_categories"][()]]
gold = np.array(cats)[g["phase_codes"][()]]
same = (c.obs["phase"].astype(str).to_numpy() == gold).mean()
assert same >= 0.95, same
print(f"score-genes CLI: ok (pearson {r:.6f}, phase agreement {same:.4f})")
PY
