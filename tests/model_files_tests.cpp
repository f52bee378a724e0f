// Real trained models from ../shared/models (skipped, saying so, when the folder is absent):
// they load, predict text of their kind, agree across file formats, and rank recipes as
// compression predicts. Malformed model files are rejected with errors naming the problem.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shared_models.hpp"
#include "test_files.hpp"
import kvlab;

namespace {

// A TinyStories-like text written for these tests.
const std::string story =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big red ball under a tree. She ran to the ball and picked it up. It was very shiny and round. Lily wanted to "
    "share the ball with her friend Tom. She went to his house and knocked on the door. Tom opened the door and "
    "smiled. \"Do you want to play with my ball?\" Lily asked. Tom said, \"Yes, I love to play ball!\" They went to "
    "the park together and played all day. They threw the ball high in the sky and laughed. When the sun went down, "
    "they were very tired. They said goodbye and went home. Lily was happy because she had a good friend.\n"
    "One day, a little boy named Tim went to the store with his mom. He saw a big box of toys. He wanted a toy car, "
    "but his mom said no. Tim was sad. Then his mom said, \"If you help me clean the house, you can have the car.\" "
    "Tim helped his mom and got the car. He was very happy.";

kvlab::perplexity_result score(const kvlab::model_config& c, const kvlab::model_weights& w,
                               std::span<const std::int32_t> tokens, const std::string& recipe,
                               const kvlab::perplexity_options& o, const kvlab::scored_run* base = nullptr) {
  const auto run = kvlab::run_scored(c, w, tokens, kvlab::parse_recipe(recipe, kvlab::builtin_registry()), o);
  return kvlab::compare_with_base(base ? *base : run, run, c, recipe);
}

std::vector<float> dense_logits(const kvlab::model_config& c, const kvlab::model_weights& w,
                                std::span<const std::int32_t> tokens) {
  kvlab::dense_attention dense(c);
  return kvlab::forward(c, w, tokens, 0, dense, 0);
}

std::vector<std::int32_t> story_tokens(const kvlab::model& m) { return m.tokenizer->encode(story, true); }

// Rows of each head of a [heads * head_dim][in] matrix reordered from interleaved RoPE pairs
// (2j, 2j + 1) to half-split pairs (j, j + head_dim / 2), as transformers' conversion of
// llama2.c/Meta checkpoints does; `inverse` undoes it, as llama.cpp's converter does.
std::vector<float> permute_rope_rows(const std::vector<float>& w, std::size_t heads, std::size_t head_dim,
                                     std::size_t in, bool inverse = false) {
  std::vector<float> out(w.size());
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t j = 0; j < head_dim / 2; ++j)
      for (std::size_t half = 0; half < 2; ++half) {
        std::size_t interleaved = h * head_dim + 2 * j + half, split = h * head_dim + j + half * head_dim / 2;
        if (inverse) std::swap(interleaved, split);
        std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(interleaved * in), in,
                    out.begin() + static_cast<std::ptrdiff_t>(split * in));
      }
  return out;
}

