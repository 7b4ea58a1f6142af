#!/usr/bin/env python3
"""Copies the parts of cNMF 1.7.1's own run folder that scurry's cNMF tests read.

usage: python3 tests/data/copy_cnmf_golden.py SOURCE_DIR
SOURCE_DIR holds cnmf_pbmc3k/pbmc3k/ (the shared golden folder; its README says how cNMF made it).
The files are copied unchanged into tests/data/golden/cnmf_pbmc3k/pbmc3k/ and their sha256 printed.
"""
import hashlib, os, shutil, sys

NAME = "pbmc3k"
FILES = [
    "cnmf_tmp/pbmc3k.nmf_params.df.npz",
    "cnmf_tmp/pbmc3k.nmf_idvrun_params.yaml",
    "cnmf_tmp/pbmc3k.norm_counts.h5ad",
    "cnmf_tmp/pbmc3k.tpm_stats.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_5.iter_0.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_5.iter_1.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_4.merged.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_5.merged.df.npz",
    "cnmf_tmp/pbmc3k.local_density_cache.k_5.merged.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_5.dt_0_5.consensus.df.npz",
    "cnmf_tmp/pbmc3k.spectra.k_5.dt_2_0.consensus.df.npz",
    "cnmf_tmp/pbmc3k.usages.k_5.dt_0_5.consensus.df.npz",
    "cnmf_tmp/pbmc3k.usages.k_5.dt_2_0.consensus.df.npz",
    "cnmf_tmp/pbmc3k.starcat_spectra.k_5.dt_0_5.df.npz",
    "cnmf_tmp/pbmc3k.gene_spectra_tpm.k_5.dt_0_5.df.npz",
    "pbmc3k.k_selection_stats.df.npz",
    "pbmc3k.overdispersed_genes.txt",
]


def main():
    src = os.path.join(sys.argv[1], "cnmf_pbmc3k", NAME)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "cnmf_pbmc3k", NAME)
    os.makedirs(os.path.join(out, "cnmf_tmp"), exist_ok=True)
    for f in FILES:
        shutil.copyfile(os.path.join(src, f), os.path.join(out, f))
        with open(os.path.join(out, f), "rb") as fh:
            print(hashlib.sha256(fh.read()).hexdigest() + "  golden/cnmf_pbmc3k/" + NAME + "/" + f)


if __name__ == "__main__":
    main()
