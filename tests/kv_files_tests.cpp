// KV dump loaders (kvlab.data.files): npy directories written with write_npy (and a float16 file
// by hand), .safetensors files built byte by byte from the format definition (github.com/
// huggingface/safetensors README, "Format"), exact round trips, and every kind of malformed input.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
import kvlab;

using namespace kvlab_test;

using namespace std::string_literals;

namespace {

std::string little_endian(std::uint64_t value, std::size_t bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

std::string float32_bytes(std::span<const float> values) {
  std::string out;
  for (const float value : values) out += little_endian(std::bit_cast<std::uint32_t>(value), 4);
  return out;
}

// Distinct, exactly representable float32 values (multiples of 1/8 in [-6, 6]).
std::vector<float> float32_values(std::size_t count, std::size_t seed) {
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = static_cast<float>(static_cast<int>((i * 37 + seed * 11) % 97) - 48) * 0.125f;
  return values;
}

// float16 bit patterns with their exact values, written out from IEEE 754 binary16.
constexpr std::array<std::pair<std::uint16_t, float>, 10> float16_table = {{
    {0x3c00, 1.0f},
    {0xc000, -2.0f},
    {0x7bff, 65504.0f},
    {0x0001, 0x1p-24f}, // smallest subnormal
    {0x3555, 0.333251953125f},
    {0x8000, -0.0f},
    {0x3800, 0.5f},
    {0xfbff, -65504.0f},
    {0x0400, 0x1p-14f}, // smallest normal
    {0x4248, 3.140625f},
}};

// bfloat16 is the upper half of a float32, so these bits are those of the float32 value.
constexpr std::array<std::uint16_t, 7> bfloat16_bits = {0x3f80, 0xbfc0, 0x4040, 0x3e20, 0x7f7f, 0x0001, 0x8000};
float bfloat16_value(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

kvlab::kv_tensor tensor_of(kvlab::kv_shape shape, std::span<const float> values) {
  kvlab::kv_tensor tensor(shape);
  BOOST_REQUIRE_EQUAL(values.size(), tensor.values().size());
  std::copy(values.begin(), values.end(), tensor.values().begin());
  return tensor;
}

std::vector<std::size_t> dims(const kvlab::kv_shape& shape) {
  return {shape.layers, shape.heads, shape.tokens, shape.head_dim};
}

void write_npy_tensor(const scratch_directory& dir, const std::string& name, const std::vector<std::size_t>& shape,
                      std::size_t seed) {
  std::size_t count = 1;
  for (const std::size_t dimension : shape) count *= dimension;
  kvlab::write_npy(dir.path() / name, shape, float32_values(count, seed));
}

std::string npy_dir_error(const std::filesystem::path& dir) {
  return kvlab_test::message_of<kvlab::error>([&] { kvlab::load_npy_dir(dir); });
}

// A well-formed dump directory with K/V [L, H, T, D] and Q [L, Q, T, D], then the test breaks one file.
struct npy_dump {
  scratch_directory dir{"npy"};
  npy_dump(std::vector<std::size_t> kv, std::vector<std::size_t> q) {
    write_npy_tensor(dir, "K.npy", kv, 1);
    write_npy_tensor(dir, "V.npy", kv, 2);
    write_npy_tensor(dir, "Q.npy", q, 3);
  }
};

// ---- safetensors files, byte by byte ----

// The format: 8 bytes N (little-endian u64), N bytes of JSON header, then the data buffer.
std::string safetensors_file(const std::string& header, const std::string& data) {
  return little_endian(header.size(), 8) + header + data;
}

struct tensor_entry {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin;
  std::uint64_t end;
};

std::string header_json(const std::vector<tensor_entry>& entries) {
  std::string json = "{";
  for (const auto& entry : entries) {
    std::string shape;
    for (const auto dimension : entry.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(dimension);
    json += (json.size() == 1 ? "" : ", ") +
            ("\"" + entry.name + "\": {\"dtype\": \"" + entry.dtype + "\", \"shape\": [" + shape +
             "], \"data_offsets\": [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]}");
  }
  return json + "}";
}

// The smallest valid dump: k, v [1, 1, 2, 2] and q [1, 2, 2, 2], F32, in 64 data bytes.
std::vector<tensor_entry> small_dump_entries() {
  return {{"k", "F32", {1, 1, 2, 2}, 0, 16}, {"v", "F32", {1, 1, 2, 2}, 16, 32}, {"q", "F32", {1, 2, 2, 2}, 32, 64}};
}

std::string load_error(const std::filesystem::path& file) {
  return kvlab_test::message_of<kvlab::error>([&] { kvlab::load_safetensors(file); });
}

// Loads a file of these bytes and returns the message, which must name the file.
std::string safetensors_error_of(const std::string& bytes) {
  const scratch_directory dir("st");
  const auto file = dir.write("dump.safetensors", bytes);
  const std::string message = load_error(file);
  BOOST_TEST(contains(message, "safetensors file '" + file.string() + "'"), message);
  return message;
}

std::string safetensors_error_of(const std::vector<tensor_entry>& entries, std::size_t data_bytes) {
  return safetensors_error_of(safetensors_file(header_json(entries), std::string(data_bytes, '\0')));
}

kvlab::kv_data gqa_workload() {
  const kvlab::kv_shape kv{2, 2, 3, 4}, q{2, 4, 3, 4};
  return {tensor_of(kv, float32_values(kv.elements(), 1)), tensor_of(kv, float32_values(kv.elements(), 2)),
          tensor_of(q, float32_values(q.elements(), 3)), "test"};
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_files)

// ---------------------------------------------------------------------------------------------
// npy directories

BOOST_AUTO_TEST_CASE(npy_dir_round_trips_float32_with_gqa) {
  const kvlab::kv_data expected = gqa_workload();
  const scratch_directory dir("npy");
  kvlab::write_npy(dir.path() / "K.npy", dims(expected.keys.shape()), expected.keys.values());
  kvlab::write_npy(dir.path() / "V.npy", dims(expected.values.shape()), expected.values.values());
  kvlab::write_npy(dir.path() / "Q.npy", dims(expected.queries.shape()), expected.queries.values());

  const kvlab::kv_data data = kvlab::load_npy_dir(dir.path());
  BOOST_TEST((data.keys.shape() == expected.keys.shape()));
  BOOST_TEST((data.values.shape() == expected.values.shape()));
  BOOST_TEST((data.queries.shape() == expected.queries.shape()));
  BOOST_TEST(data.kv_heads() == 2u);
  BOOST_TEST(data.q_heads() == 4u);
  BOOST_TEST(same_bits(data.keys.values(), expected.keys.values()));
  BOOST_TEST(same_bits(data.values.values(), expected.values.values()));
  BOOST_TEST(same_bits(data.queries.values(), expected.queries.values()));
  BOOST_TEST(data.source == "npy:" + dir.path().string());
  kvlab::check_consistent(data);
}

BOOST_AUTO_TEST_CASE(npy_dir_reads_a_hand_written_float16_file) {
  // K.npy as np.save writes np.array(..., dtype='<f2') of shape (1, 2, 3, 4).
  std::string data;
  std::vector<float> expected;
  for (std::size_t i = 0; i < 24; ++i) {
    const auto& [bits, value] = float16_table[i % float16_table.size()];
    data += little_endian(bits, 2);
    expected.push_back(value);
  }
  const scratch_directory dir("npy_f16");
  dir.write("K.npy", npy_version_1_file("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 3, 4), }", data));
  write_npy_tensor(dir, "V.npy", {1, 2, 3, 4}, 2);
  write_npy_tensor(dir, "Q.npy", {1, 2, 3, 4}, 3);

  const kvlab::kv_data loaded = kvlab::load_npy_dir(dir.path());
  BOOST_TEST((loaded.keys.shape() == (kvlab::kv_shape{1, 2, 3, 4})));
  BOOST_TEST(same_bits(loaded.keys.values(), expected));
  BOOST_TEST(same_bits(loaded.values.values(), float32_values(24, 2)));
}

BOOST_AUTO_TEST_CASE(npy_dir_missing_file_is_named) {
  const npy_dump dump({1, 2, 4, 8}, {1, 2, 4, 8});
  std::filesystem::remove(dump.dir.path() / "V.npy");
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, dump.dir.path().string()), message);
  BOOST_TEST(contains(message, "V.npy is missing"), message);
}

BOOST_AUTO_TEST_CASE(npy_dir_missing_directory_is_named) {
  const auto missing = unique_temp_path("no_such_dir");
  const std::string message = npy_dir_error(missing);
  BOOST_TEST(contains(message, "npy dump '" + missing.string() + "': no such directory"), message);
}

BOOST_AUTO_TEST_CASE(npy_dir_wrong_rank) {
  const npy_dump dump({1, 2, 4, 8}, {1, 2, 4, 8});
  write_npy_tensor(dump.dir, "K.npy", {2, 4, 8}, 1);
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, "K.npy has 3 dimensions (shape [2, 4, 8]), expected 4: "
                               "[layers, kv_heads, tokens, head_dim]"),
             message);
}