// A Hugging Face folder (config.json, F32 model.safetensors) holding `w`, which must already
// pair RoPE channels half-split.
void write_hf_folder(const std::filesystem::path& folder, const kvlab::model_config& c, const kvlab::model_weights& w) {
  std::vector<std::pair<std::string, const std::vector<float>*>> tensors;
  std::vector<std::vector<std::size_t>> shapes;
  const std::size_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim, d = c.hidden;
  const auto add = [&](std::string name, const std::vector<float>& v, std::vector<std::size_t> shape) {
    tensors.emplace_back(std::move(name), &v);
    shapes.push_back(std::move(shape));
  };
  add("model.embed_tokens.weight", w.embedding, {c.vocab, d});
  for (std::size_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const auto& l = w.layers[i];
    add(p + "input_layernorm.weight", l.attention_norm, {d});
    add(p + "self_attn.q_proj.weight", l.wq, {q, d});
    add(p + "self_attn.k_proj.weight", l.wk, {kv, d});
    add(p + "self_attn.v_proj.weight", l.wv, {kv, d});
    add(p + "self_attn.o_proj.weight", l.wo, {d, q});
    add(p + "post_attention_layernorm.weight", l.ffn_norm, {d});
    add(p + "mlp.gate_proj.weight", l.w_gate, {c.ffn, d});
    add(p + "mlp.up_proj.weight", l.w_up, {c.ffn, d});
    add(p + "mlp.down_proj.weight", l.w_down, {d, c.ffn});
  }
  add("model.norm.weight", w.final_norm, {d});
  std::string header = "{";
  std::size_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::string shape;
    for (const auto s : shapes[i]) shape += (shape.empty() ? "" : ",") + std::to_string(s);
    const std::size_t bytes = tensors[i].second->size() * 4;
    header += (i ? "," : "") +
              ("\"" + tensors[i].first + "\":{\"dtype\":\"F32\",\"shape\":[" + shape + "],\"data_offsets\":[" +
               std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}");
    offset += bytes;
  }
  header += "}";
  std::ofstream out(folder / "model.safetensors", std::ios::binary);
  const std::uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header;
  for (const auto& [name, values] : tensors)
    out.write(reinterpret_cast<const char*>(values->data()), static_cast<std::streamsize>(values->size() * 4));
  BOOST_REQUIRE(out.good());
  std::ofstream config(folder / "config.json");
  config << "{\"model_type\": \"llama\", \"hidden_size\": " << d << ", \"intermediate_size\": " << c.ffn
         << ", \"num_hidden_layers\": " << c.layers << ", \"num_attention_heads\": " << c.heads
         << ", \"num_key_value_heads\": " << c.kv_heads << ", \"vocab_size\": " << c.vocab
         << ", \"max_position_embeddings\": " << c.context << ", \"rms_norm_eps\": " << c.norm_eps
         << ", \"rope_theta\": " << c.rope_theta << ", \"tie_word_embeddings\": true, \"rope_scaling\": null}";
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return largest / scale;
}

} // namespace

BOOST_AUTO_TEST_SUITE(model_files)

BOOST_AUTO_TEST_CASE(trained_models_predict_text_of_their_kind_and_random_weights_do_not) {
  const auto stories = kvlab_test::shared_model_file("stories260K/stories260K.bin");
  const auto tinystories = kvlab_test::shared_model_file("tinystories-656k/model.safetensors");
  const auto shakespeare = kvlab_test::shared_model_file("shakespeare-hd64/shakespeare-hd64.bin");
  const auto heldout = kvlab_test::shared_model_file("shakespeare-hd64/heldout.txt");
  if (!stories || !tinystories || !shakespeare || !heldout) return;
  const auto check = [](const kvlab::model& m, const std::vector<std::int32_t>& tokens, std::size_t context,
                        double most) {
    const kvlab::perplexity_options o{.context = context, .chunk_bos = m.tokenizer->bos()};
    const double trained = score(m.config, m.weights, tokens, "k=f32@token,v=f32@token", o).ppl.value;
    const double random =
        score(m.config, kvlab::random_weights(m.config, 1), tokens, "k=f32@token,v=f32@token", o).ppl.value;
    BOOST_TEST_MESSAGE(m.path.string() << ": PPL " << trained << ", random weights " << random << ", vocabulary "
                                       << m.config.vocab);
    BOOST_TEST(trained < most);
    const auto vocab = static_cast<double>(m.config.vocab);
    BOOST_TEST((random > 0.5 * vocab && random < 2.0 * vocab));
  };
  const kvlab::model s = kvlab::load_model(*stories);
  check(s, story_tokens(s), 128, 10.0);
  const kvlab::model t = kvlab::load_model(tinystories->parent_path());
  BOOST_TEST((t.tokenizer->bos() == std::optional<std::int32_t>(1)));
  check(t, story_tokens(t), 128, 20.0);
  const kvlab::model h = kvlab::load_model(*shakespeare);
  std::ifstream in(*heldout);
  std::string text(8192, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  check(h, h.tokenizer->encode(text, true), 256, 8.0);
}

BOOST_AUTO_TEST_CASE(gguf_hugging_face_and_llama2c_loaders_agree_on_logits) {
  const auto stories = kvlab_test::shared_model_file("stories260K/stories260K.bin");
  if (!stories) return;
  const kvlab::model m = kvlab::load_model(*stories);
  const auto tokens = story_tokens(m);
  const auto reference = dense_logits(m.config, m.weights, std::span(tokens).first(64));
  kvlab_test::scratch_directory dir("loaders");

  // GGUF as llama.cpp writes a llama model: the same interleaved pairs, the same floats.
  kvlab::write_gguf_model(dir.path() / "f32.gguf", m.config, m.weights, kvlab::ggml_type::f32);
  const auto gguf = kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "f32.gguf"));
  BOOST_TEST(dense_logits(gguf.config, gguf.weights, std::span(tokens).first(64)) == reference);

  // Hugging Face pairs RoPE channels half-split: the same model with q and k rows permuted.
  kvlab::model_config split = m.config;
  split.rope = kvlab::rope_pairing::half_split;
  kvlab::model_weights permuted = m.weights;
  for (auto& l : permuted.layers) {
    l.wq = permute_rope_rows(l.wq, split.heads, split.head_dim, split.hidden);
    l.wk = permute_rope_rows(l.wk, split.kv_heads, split.head_dim, split.hidden);
  }
  std::filesystem::create_directory(dir.path() / "hf");
  write_hf_folder(dir.path() / "hf", split, permuted);
  const auto hf = kvlab::load_hf_weights(dir.path() / "hf");
  BOOST_TEST(hf.weights.layers[2].wq == permuted.layers[2].wq);
  BOOST_TEST((hf.config.rope == kvlab::rope_pairing::half_split && hf.config.tied_output));
  // q.k sums the channels in another order, so the logits agree to float rounding, not bits.
  const auto hf_logits = dense_logits(hf.config, hf.weights, std::span(tokens).first(64));
  BOOST_TEST(max_relative_difference(hf_logits, reference) < 1e-5);

  // F16 weights load and stay close.
  kvlab::write_gguf_model(dir.path() / "f16.gguf", m.config, m.weights, kvlab::ggml_type::f16);
  const auto f16 = kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "f16.gguf"));
  const double drift =
      max_relative_difference(dense_logits(f16.config, f16.weights, std::span(tokens).first(64)), reference);
  BOOST_TEST((drift > 0.0 && drift < 0.01));
}

