// kvlab.configs: recipes written in C++ (the baselines), what an experiment is, and the
// tables experiments print. The experiments themselves are files in configs/.
export module kvlab.configs;
export import :baselines;
export import :recipe_table;
export import :experiments;