BOOST_AUTO_TEST_CASE(npy_dir_keys_and_values_differ) {
  const npy_dump dump({1, 2, 4, 8}, {1, 2, 4, 8});
  write_npy_tensor(dump.dir, "V.npy", {1, 2, 5, 8}, 2);
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, "K.npy has shape [1, 2, 4, 8] but V.npy has shape [1, 2, 5, 8]"), message);
}

BOOST_AUTO_TEST_CASE(npy_dir_queries_differ_in_tokens) {
  const npy_dump dump({2, 2, 4, 8}, {2, 4, 3, 8});
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, "Q.npy has shape [2, 4, 3, 8], expected [2, q_heads, 4, 8]"), message);
}

BOOST_AUTO_TEST_CASE(npy_dir_inconsistent_gqa_ratio) {
  const npy_dump dump({1, 2, 4, 8}, {1, 3, 4, 8});
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, "inconsistent GQA ratio: Q.npy has 3 query heads, not a multiple of the 2 KV heads"),
             message);
}

BOOST_AUTO_TEST_CASE(npy_dir_zero_dimension) {
  const npy_dump dump({1, 2, 4, 8}, {1, 2, 4, 8});
  dump.dir.write("Q.npy", npy_version_1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 0, 4, 8), }", ""));
  const std::string message = npy_dir_error(dump.dir.path());
  BOOST_TEST(contains(message, (dump.dir.path() / "Q.npy").string()), message);
  BOOST_TEST(contains(message, "zero dimension"), message);
}