BOOST_AUTO_TEST_CASE(ppl_ranks_recipes_on_stories260k) {
  const auto stories = kvlab_test::shared_model_file("stories260K/stories260K.bin");
  if (!stories) return;
  const kvlab::model m = kvlab::load_model(*stories);
  const auto tokens = story_tokens(m);
  const kvlab::perplexity_options o{.context = 64, .chunk_bos = m.tokenizer->bos()};
  const auto base = kvlab::run_scored(m.config, m.weights, tokens,
                                      kvlab::parse_recipe("k=f16@token,v=f16@token", kvlab::builtin_registry()), o);
  const auto kld = [&](const std::string& recipe) {
    const auto r = score(m.config, m.weights, tokens, recipe, o, &base);
    BOOST_TEST_MESSAGE(recipe << ": KLD " << r.kld.value << ", PPL " << r.ppl.value);
    BOOST_TEST((std::isfinite(r.ppl.value) && std::isfinite(r.kld.value) && std::isfinite(r.attn_rel_l2)));
    return r.kld.value;
  };
  const double f32 = kld("k=f32@token,v=f32@token"), int8 = kld("k=int8@token,v=int8@token");
  const double int4 = kld("k=int4@token,v=int4@token"), int2 = kld("k=int2@token,v=int2@token");
  BOOST_TEST(f32 < 1e-4);
  BOOST_TEST(int8 < int4);
  BOOST_TEST(int4 < int2);
  kld("k=uint2@channel(32),v=uint2@group(8),residual=16");
  kld("k=f16@token,v=f16@token,evict=h2o(0.25,0.25)");
}

