// kvlab.configs: recipes and experiments written in C++, one file per paper or table.
export module kvlab.configs;
export import :baselines;
export import :recipe_table;
export import :quantizer_distortion;
export import :kivi_ablation;
export import :eviction_budget;
export import :experiments;