// ---------------------------------------------------------------------------------------------
// safetensors: well-formed files

BOOST_AUTO_TEST_CASE(safetensors_reads_hand_written_f32_f16_bf16_with_metadata) {
  // k F32, v F16, q BF16 (GQA 2 -> 4 heads), an ignored I64 tensor, "__metadata__" with escapes,
  // keys in non-alphabetical order, data in yet another order, header padded with spaces.
  const kvlab::kv_shape kv{2, 2, 3, 4}, q{2, 4, 3, 4};
  const std::vector<float> keys = float32_values(kv.elements(), 7);
  std::string keys_data = float32_bytes(keys), values_data, queries_data;
  std::vector<float> values, queries;
  for (std::size_t i = 0; i < kv.elements(); ++i) {
    const auto& [bits, value] = float16_table[(i * 3) % float16_table.size()];
    values_data += little_endian(bits, 2);
    values.push_back(value);
  }
  for (std::size_t i = 0; i < q.elements(); ++i) {
    const std::uint16_t bits = bfloat16_bits[i % bfloat16_bits.size()];
    queries_data += little_endian(bits, 2);
    queries.push_back(bfloat16_value(bits));
  }
  const std::string positions_data = little_endian(0, 8) + little_endian(1, 8) + little_endian(2, 8);
  BOOST_REQUIRE_EQUAL(values_data.size(), 96u);
  BOOST_REQUIRE_EQUAL(queries_data.size(), 192u);
  BOOST_REQUIRE_EQUAL(keys_data.size(), 192u);
  // Data order: v [0, 96), q [96, 288), positions [288, 312), k [312, 504).
  std::string header = "{\n"
                       "  \"v\": {\"dtype\": \"F16\", \"shape\": [2, 2, 3, 4], \"data_offsets\": [0, 96]},\n"
                       "  \"__metadata__\": {\"format\": \"pt\", \"note\": \"tab\\there \\\"quoted\\\" "
                       "\\u00e9 \\ud83d\\ude00 back\\\\slash\\/\"},\n"
                       "  \"q\" : {\"shape\":[2,4,3,4],\"data_offsets\":[96,288],\"dtype\":\"BF16\"},\n"
                       "  \"position_ids\": {\"dtype\": \"I64\", \"shape\": [3], \"data_offsets\": [288, 312]},\n"
                       "  \"k\": {\"dtype\": \"F32\", \"shape\": [2, 2, 3, 4], \"data_offsets\": [312, 504]}\n"
                       "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const scratch_directory dir("st_mixed");
  const auto file =
      dir.write("dump.safetensors", safetensors_file(header, values_data + queries_data + positions_data + keys_data));

  const kvlab::kv_data data = kvlab::load_safetensors(file);
  BOOST_TEST((data.keys.shape() == kv));
  BOOST_TEST((data.values.shape() == kv));
  BOOST_TEST((data.queries.shape() == q));
  BOOST_TEST(same_bits(data.keys.values(), keys));
  BOOST_TEST(same_bits(data.values.values(), values));
  BOOST_TEST(same_bits(data.queries.values(), queries));
  BOOST_TEST(data.source == "safetensors:" + file.string());
  kvlab::check_consistent(data);
}