BOOST_AUTO_TEST_CASE(quantized_gguf_weights_load_close_to_their_source) {
  const kvlab::model_config c{
      .layers = 2, .hidden = 64, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 128, .vocab = 96, .context = 64};
  const kvlab::model_weights w = kvlab::random_weights(c, 11);
  std::vector<std::int32_t> tokens(32);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 5 % c.vocab);
  const auto reference = dense_logits(c, w, tokens);
  kvlab_test::scratch_directory dir("quantized");
  double previous = 0.0;
  for (const auto type : {kvlab::ggml_type::bf16, kvlab::ggml_type::q8_0, kvlab::ggml_type::q4_0}) {
    kvlab::write_gguf_model(dir.path() / "m.gguf", c, w, type);
    const auto loaded = kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "m.gguf"));
    const double drift = max_relative_difference(dense_logits(loaded.config, loaded.weights, tokens), reference);
    BOOST_TEST_MESSAGE(kvlab::ggml_type_name(type) << ": logits drift " << drift);
    BOOST_TEST((drift > previous && drift < 0.5)); // coarser formats drift more
    previous = drift;
  }
}

BOOST_AUTO_TEST_CASE(model_data_spec_gives_a_real_workload) {
  const auto stories = kvlab_test::shared_model_file("stories260K/stories260K.bin");
  if (!stories) return;
  kvlab_test::scratch_directory dir("spec");
  const auto text = dir.write("story.txt", story);
  const std::string spec = "model:" + stories->string() + ",text=" + text.string() + ",tokens=96";
  const kvlab::kv_data data = kvlab::load_data(spec);
  BOOST_TEST((data.keys.shape() == kvlab::kv_shape{5, 4, 96, 8}));
  BOOST_TEST((data.queries.shape() == kvlab::kv_shape{5, 8, 96, 8}));
  BOOST_TEST(data.source == spec);
  const auto& c = kvlab::builtin_registry();
  const auto int8 = kvlab::evaluate(kvlab::parse_recipe("k=int8@token,v=int8@token", c), data, {.decode_steps = 16});
  BOOST_TEST((int8.metric("attn_rel_l2").mean > 0.0 && int8.metric("attn_rel_l2").mean < 0.2));
  const auto expect_error = [&](const std::string& bad, const std::string& fragment) {
    BOOST_CHECK_EXCEPTION(kvlab::load_data(bad), kvlab::error, [&](const kvlab::error& e) {
      const bool found = std::string(e.what()).find(fragment) != std::string::npos;
      if (!found) BOOST_TEST_MESSAGE("message: " << e.what());
      return found;
    });
  };
  expect_error("model:" + stories->string(), "text=FILE is missing");
  expect_error("model:" + stories->string() + ",txt=a", "unknown key 'txt'; allowed: text, tokens, tokenizer");
  expect_error("model:" + stories->string() + ",text=" + text.string() + ",tokens=100000", "tokens=100000 but");
  expect_error("model:,text=x", "no model path after 'model:'");
}

