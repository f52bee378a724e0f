// kvlab: the umbrella module. Re-exports every part; nothing is defined here.
export module kvlab;
export import kvlab.core;
export import kvlab.simd;
export import kvlab.cache;
export import kvlab.attention;
export import kvlab.metrics;
export import kvlab.data;
export import kvlab.data.llm;
export import kvlab.npy;
export import kvlab.data.files;
export import kvlab.report;
export import kvlab.eval;
export import kvlab.codec;
export import kvlab.registry_builtin;
export import kvlab.configs;