BOOST_AUTO_TEST_CASE(safetensors_write_then_load_is_bit_exact) {
  kvlab::kv_data data = gqa_workload();
  // Values a careless writer or reader would change: signed zero, subnormals, extremes, Inf, NaN payloads.
  const std::array<float, 7> specials = {-0.0f,
                                         1e-45f,
                                         -1.17549435e-38f,
                                         3.40282347e38f,
                                         std::bit_cast<float>(0x7f800000u),
                                         std::bit_cast<float>(0x7fc01234u),
                                         std::bit_cast<float>(0xffa00001u)};
  std::copy(specials.begin(), specials.end(), data.keys.values().begin());
  std::copy(specials.begin(), specials.end(), data.queries.values().begin() + 40);
  const scratch_directory dir("st_round_trip");
  const auto file = dir.path() / "dump.safetensors";
  dir.write("dump.safetensors", "an older file that is replaced");
  kvlab::write_safetensors(file, data);

  const kvlab::kv_data loaded = kvlab::load_safetensors(file);
  BOOST_TEST((loaded.keys.shape() == data.keys.shape()));
  BOOST_TEST((loaded.values.shape() == data.values.shape()));
  BOOST_TEST((loaded.queries.shape() == data.queries.shape()));
  BOOST_TEST(same_bits(loaded.keys.values(), data.keys.values()));
  BOOST_TEST(same_bits(loaded.values.values(), data.values.values()));
  BOOST_TEST(same_bits(loaded.queries.values(), data.queries.values()));
  BOOST_TEST(loaded.source == "safetensors:" + file.string());

  // The bytes the reference writer produces: compact JSON, tensors sorted by name (equal
  // dtypes), header padded with spaces to a multiple of 8, data in header order.
  std::string header = R"({"k":{"dtype":"F32","shape":[2,2,3,4],"data_offsets":[0,192]},)"
                       R"("q":{"dtype":"F32","shape":[2,4,3,4],"data_offsets":[192,576]},)"
                       R"("v":{"dtype":"F32","shape":[2,2,3,4],"data_offsets":[576,768]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  BOOST_TEST(header.size() % 8 == 0u);
  const std::string expected =
      safetensors_file(header, float32_bytes(data.keys.values()) + float32_bytes(data.queries.values()) +
                                   float32_bytes(data.values.values()));
  BOOST_TEST(dir.read("dump.safetensors") == expected);
  // Written atomically: no temporary file is left behind.
  BOOST_TEST(dir.entries() == std::vector<std::string>{"dump.safetensors"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(safetensors_write_refuses_inconsistent_data) {
  kvlab::kv_data data = gqa_workload();
  data.queries = kvlab::kv_tensor({2, 3, 3, 4});
  const scratch_directory dir("st_refuse");
  const auto file = dir.path() / "dump.safetensors";
  const std::string message = kvlab_test::message_of<kvlab::error>([&] { kvlab::write_safetensors(file, data); });
  BOOST_TEST(contains(message, "safetensors file '" + file.string() + "': cannot write: inconsistent GQA ratio"),
             message);
  BOOST_TEST(dir.entries().empty());
}

// ---------------------------------------------------------------------------------------------
// safetensors: one test per kind of malformed file

BOOST_AUTO_TEST_CASE(safetensors_missing_file) {
  const auto missing = unique_temp_path("missing.safetensors");
  const std::string message = load_error(missing);
  BOOST_TEST(contains(message, "safetensors file '" + missing.string() + "': cannot open: no such file"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_file_too_short) {
  const std::string message = safetensors_error_of("\x10\0\0\0\0"s);
  BOOST_TEST(contains(message, "file too short: it has 5 bytes, fewer than the 8-byte header length"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_header_length_larger_than_file) {
  const std::string message = safetensors_error_of(little_endian(1000, 8) + "{}");
  BOOST_TEST(contains(message, "header length 1000 bytes is larger than the file: only 2 bytes follow"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_header_length_absurd) {
  // Larger than the format's 100 MB limit: refused before anything is allocated or read.
  const std::string message = safetensors_error_of(little_endian(100'000'001, 8) + "{}");
  BOOST_TEST(contains(message, "absurd header length 100000001 bytes, more than the 100000000"), message);
  const std::string huge = safetensors_error_of(little_endian(0xffffffffffffffffull, 8) + "{}");
  BOOST_TEST(contains(huge, "absurd header length 18446744073709551615 bytes"), huge);
}

BOOST_AUTO_TEST_CASE(safetensors_invalid_json_names_the_byte) {
  struct json_case {
    std::string header;
    std::size_t byte;
    std::string problem;
  };
  const std::vector<json_case> cases = {
      {R"({"k":{"dtype":"F32",,}})", 20, "expected a string key, found ','"},
      {R"({"a": [1, 2,]})", 12, "a trailing comma is not JSON"},
      {R"({"a": 1.5})", 6, "only whole numbers are allowed"},
      {R"({"a": 1e3})", 6, "only whole numbers are allowed"},
      {R"({"a": -1})", 6, "negative numbers are not allowed"},
      {R"({"a": 01})", 6, "leading zeros"},
      {R"({"a": 99999999999999999999})", 6, "does not fit in 64 bits"},
      {R"({"a": true})", 6, "the literal 'true' is not allowed"},
      {R"({"a": null})", 6, "the literal 'null' is not allowed"},
      {R"({"a": "abc})", 6, "unterminated string"},
      {R"({"a": "\q"})", 7, "invalid escape '\\q'"},
      {R"({"a": "\u12G4"})", 7, "\\u must be followed by 4 hexadecimal digits"},
      {R"({"a": "\ud800x"})", 7, "high surrogate not followed by a low surrogate"},
      {R"({"a": "\udc00"})", 7, "low surrogate without a high surrogate"},
      {"{\"a\": \"x\ny\"}", 8, "control character \\x0a in a string must be escaped"},
      {R"({"a" 1})", 5, "expected ':' after the key \"a\""},
      {R"({"a": 1)", 7, "expected ',' or '}' after a member of an object, found the end of the text"},
      {R"({"a": 1} x)", 9, "unexpected 'x' after the JSON value"},
      {R"( {"a": 1})", 0, "the header must begin with '{'"},
      {R"([1, 2])", 0, "the header must begin with '{'"},
      {"", 0, "the header is empty"},
      {R"({"a": 1, "a": 2})", 9, "duplicate key \"a\""},
      {R"({"a": @})", 6, "expected a value (object, array, string, number, true, false or null), found '@'"},
      {"{\"a\": " + std::string(70, '[') + std::string(70, ']') + "}", 69, "nest deeper than 64 levels"},
  };
  for (const auto& [header, byte, problem] : cases) {
    const std::string message = safetensors_error_of(safetensors_file(header, ""));
    BOOST_TEST(contains(message, "invalid JSON header at byte " + std::to_string(byte) + " (file offset " +
                                     std::to_string(byte + 8) + "): "),
               header << " -> " << message);
    BOOST_TEST(contains(message, problem), header << " -> " << message);
  }
}

BOOST_AUTO_TEST_CASE(safetensors_header_not_utf8) {
  const std::string message = safetensors_error_of(safetensors_file("{\"k\xff\": 1}", ""));
  BOOST_TEST(contains(message, "invalid JSON header at byte 3 (file offset 11): not valid UTF-8"), message);
  // An overlong encoding of '/' and an encoded surrogate are not UTF-8 either.
  for (const std::string key : {"\xc0\xaf", "\xed\xa0\x80"})
    BOOST_TEST(contains(safetensors_error_of(safetensors_file("{\"" + key + "\": 1}", "")),
                        "at byte 2 (file offset 10): not valid UTF-8"));
}

BOOST_AUTO_TEST_CASE(safetensors_missing_tensor) {
  auto entries = small_dump_entries();
  entries.pop_back(); // no q
  const std::string message = safetensors_error_of(entries, 32);
  BOOST_TEST(contains(message, "missing tensor 'q'"), message);
  BOOST_TEST(contains(message, "the file has tensors 'k', 'v'"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_unsupported_dtype) {
  auto entries = small_dump_entries();
  entries[1].dtype = "I32";
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'v' has unsupported dtype 'I32'; supported: F32, F16, BF16"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_shape_and_byte_size_disagree) {
  auto entries = small_dump_entries();
  entries[0].dtype = "F16"; // [1, 1, 2, 2] of F16 is 8 bytes, the offsets span 16
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'k': shape [1, 1, 2, 2] of F16 needs 8 bytes, but data_offsets [0, 16] span "
                               "16 bytes"),
             message);
  // A shape whose byte size overflows 64 bits is a mismatch too, not a wrapped-around size.
  entries = small_dump_entries();
  entries[0].shape = {1ull << 40, 1ull << 40, 1, 1};
  BOOST_TEST(contains(safetensors_error_of(entries, 64), "needs more than 2^64 bytes"));
}

BOOST_AUTO_TEST_CASE(safetensors_offsets_out_of_bounds) {
  const std::string message = safetensors_error_of(small_dump_entries(), 60); // q ends at 64
  BOOST_TEST(contains(message, "tensor 'q': data_offsets [32, 64] are out of bounds: the data after the header holds "
                               "only 60 bytes"),
             message);
  auto entries = small_dump_entries();
  entries[2].end = 0xffffffffffffffffull;
  BOOST_TEST(contains(safetensors_error_of(entries, 64), "are out of bounds"));
}

BOOST_AUTO_TEST_CASE(safetensors_offsets_overlap) {
  auto entries = small_dump_entries();
  entries[1].begin = 8; // v [8, 24) overlaps k [0, 16)
  entries[1].end = 24;
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'k' [0, 16] and tensor 'v' [8, 24] have overlapping data_offsets"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_offsets_leave_bytes_unindexed) {
  // The format requires the tensors to cover the data buffer without holes.
  const std::string trailing = safetensors_error_of(small_dump_entries(), 70);
  BOOST_TEST(contains(trailing, "the last 6 bytes of the data (from byte 64) belong to no tensor"), trailing);
  auto entries = small_dump_entries();
  entries[2].begin += 4, entries[2].end += 4;
  const std::string hole = safetensors_error_of(entries, 68);
  BOOST_TEST(contains(hole, "bytes [32, 36) of the data belong to no tensor (a hole before tensor 'q')"), hole);
}

BOOST_AUTO_TEST_CASE(safetensors_wrong_rank) {
  auto entries = small_dump_entries();
  entries[0].shape = {2, 2};
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'k' has 2 dimensions (shape [2, 2]), expected 4: "
                               "[layers, kv_heads, tokens, head_dim]"),
             message);
}

BOOST_AUTO_TEST_CASE(safetensors_zero_dimension) {
  auto entries = small_dump_entries();
  entries[2] = {"q", "F32", {1, 0, 2, 2}, 32, 32};
  const std::string message = safetensors_error_of(entries, 32);
  BOOST_TEST(contains(message, "tensor 'q' has shape [1, 0, 2, 2] with a zero dimension"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_keys_and_values_differ) {
  auto entries = small_dump_entries();
  entries[1].shape = {1, 1, 4, 1};
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'k' has shape [1, 1, 2, 2] but tensor 'v' has shape [1, 1, 4, 1]"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_queries_differ_in_head_dim) {
  auto entries = small_dump_entries();
  entries[2].shape = {1, 1, 2, 4};
  const std::string message = safetensors_error_of(entries, 64);
  BOOST_TEST(contains(message, "tensor 'q' has shape [1, 1, 2, 4], expected [1, q_heads, 2, 2]"), message);
}

BOOST_AUTO_TEST_CASE(safetensors_inconsistent_gqa_ratio) {
  const std::vector<tensor_entry> entries = {
      {"k", "F32", {1, 2, 2, 2}, 0, 32}, {"v", "F32", {1, 2, 2, 2}, 32, 64}, {"q", "F32", {1, 3, 2, 2}, 64, 112}};
  const std::string message = safetensors_error_of(entries, 112);
  BOOST_TEST(
      contains(message, "inconsistent GQA ratio: tensor 'q' has 3 query heads, not a multiple of the 2 KV heads"),
      message);
}

BOOST_AUTO_TEST_CASE(safetensors_malformed_entries_and_metadata) {
  const auto message_for = [](const std::string& header) { return safetensors_error_of(safetensors_file(header, "")); };
  BOOST_TEST(
      contains(message_for(R"({"k": {"dtype": "F32", "shape": [1]}})"), "the field \"data_offsets\" is missing"));
  BOOST_TEST(contains(message_for(R"({"k": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}})"),
                      "unknown field \"x\""));
  BOOST_TEST(contains(message_for(R"({"k": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}})"),
                      "\"dtype\" must be a string"));
  BOOST_TEST(contains(message_for(R"({"k": {"dtype": "F32", "shape": ["1"], "data_offsets": [0, 4]}})"),
                      "\"shape\" must be an array of integers, found a string in it"));
  BOOST_TEST(contains(message_for(R"({"k": {"dtype": "F32", "shape": [1], "data_offsets": [4]}})"),
                      "\"data_offsets\" must be an array of two integers"));
  BOOST_TEST(contains(message_for(R"({"k": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})"),
                      "data_offsets [4, 0] end before they begin"));
  BOOST_TEST(contains(message_for(R"({"k": [1, 2]})"), "tensor 'k' (header byte 6): expected an object"));
  BOOST_TEST(contains(message_for(R"({"__metadata__": {"step": 3}})"),
                      "\"__metadata__\" must map strings to strings, but \"step\" holds a number"));
}

BOOST_AUTO_TEST_CASE(safetensors_corrupted_files_fail_cleanly) {
  // Every truncation and 2000 random byte changes of a valid file: each one loads or throws
  // kvlab::error; anything else (a crash, bad_alloc, length_error) fails the test.
  const std::string valid = safetensors_file(header_json(small_dump_entries()), std::string(64, '\0'));
  const scratch_directory dir("st_corrupt");
  std::size_t loaded = 0, rejected = 0;
  const auto attempt = [&](const std::string& bytes) {
    const auto file = dir.write("dump.safetensors", bytes);
    try {
      kvlab::load_safetensors(file);
      ++loaded;
    } catch (const kvlab::error&) {
      ++rejected;
    }
  };
  for (std::size_t length = 0; length < valid.size(); ++length) attempt(valid.substr(0, length));
  BOOST_TEST(rejected == valid.size());
  std::mt19937 random(12345);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes = valid;
    for (std::size_t changes = 1 + random() % 3; changes > 0; --changes)
      bytes[random() % bytes.size()] = static_cast<char>(random() % 256);
    attempt(bytes);
  }
  BOOST_TEST(loaded > 0u); // changes to data bytes only still load
  BOOST_TEST(rejected > valid.size());
}

BOOST_AUTO_TEST_SUITE_END()