BOOST_AUTO_TEST_CASE(malformed_model_files_are_rejected_naming_the_problem) {
  const auto expect_error = [](auto load, const std::string& fragment) {
    BOOST_CHECK_EXCEPTION(load(), kvlab::error, [&](const kvlab::error& e) {
      const bool found = std::string(e.what()).find(fragment) != std::string::npos;
      if (!found) BOOST_TEST_MESSAGE("message: " << e.what());
      return found;
    });
  };
  kvlab_test::scratch_directory dir("bad_models");
  const kvlab::model_config c{
      .layers = 1, .hidden = 32, .heads = 2, .kv_heads = 1, .head_dim = 16, .ffn = 48, .vocab = 40, .context = 64};
  const kvlab::model_weights w = kvlab::random_weights(c, 5);
  // GGUF: wrong architecture, a missing tensor, a wrong shape, a truncated file.
  kvlab::write_gguf(dir.path() / "arch.gguf",
                    std::vector<kvlab::gguf_metadata_item>{{"general.architecture", std::string("gpt2")}}, {});
  expect_error([&] { return kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "arch.gguf")); },
               "general.architecture is 'gpt2'; kvlab runs 'llama' and 'qwen2'");
  kvlab::write_gguf_model(dir.path() / "good.gguf", c, w, kvlab::ggml_type::f32);
  const std::string good = dir.read("good.gguf");
  dir.write("truncated.gguf", good.substr(0, good.size() - 100));
  expect_error([&] { return kvlab::load_model(dir.path() / "truncated.gguf"); }, "truncated");
  kvlab::model_config wrong = c;
  wrong.ffn = 64;
  kvlab::write_gguf_model(dir.path() / "shape.gguf", wrong, kvlab::random_weights(wrong, 5), kvlab::ggml_type::f32);
  {
    // Metadata claims FFN 48 while the tensors hold 64: rewrite with the other config's metadata.
    const kvlab::gguf_file file(dir.path() / "shape.gguf");
    std::vector<kvlab::gguf_tensor_input> tensors;
    std::vector<std::vector<float>> values;
    for (const auto& t : file.tensors()) {
      values.emplace_back(t.element_count());
      kvlab::dequantize(t, values.back());
    }
    for (std::size_t i = 0; i < file.tensors().size(); ++i)
      tensors.push_back({file.tensors()[i].name, file.tensors()[i].dims, kvlab::ggml_type::f32, values[i]});
    std::vector<kvlab::gguf_metadata_item> metadata;
    const kvlab::gguf_file good_file(dir.path() / "good.gguf");
    for (const auto key : good_file.keys()) {
      if (key == "general.architecture")
        metadata.push_back({std::string(key), std::string(good_file.get_string(key))});
      else if (key.ends_with("freq_base") || key.ends_with("epsilon"))
        metadata.push_back({std::string(key), static_cast<float>(good_file.get_float(key))});
      else
        metadata.push_back({std::string(key), static_cast<std::uint32_t>(good_file.get_uint(key))});
    }
    kvlab::write_gguf(dir.path() / "mismatch.gguf", metadata, tensors);
    expect_error([&] { return kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "mismatch.gguf")); },
                 "tensor 'blk.0.ffn_gate.weight' has ggml shape [32, 64]; the metadata gives [32, 48]");
    tensors.clear();
    values.clear();
    for (const auto& t : good_file.tensors()) {
      values.emplace_back(t.element_count());
      kvlab::dequantize(t, values.back());
    }
    for (std::size_t i = 0; i + 1 < good_file.tensors().size(); ++i) // all but output_norm.weight
      tensors.push_back({good_file.tensors()[i].name, good_file.tensors()[i].dims, kvlab::ggml_type::f32, values[i]});
    kvlab::write_gguf(dir.path() / "missing.gguf", metadata, tensors);
    expect_error([&] { return kvlab::load_gguf_weights(kvlab::gguf_file(dir.path() / "missing.gguf")); },
                 "no tensor named 'output_norm.weight'");
  }
  // Hugging Face: no config, an unsupported model type, a missing field, a truncated shard.
  std::filesystem::create_directory(dir.path() / "hf");
  expect_error([&] { return kvlab::load_model(dir.path() / "hf"); }, "no config.json");
  kvlab::model_config split = c;
  split.rope = kvlab::rope_pairing::half_split;
  write_hf_folder(dir.path() / "hf", split, w);
  BOOST_TEST(kvlab::load_hf_weights(dir.path() / "hf").weights.layers[0].w_up == w.layers[0].w_up);
  const std::string config = dir.read("hf/config.json"), shard = dir.read("hf/model.safetensors");
  dir.write("hf/config.json", "{\"model_type\": \"mistral\"}");
  expect_error([&] { return kvlab::load_hf_weights(dir.path() / "hf"); }, "model_type \"mistral\" is not supported");
  dir.write("hf/config.json", "{\"model_type\": \"llama\", \"hidden_size\": 32}");
  expect_error([&] { return kvlab::load_hf_weights(dir.path() / "hf"); }, "field \"num_hidden_layers\" is missing");
  dir.write("hf/config.json", config);
  dir.write("hf/model.safetensors", shard.substr(0, shard.size() - 4));
  expect_error([&] { return kvlab::load_hf_weights(dir.path() / "hf"); }, "is the file truncated?");
  std::string wrong_hidden = config;
  wrong_hidden.replace(wrong_hidden.find("\"intermediate_size\": 48"), 23, "\"intermediate_size\": 40");
  dir.write("hf/config.json", wrong_hidden);
  dir.write("hf/model.safetensors", shard);
  expect_error([&] { return kvlab::load_hf_weights(dir.path() / "hf"); },
               "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [48, 32]; config.json gives [40, 32]");
}

BOOST_AUTO_TEST_SUITE_END()
