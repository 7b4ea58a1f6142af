// scurry: gene set scores, as scanpy 1.9.6's `sc.tl.score_genes` (Satija et al. 2015's Seurat
// AddModuleScore: the mean of the set's genes minus the mean of control genes drawn from the same
// expression bins) and `sc.tl.score_genes_cell_cycle` (Tirosh et al. 2016: S_score, G2M_score,
// phase).
//
// The control genes are drawn as scanpy draws them: genes binned by their mean over all cells
// (pandas rank(method='min') // round(n_genes / (n_bins - 1))), then for every bin holding a set
// gene, in ascending bin order, numpy's legacy RandomState(random_state).shuffle of that bin's genes
// (in var order) and its first ctrl_size genes kept. std::mt19937 seeded with random_state is
// numpy's MT19937 (init_genrand), and the shuffle is numpy's Fisher-Yates with its masked rejection
// sampling (random_interval), so the control set is scanpy's when the bins are (the bins can differ
// only where two genes' float64 means differ in the last bit).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dataset.hpp"
#include "exec/context.hpp"

namespace scurry {

struct ScoreGenesOptions {
  std::vector<std::string> gene_list;  // genes absent from the data are ignored (with a warning)
  int64_t ctrl_size = 50;
  std::vector<std::string> gene_pool;  // empty = every gene
  int n_bins = 25;
  std::string score_name = "score";
  std::optional<uint32_t> random_state = 0;  // unset = not reseeded (a fixed seed of 0 here)
  std::optional<bool> use_raw;               // unset = raw when present (scanpy 1.9)
};

struct ScoreGenesResult {
  std::vector<double> score;               // per cell
  std::vector<std::string> control_genes;  // in var order
  std::vector<std::string> genes_used;     // the set's genes found, in gene_list order
};

// Computes the scores (d.obs is not touched). On a GPU context; `gpus` (--gpus): several GPU contexts
// sharing the genes' sums and the cells' scores (ctx is the first; the same bits for any number).
ScoreGenesResult score_genes(const Dataset& d, const ScoreGenesOptions& opt, const Context& ctx,
                             const std::vector<Context*>& gpus = {});
// The same, written to obs[score_name] (float64).
ScoreGenesResult score_genes_inplace(Dataset& d, const ScoreGenesOptions& opt, const Context& ctx,
                                     const std::vector<Context*>& gpus = {});

// score_genes with ctrl_size = min(|s_genes|, |g2m_genes|) for each list (obs S_score, G2M_score),
// then obs['phase']: 'S', 'G2M' where G2M_score > S_score, 'G1' where both are negative
// (categorical, its observed categories sorted, as anndata writes pandas strings). `base` supplies
// n_bins, random_state, use_raw and gene_pool.
void score_genes_cell_cycle(Dataset& d, const std::vector<std::string>& s_genes,
                            const std::vector<std::string>& g2m_genes, const ScoreGenesOptions& base,
                            const Context& ctx, const std::vector<Context*>& gpus = {});

// Tirosh et al. 2016's S and G2M genes (the scanpy tutorial's regev_lab_cell_cycle_genes.txt).
const std::vector<std::string>& tirosh_s_genes();
const std::vector<std::string>& tirosh_g2m_genes();

}  // namespace scurry
