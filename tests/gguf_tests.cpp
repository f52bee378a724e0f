// GGUF reading and writing: round trips of every metadata and tensor type the writer emits,
// Q4_K and Q6_K blocks built by hand from the format's definition, the real vocabulary files of
// ../shared/models, and malformed files (each rejected with a kvlab::error naming the problem).
// SHA-256 against the FIPS 180-4 / NIST example vectors.
#include <boost/test/unit_test.hpp>

#include "shared_models.hpp"
#include "test_files.hpp"
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>
import kvlab.core;
import kvlab.gguf;

using namespace kvlab_test;
using namespace std::literals;

namespace {

std::span<const std::byte> as_bytes(std::string_view text) { return std::as_bytes(std::span(text)); }

// A GGUF file built byte by byte, little-endian, as the format defines it.
struct gguf_bytes {
  std::string bytes;

  template <class Bits>
  gguf_bytes& number(Bits bits) {
    for (std::size_t i = 0; i < sizeof(Bits); ++i) bytes += static_cast<char>((bits >> (8 * i)) & 0xff);
    return *this;
  }
  gguf_bytes& u8(std::uint8_t v) { return number(v); }
  gguf_bytes& u16(std::uint16_t v) { return number(v); }
  gguf_bytes& u32(std::uint32_t v) { return number(v); }
  gguf_bytes& u64(std::uint64_t v) { return number(v); }
  gguf_bytes& i32(std::int32_t v) { return number(static_cast<std::uint32_t>(v)); }
  gguf_bytes& f32(float v) { return number(std::bit_cast<std::uint32_t>(v)); }
  gguf_bytes& str(std::string_view text) {
    u64(text.size());
    bytes += text;
    return *this;
  }
  gguf_bytes& raw(std::string_view data) {
    bytes += data;
    return *this;
  }
  gguf_bytes& header(std::uint64_t tensors, std::uint64_t pairs, std::uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(tensors).u64(pairs);
  }
  // Metadata pairs: key, type id, value.
  gguf_bytes& kv_string(std::string_view key, std::string_view value) { return str(key).u32(8).str(value); }
  gguf_bytes& kv_u32(std::string_view key, std::uint32_t value) { return str(key).u32(4).u32(value); }
  gguf_bytes& kv_i32(std::string_view key, std::int32_t value) { return str(key).u32(5).i32(value); }
  // A tensor info: name, n_dims, dims, type id, offset.
  gguf_bytes& tensor(std::string_view name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(dims.size()));
    for (const auto dim : dims) u64(dim);
    return u32(type).u64(offset);
  }
  gguf_bytes& pad(std::size_t alignment = 32) {
    while (bytes.size() % alignment != 0) bytes += '\0';
    return *this;
  }
};

// A small valid file: two metadata pairs and one F32 tensor of 2 x 4 values.
std::string small_gguf() {
  gguf_bytes file;
  file.header(1, 2).kv_string("general.architecture", "llama");
  file.str("test.values").u32(9).u32(5).u64(3).i32(1).i32(-2).i32(3);
  file.tensor("t", {4, 2}, 0, 0).pad();
  for (int i = 0; i < 8; ++i) file.f32(static_cast<float>(i) * 0.5f);
  return file.bytes;
}

// The message of the kvlab::error that opening these bytes as a GGUF file throws.
std::string open_error(const std::string& bytes) {
  const scratch_directory dir("gguf");
  const auto path = dir.write("malformed.gguf", bytes);
  const std::string message = kvlab_test::message_of<kvlab::error>([&] { kvlab::gguf_file file(path); });
  if (!message.empty()) BOOST_TEST(contains(message, path.string()), "the message names the file: " << message);
  return message;
}

std::function<bool(const kvlab::error&)> says(std::string part) {
  return [part](const kvlab::error& e) {
    const bool found = contains(e.what(), part);
    if (!found) BOOST_TEST_MESSAGE("expected '" << part << "' in: " << e.what());
    return found;
  };
}

std::vector<float> normal_values(std::size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> distribution(0.0f, 1.0f);
  std::vector<float> values(count);
  for (auto& value : values) value = distribution(generator);
  return values;
}

std::vector<float> dequantized(const kvlab::gguf_tensor& tensor) {
  std::vector<float> values(tensor.element_count());
  kvlab::dequantize(tensor, values);
  return values;
}

std::string hex_of(const std::string& bytes) {
  std::string hex;
  for (const char c : bytes) {
    constexpr char digits[] = "0123456789abcdef";
    hex += digits[static_cast<unsigned char>(c) >> 4];
    hex += digits[static_cast<unsigned char>(c) & 0xf];
  }
  return hex;
}

} // namespace

BOOST_AUTO_TEST_SUITE(sha256)

BOOST_AUTO_TEST_CASE(matches_the_fips_180_examples) {
  // FIPS 180-4 examples (NIST CSRC "Examples with intermediate values", SHA-256).
  BOOST_TEST(kvlab::sha256_hex({}) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  BOOST_TEST(kvlab::sha256_hex(as_bytes("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  BOOST_TEST(kvlab::sha256_hex(as_bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  BOOST_TEST(
      kvlab::sha256_hex(as_bytes("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                                 "klmnopqrlmnopqrsmnopqrstnopqrstu")) ==
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  const std::string million(1000000, 'a');
  BOOST_TEST(kvlab::sha256_hex(as_bytes(million)) ==
             "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

BOOST_AUTO_TEST_CASE(pads_at_every_block_boundary) {
  // Lengths around the 55/56-byte padding limit and the 64-byte block (Python hashlib.sha256).
  BOOST_TEST(kvlab::sha256_hex(as_bytes(std::string(55, 'a'))) ==
             "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  BOOST_TEST(kvlab::sha256_hex(as_bytes(std::string(56, 'a'))) ==
             "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  BOOST_TEST(kvlab::sha256_hex(as_bytes(std::string(63, 'a'))) ==
             "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  BOOST_TEST(kvlab::sha256_hex(as_bytes(std::string(64, 'a'))) ==
             "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

BOOST_AUTO_TEST_CASE(hashes_files) {
  const scratch_directory dir("sha256");
  BOOST_TEST(kvlab::sha256_file_hex(dir.write("abc", "abc")) ==
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  BOOST_TEST(kvlab::sha256_file_hex(dir.write("empty", "")) ==
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  BOOST_CHECK_EXCEPTION(kvlab::sha256_file_hex(dir.path() / "missing"), kvlab::error, says("no such file"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gguf)

BOOST_AUTO_TEST_CASE(round_trips_every_metadata_type) {
  const scratch_directory dir("gguf");
  const std::vector<kvlab::gguf_metadata_item> metadata{
      {"general.architecture", "llama"s},
      {"test.uint32", std::uint32_t{4000000000u}},
      {"test.int32", std::int32_t{-123456}},
      {"test.positive_int32", std::int32_t{77}},
      {"test.uint64", std::uint64_t{1} << 40},
      {"test.float32", 0.125f},
      {"test.true", true},
      {"test.false", false},
      {"test.strings", std::vector<std::string>{"a", "", "\xc3\xbcnicode", "nul\0inside"s}},
      {"test.floats", std::vector<float>{1.5f, -0.0f, 3e38f}},
      {"test.ints", std::vector<std::int32_t>{-1, 0, 2147483647}},
      {"test.empty", std::vector<std::int32_t>{}},
  };
  const auto path = dir.path() / "metadata.gguf";
  kvlab::write_gguf(path, metadata, {});
  const kvlab::gguf_file file(path);

  BOOST_TEST(file.version() == 3u);
  BOOST_TEST(file.alignment() == 32u);
  BOOST_TEST(file.tensors().empty());
  std::vector<std::string_view> expected_keys;
  for (const auto& item : metadata) expected_keys.push_back(item.key);
  BOOST_TEST(file.keys() == expected_keys, boost::test_tools::per_element());
  BOOST_TEST(file.get_string("general.architecture") == "llama");
  BOOST_TEST(file.get_uint("test.uint32") == 4000000000u);
  BOOST_TEST(file.get_int("test.uint32") == 4000000000);
  BOOST_TEST(file.get_int("test.int32") == -123456);
  BOOST_TEST(file.get_uint("test.positive_int32") == 77u);
  BOOST_TEST(file.get_uint("test.uint64") == std::uint64_t{1} << 40);
  BOOST_TEST(file.get_float("test.float32") == 0.125);
  BOOST_TEST(file.get_bool("test.true"));
  BOOST_TEST(!file.get_bool("test.false"));
  BOOST_TEST(file.get_string_array("test.strings") ==
                 (std::vector<std::string_view>{"a", "", "\xc3\xbcnicode", "nul\0inside"sv}),
             boost::test_tools::per_element());
  const auto floats = file.get_float_array("test.floats");
  BOOST_TEST(same_bits(floats, std::vector<float>{1.5f, -0.0f, 3e38f}));
  BOOST_TEST(file.get_int_array("test.ints") == (std::vector<std::int64_t>{-1, 0, 2147483647}),
             boost::test_tools::per_element());
  BOOST_TEST(file.get_int_array("test.empty").empty());
  BOOST_TEST(file.array_size("test.strings") == 4u);
  BOOST_TEST(file.type_name_of("test.floats") == "array of float32");
  BOOST_TEST((file.type_of("test.true") == kvlab::gguf_value_type::boolean));

  BOOST_TEST(file.has("test.uint64"));
  BOOST_TEST(!file.has("test.absent"));
  BOOST_TEST(!file.find_uint("test.absent").has_value());
  BOOST_TEST(!file.find_string("test.absent").has_value());
  BOOST_TEST(file.find_uint("test.uint32").value() == 4000000000u);
  BOOST_TEST(file.find_float("test.float32").value() == 0.125);
  BOOST_TEST(file.find_bool("test.true").value());
  BOOST_TEST(file.find_int("test.int32").value() == -123456);
}

BOOST_AUTO_TEST_CASE(round_trips_float_tensors_exactly) {
  const scratch_directory dir("gguf");
  auto values = normal_values(64 * 3, 1);
  values[0] = 1e-7f;     // an fp16 subnormal
  values[1] = -70000.0f; // beyond fp16: infinity, as np.float16 gives
  const std::vector<kvlab::gguf_tensor_input> tensors{
      {"f32", {64, 3}, kvlab::ggml_type::f32, values},
      {"f16", {32, 2, 3}, kvlab::ggml_type::f16, values},
      {"bf16", {64, 1, 1, 3}, kvlab::ggml_type::bf16, values},
  };
  const auto path = dir.path() / "floats.gguf";
  kvlab::write_gguf(path, std::vector<kvlab::gguf_metadata_item>{{"general.alignment", std::uint32_t{64}}}, tensors);
  const kvlab::gguf_file file(path);
  BOOST_TEST(file.alignment() == 64u);
  BOOST_TEST(file.data_offset() % 64 == 0u);
  BOOST_REQUIRE_EQUAL(file.tensors().size(), 3u);

  const auto& f32 = file.tensor("f32");
  BOOST_TEST(f32.dims == (std::vector<std::uint64_t>{64, 3}), boost::test_tools::per_element());
  BOOST_TEST((f32.type == kvlab::ggml_type::f32));
  BOOST_TEST(f32.data.size() == 64u * 3 * 4);
  BOOST_TEST(f32.row_count() == 3u);
  BOOST_TEST(same_bits(dequantized(f32), values));

  const auto& f16 = file.tensor("f16");
  BOOST_TEST(f16.dims == (std::vector<std::uint64_t>{32, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(f16.data.size() == 64u * 3 * 2);
  BOOST_TEST(f16.row_count() == 6u);
  std::vector<float> as_half(values.size()), as_bf16(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    as_half[i] = kvlab::round_to_half(values[i]);
    as_bf16[i] = kvlab::bf16_bits_to_float(kvlab::float_to_bf16_bits(values[i]));
  }
  BOOST_TEST(same_bits(dequantized(f16), as_half));
  BOOST_TEST(std::isinf(dequantized(f16)[1]));
  BOOST_TEST(same_bits(dequantized(file.tensor("bf16")), as_bf16));

  for (const auto& tensor : file.tensors()) {
    BOOST_TEST(tensor.offset % 64 == 0u, tensor.name);
    BOOST_TEST(static_cast<std::uint64_t>(tensor.data.data() - file.tensors()[0].data.data()) == tensor.offset);
  }
  // Rows 1 and 2 of the F32 tensor alone.
  std::vector<float> rows(2 * 64);
  kvlab::dequantize_rows(f32, 1, rows);
  BOOST_TEST(same_bits(rows, std::span(values).subspan(64)));
}

BOOST_AUTO_TEST_CASE(quantizes_q8_0_and_q4_0_within_a_step) {
  const scratch_directory dir("gguf");
  const auto values = normal_values(32 * 16, 2);
  const auto path = dir.path() / "quantized.gguf";
  kvlab::write_gguf(path, {},
                    std::vector<kvlab::gguf_tensor_input>{{"q8", {128, 4}, kvlab::ggml_type::q8_0, values},
                                                          {"q4", {64, 8}, kvlab::ggml_type::q4_0, values}});
  const kvlab::gguf_file file(path);
  BOOST_TEST(file.tensor("q8").data.size() == 16u * 34);
  BOOST_TEST(file.tensor("q4").data.size() == 16u * 18);
  const auto q8 = dequantized(file.tensor("q8")), q4 = dequantized(file.tensor("q4"));
  for (std::size_t block = 0; block < 16; ++block) {
    float largest = 0.0f;
    for (std::size_t j = 0; j < 32; ++j) largest = std::max(largest, std::fabs(values[32 * block + j]));
    for (std::size_t j = 0; j < 32; ++j) {
      const std::size_t i = 32 * block + j;
      // Half a step of d = max/127, plus the fp16 rounding of d times at most 127 steps.
      BOOST_TEST(std::fabs(q8[i] - values[i]) <= largest / 127.0f * (0.5f + 127.0f / 2048.0f), "Q8_0 element " << i);
      // One step of d = max/8: the element of largest magnitude may be clipped from code 16 to 15.
      BOOST_TEST(std::fabs(q4[i] - values[i]) <= largest / 8.0f * (1.0f + 8.0f / 2048.0f), "Q4_0 element " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(q8_0_and_q4_0_blocks_match_hand_computed_ones) {
  // Q8_0: the largest magnitude is 31.75 = 127 / 4, so d = 0.25 (fp16 0x3400) and each
  // x = 0.25 k + e with |e| <= 0.1 rounds to code k.
  std::vector<float> q8_values(32);
  std::string q8_block = "\x00\x34"s;
  for (int j = 0; j < 32; ++j) {
    const int k = std::min(127, 8 * j - 127);
    q8_values[j] = 0.25f * static_cast<float>(k) + (j == 0 ? 0.0f : 0.1f * static_cast<float>(j % 3 - 1));
    q8_block += static_cast<char>(static_cast<std::int8_t>(k));
  }
  // Q4_0: the element of largest magnitude is -4, so d = -4 / -8 = 0.5 (fp16 0x3800) and
  // x = (q - 8) * 0.5 + e, 0 <= e < 0.25, gives code q = trunc(x / 0.5 + 8.5).
  std::vector<float> q4_values(32);
  for (int j = 0; j < 32; ++j)
    q4_values[j] = 0.5f * static_cast<float>(j % 16 - 8) + (j == 0 ? 0.0f : 0.05f * static_cast<float>(j % 5));
  std::string q4_block = "\x00\x38"s;
  for (int j = 0; j < 16; ++j) q4_block += static_cast<char>(j | (j << 4)); // elements j and j + 16 have code j

  const scratch_directory dir("gguf");
  const auto path = dir.path() / "blocks.gguf";
  kvlab::write_gguf(path, {},
                    std::vector<kvlab::gguf_tensor_input>{{"q8", {32}, kvlab::ggml_type::q8_0, q8_values},
                                                          {"q4", {32}, kvlab::ggml_type::q4_0, q4_values}});
  const kvlab::gguf_file file(path);
  const auto bytes_of = [&](const char* name) {
    const auto data = file.tensor(name).data;
    return std::string(reinterpret_cast<const char*>(data.data()), data.size());
  };
  BOOST_TEST(hex_of(bytes_of("q8")) == hex_of(q8_block));
  BOOST_TEST(hex_of(bytes_of("q4")) == hex_of(q4_block));
  const auto q8 = dequantized(file.tensor("q8")), q4 = dequantized(file.tensor("q4"));
  for (int j = 0; j < 32; ++j) {
    BOOST_TEST(q8[j] == 0.25f * static_cast<float>(std::min(127, 8 * j - 127)));
    BOOST_TEST(q4[j] == 0.5f * static_cast<float>(j % 16 - 8));
  }
}

BOOST_AUTO_TEST_CASE(dequantizes_hand_built_q4_k_blocks) {
  // Eight sub-blocks of 32 with 6-bit scales and mins; sub-blocks 4-7 use values >= 16 so
  // their top two bits (stored in bytes 0-7) matter.
  const int scales[8] = {1, 2, 3, 63, 17, 33, 50, 63}, mins[8] = {0, 5, 10, 63, 16, 31, 47, 62};
  std::string packed(12, '\0');
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<char>(scales[j] | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<char>(mins[j] | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<char>((scales[j + 4] & 15) | ((mins[j + 4] & 15) << 4));
  }
  const auto code = [](int i) { return (i * 7 + i / 32) % 16; };
  // Element i is in sub-block s = i / 32; sub-blocks 2p and 2p + 1 share bytes 32p..32p+31 of
  // the nibbles, low and high.
  std::string nibbles(128, '\0');
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, l = i % 32;
    nibbles[32 * (s / 2) + l] = static_cast<char>(nibbles[32 * (s / 2) + l] | (code(i) << (s % 2 == 0 ? 0 : 4)));
  }
  // Row 0: d = 0.5 (0x3800), dmin = 0.25 (0x3400); row 1: d = 1 (0x3c00), dmin = 0.5 (0x3800).
  gguf_bytes file;
  file.header(1, 0).tensor("q4k", {256, 2}, 12, 0).pad();
  file.u16(0x3800).u16(0x3400).raw(packed).raw(nibbles);
  file.u16(0x3c00).u16(0x3800).raw(packed).raw(nibbles);
  const scratch_directory dir("gguf");
  const kvlab::gguf_file gguf(dir.write("q4k.gguf", file.bytes));
  const auto& tensor = gguf.tensor("q4k");
  BOOST_TEST((tensor.type == kvlab::ggml_type::q4_k));
  BOOST_TEST(kvlab::ggml_type_name(tensor.type) == "Q4_K");
  const auto values = dequantized(tensor);
  for (int row = 0; row < 2; ++row) {
    const float d = row == 0 ? 0.5f : 1.0f, dmin = row == 0 ? 0.25f : 0.5f;
    for (int i = 0; i < 256; ++i) {
      const float expected = d * static_cast<float>(scales[i / 32] * code(i)) - dmin * static_cast<float>(mins[i / 32]);
      BOOST_TEST(values[256 * row + i] == expected, "row " << row << " element " << i);
    }
  }
  std::vector<float> second_row(256);
  kvlab::dequantize_rows(tensor, 1, second_row);
  BOOST_TEST(same_bits(second_row, std::span(values).subspan(256)));
}

BOOST_AUTO_TEST_CASE(dequantizes_a_hand_built_q6_k_block) {
  // 6-bit codes q, one signed scale per 16 elements, x = d * scale * (q - 32). Element
  // i = 128 h + 32 k + l (half h, quarter k) keeps its low 4 bits in ql[64 h + l + 32 (k % 2)]
  // (low nibble for k < 2, high for k >= 2) and its top 2 bits in bits 2k, 2k+1 of qh[32 h + l].
  const std::int8_t scales[16] = {1, -2, 3, -4, 5, 6, -7, 8, 127, -128, 10, -11, 12, 13, -14, 15};
  const auto code = [](int i) { return (i * 11 + i / 64) % 64; };
  std::string ql(128, '\0'), qh(64, '\0');
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, k = (i % 128) / 32, l = i % 32;
    const int q = code(i);
    const int low_index = 64 * h + l + 32 * (k % 2);
    ql[low_index] = static_cast<char>(ql[low_index] | ((q & 15) << (k < 2 ? 0 : 4)));
    qh[32 * h + l] = static_cast<char>(qh[32 * h + l] | ((q >> 4) << (2 * k)));
  }
  gguf_bytes file;
  file.header(1, 0).tensor("q6k", {256}, 14, 0).pad();
  file.raw(ql).raw(qh).raw(std::string(reinterpret_cast<const char*>(scales), 16)).u16(0x3400); // d = 0.25
  const scratch_directory dir("gguf");
  const kvlab::gguf_file gguf(dir.write("q6k.gguf", file.bytes));
  const auto values = dequantized(gguf.tensor("q6k"));
  for (int i = 0; i < 256; ++i)
    BOOST_TEST(values[i] == 0.25f * static_cast<float>(scales[i / 16] * (code(i) - 32)), "element " << i);
}

BOOST_AUTO_TEST_CASE(reads_the_llama_spm_vocabulary) {
  const auto path = shared_model_file("vocab/ggml-vocab-llama-spm.gguf");
  if (!path) return;
  const kvlab::gguf_file file(*path);
  BOOST_TEST(file.version() == 3u);
  BOOST_TEST(file.tensors().empty());
  BOOST_TEST(file.get_string("general.architecture") == "llama");
  BOOST_TEST(file.get_string("tokenizer.ggml.model") == "llama");
  BOOST_TEST(file.get_uint("llama.block_count") == 32u);
  BOOST_TEST(file.get_uint("llama.vocab_size") == 32000u);
  BOOST_TEST(static_cast<float>(file.get_float("llama.attention.layer_norm_rms_epsilon")) == 1e-5f);
  const auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  BOOST_REQUIRE_EQUAL(tokens.size(), 32000u);
  BOOST_TEST(tokens[0] == "<unk>");
  BOOST_TEST(tokens[1] == "<s>");
  BOOST_TEST(tokens[2] == "</s>");
  BOOST_TEST(tokens[3] == "<0x00>");
  BOOST_TEST(tokens[29871] == "\xe2\x96\x81");      // "▁", SentencePiece's space
  BOOST_TEST(tokens[15043] == "\xe2\x96\x81Hello"); // as ggml-vocab-llama-spm.gguf.out encodes "Hello world"
  BOOST_TEST(tokens[3186] == "\xe2\x96\x81world");
  const auto scores = file.get_float_array("tokenizer.ggml.scores");
  BOOST_TEST(scores.size() == 32000u);
  BOOST_TEST(std::ranges::all_of(scores, [](float score) { return std::isfinite(score); }));
  const auto types = file.get_int_array("tokenizer.ggml.token_type");
  BOOST_REQUIRE_EQUAL(types.size(), 32000u);
  BOOST_TEST(types[0] == 2);     // unknown
  BOOST_TEST(types[1] == 3);     // control
  BOOST_TEST(types[3] == 6);     // byte
  BOOST_TEST(types[29871] == 1); // normal
  BOOST_TEST(file.get_uint("tokenizer.ggml.bos_token_id") == 1u);
  BOOST_TEST(file.get_uint("tokenizer.ggml.eos_token_id") == 2u);
  BOOST_TEST(file.get_uint("tokenizer.ggml.unknown_token_id") == 0u);
  BOOST_TEST(file.get_bool("tokenizer.ggml.add_bos_token"));
  BOOST_TEST(!file.get_bool("tokenizer.ggml.add_eos_token"));
}

BOOST_AUTO_TEST_CASE(reads_the_gpt_2_vocabulary) {
  const auto path = shared_model_file("vocab/ggml-vocab-gpt-2.gguf");
  if (!path) return;
  const kvlab::gguf_file file(*path);
  BOOST_TEST(file.version() == 3u);
  BOOST_TEST(file.tensors().empty());
  BOOST_TEST(file.keys().size() == 16u);
  BOOST_TEST(file.get_string("general.architecture") == "gpt2");
  BOOST_TEST(file.get_string("tokenizer.ggml.model") == "gpt2");
  BOOST_TEST(file.get_string("tokenizer.ggml.pre") == "gpt-2");
  BOOST_TEST(file.get_uint("gpt2.block_count") == 12u);
  BOOST_TEST(file.get_uint("gpt2.context_length") == 1024u);
  BOOST_TEST(file.get_uint("gpt2.embedding_length") == 768u);
  BOOST_TEST(static_cast<float>(file.get_float("gpt2.attention.layer_norm_epsilon")) == 1e-5f);
  const auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  BOOST_REQUIRE_EQUAL(tokens.size(), 50257u);
  BOOST_TEST(tokens[0] == "!");
  BOOST_TEST(tokens[198] == "\xc4\x8a");      // "Ċ", the byte-level form of '\n'
  BOOST_TEST(tokens[995] == "\xc4\xa0world"); // "Ġworld", as ggml-vocab-gpt-2.gguf.out encodes "Hello world"
  BOOST_TEST(tokens[15496] == "Hello");
  BOOST_TEST(tokens[50256] == "<|endoftext|>");
  const auto types = file.get_int_array("tokenizer.ggml.token_type");
  BOOST_REQUIRE_EQUAL(types.size(), 50257u);
  BOOST_TEST(types[0] == 1);     // normal
  BOOST_TEST(types[50256] == 3); // control
  const auto merges = file.get_string_array("tokenizer.ggml.merges");
  BOOST_REQUIRE_EQUAL(merges.size(), 50000u);
  BOOST_TEST(merges[0] == "\xc4\xa0 t"); // "Ġ t"
  BOOST_TEST(file.get_uint("tokenizer.ggml.bos_token_id") == 50256u);
  BOOST_TEST(file.get_uint("tokenizer.ggml.eos_token_id") == 50256u);
}

BOOST_AUTO_TEST_CASE(reads_a_hand_built_file_and_rejects_every_truncation) {
  const std::string bytes = small_gguf();
  {
    const scratch_directory dir("gguf");
    const kvlab::gguf_file file(dir.write("small.gguf", bytes));
    BOOST_TEST(file.get_string("general.architecture") == "llama");
    BOOST_TEST(file.get_int_array("test.values") == (std::vector<std::int64_t>{1, -2, 3}),
               boost::test_tools::per_element());
    BOOST_TEST(dequantized(file.tensor("t")) == (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f}),
               boost::test_tools::per_element());
  }
  for (std::size_t size = 0; size < bytes.size(); ++size) {
    const std::string message = open_error(bytes.substr(0, size));
    BOOST_TEST(!message.empty(), "prefix of " << size << " bytes");
    const bool explained = contains(message, "truncated") || contains(message, "not a GGUF file");
    BOOST_TEST(explained, "prefix of " << size << " bytes: " << message);
  }
}

BOOST_AUTO_TEST_CASE(survives_every_single_byte_corruption) {
  // Each byte set to 0x00, 0xff or with its top bit flipped: the file either still parses (then
  // its tensors dequantize) or is a kvlab::error; it never crashes or reads out of bounds.
  const std::string bytes = small_gguf();
  const scratch_directory dir("gguf");
  for (std::size_t position = 0; position < bytes.size(); ++position) {
    for (const int variant : {0, 1, 2}) {
      std::string corrupt = bytes;
      corrupt[position] = variant == 0 ? '\0' : variant == 1 ? '\xff' : static_cast<char>(corrupt[position] ^ 0x80);
      const auto path = dir.write("corrupt.gguf", corrupt);
      try {
        const kvlab::gguf_file file(path);
        for (const auto& tensor : file.tensors())
          if (kvlab::can_dequantize(tensor.type)) dequantized(tensor);
      } catch (const kvlab::error&) {
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rejects_malformed_headers) {
  BOOST_TEST(contains(open_error("GGML"s + small_gguf().substr(4)),
                      "not a GGUF file: expected the magic \"GGUF\", found \"GGML\""));
  BOOST_TEST(contains(open_error("GG"), "found \"GG\" (the file has only 2 bytes)"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 0, 1).bytes), "GGUF version 1 is not supported"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 0, 4).bytes), "unsupported GGUF version 4; supported: 2, 3"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 0, 0x03000000).bytes), "big-endian GGUF file"));
  // Version 2 has the same layout.
  const scratch_directory dir("gguf");
  BOOST_TEST(kvlab::gguf_file(dir.write("v2.gguf", gguf_bytes().header(0, 1, 2).kv_u32("a", 1).bytes)).version() == 2u);

  BOOST_TEST(contains(open_error(gguf_bytes().header(0, std::uint64_t{1} << 60).kv_u32("a", 1).bytes),
                      "metadata_kv_count is 1152921504606846976, but the 17 bytes that follow (offset 24) hold at "
                      "most 1 key-value pairs of at least 13 bytes each"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(std::uint64_t{1} << 62, 1).kv_u32("a", 1).bytes),
                      "tensor_count is 4611686018427387904"));
}

BOOST_AUTO_TEST_CASE(rejects_malformed_metadata) {
  // A key whose length runs past the end.
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).u64(1000).raw("key").u32(4).u32(1).bytes),
                      "the key of metadata pair #0: string length 1000 (at offset 24) runs past the end of the file"));
  // A string value whose length runs past the end.
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).str("name").u32(8).u64(99).raw("short").bytes),
                      "the value of metadata key 'name': string length 99"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).str("odd").u32(13).u32(0).bytes),
                      "metadata key 'odd': unknown value type id 13"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).str("flag").u32(7).u8(2).bytes),
                      "metadata key 'flag': a bool must be 0 or 1, found 2"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 2).kv_u32("same", 1).kv_string("same", "x").bytes),
                      "metadata key 'same' appears twice (pairs #0 and #1)"));
  // An array longer than the file.
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).str("list").u32(9).u32(6).u64(1000).f32(1).bytes),
                      "metadata key 'list': the array length is 1000, but the 4 bytes that follow"));
  // general.alignment must be a nonzero power of two.
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).kv_u32("general.alignment", 48).bytes),
                      "metadata key 'general.alignment' is 48; it must be a nonzero power of two"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).kv_u32("general.alignment", 0).bytes),
                      "metadata key 'general.alignment' is 0"));
  BOOST_TEST(contains(open_error(gguf_bytes().header(0, 1).kv_string("general.alignment", "32").bytes),
                      "metadata key 'general.alignment': expected an unsigned integer (any GGUF integer type), "
                      "found string"));
  // Arrays nested deeper than the reader follows.
  gguf_bytes deep;
  deep.header(0, 1).str("deep").u32(9);
  for (int level = 0; level < 70; ++level) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  BOOST_TEST(contains(open_error(deep.bytes), "arrays nested more than 64 levels deep"));
}

BOOST_AUTO_TEST_CASE(reads_nested_arrays_and_reports_getter_type_mismatches) {
  gguf_bytes bytes;
  bytes.header(0, 5).kv_string("name", "x").kv_i32("negative", -3).kv_u32("count", 7);
  bytes.str("floats").u32(9).u32(6).u64(2).f32(1).f32(2);
  // An array of two arrays of int32: [[1, 2], [3]].
  bytes.str("nested").u32(9).u32(9).u64(2).u32(5).u64(2).i32(1).i32(2).u32(5).u64(1).i32(3);
  const scratch_directory dir("gguf");
  const kvlab::gguf_file file(dir.write("types.gguf", bytes.bytes));
  BOOST_TEST(file.array_size("nested") == 2u);
  BOOST_TEST(file.type_name_of("nested") == "array of array");
  BOOST_CHECK_EXCEPTION(file.get_uint("name"), kvlab::error,
                        says("types.gguf': metadata key 'name': expected an unsigned integer (any GGUF integer type), "
                             "found string"));
  BOOST_CHECK_EXCEPTION(file.get_string("count"), kvlab::error,
                        says("metadata key 'count': expected a string, found uint32"));
  BOOST_CHECK_EXCEPTION(file.get_uint("negative"), kvlab::error,
                        says("metadata key 'negative': expected a value of at least 0, found -3 (int32)"));
  BOOST_CHECK_EXCEPTION(file.get_float("count"), kvlab::error, says("expected a float32 or float64, found uint32"));
  BOOST_CHECK_EXCEPTION(file.get_bool("count"), kvlab::error, says("expected a bool, found uint32"));
  BOOST_CHECK_EXCEPTION(file.get_string_array("floats"), kvlab::error,
                        says("metadata key 'floats': expected an array of string, found array of float32"));
  BOOST_CHECK_EXCEPTION(file.get_int_array("nested"), kvlab::error,
                        says("expected an array of integers, found array of array"));
  BOOST_CHECK_EXCEPTION(file.get_float_array("name"), kvlab::error, says("found string"));
  BOOST_CHECK_EXCEPTION(file.array_size("count"), kvlab::error, says("expected an array, found uint32"));
  BOOST_CHECK_EXCEPTION(file.get_uint("missing"), kvlab::error,
                        says("metadata key 'missing' is missing; the file has 5 keys: name, negative, count, floats, "
                             "nested"));
  BOOST_CHECK_EXCEPTION(file.find_uint("name"), kvlab::error, says("found string"));
  BOOST_CHECK_EXCEPTION(file.tensor("absent"), kvlab::error, says("no tensor named 'absent' (the file has 0 tensors)"));
  BOOST_TEST(file.find_tensor("absent") == nullptr);
}

BOOST_AUTO_TEST_CASE(rejects_malformed_tensor_infos) {
  const auto one_tensor = [](std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset,
                             std::size_t data_bytes) {
    gguf_bytes bytes;
    bytes.header(1, 0).tensor("blk.0.attn_q.weight", std::move(dims), type, offset).pad();
    return bytes.raw(std::string(data_bytes, '\0')).bytes;
  };
  BOOST_TEST(contains(open_error(one_tensor({1, 1, 1, 1, 1}, 0, 0, 4)),
                      "tensor 'blk.0.attn_q.weight': n_dims is 5; GGUF tensors have at most 4 dimensions"));
  BOOST_TEST(contains(open_error(one_tensor({32}, 31, 0, 128)),
                      "tensor 'blk.0.attn_q.weight': unknown ggml type id 31 at offset"));
  BOOST_TEST(contains(open_error(one_tensor({32}, 99, 0, 128)), "known ids: 0-3, 6-30, 34, 35, 39"));
  BOOST_TEST(contains(open_error(one_tensor({4}, 0, 4, 64)),
                      "tensor 'blk.0.attn_q.weight': data offset 4 is not a multiple of the alignment 32"));
  BOOST_TEST(contains(open_error(one_tensor({1024}, 0, 0, 100)),
                      "tensor 'blk.0.attn_q.weight': data [96, 4192) (4096 bytes of F32) runs past the end of the "
                      "file (196 bytes); is the file truncated?"));
  BOOST_TEST(contains(open_error(one_tensor({4}, 0, std::uint64_t{1} << 63, 16)), "runs past the end of the file"));
  BOOST_TEST(contains(open_error(one_tensor({std::uint64_t{1} << 32, std::uint64_t{1} << 32}, 0, 0, 0)),
                      "tensor 'blk.0.attn_q.weight': the element count of dimensions [4294967296, 4294967296] "
                      "overflows int64"));
  BOOST_TEST(contains(open_error(one_tensor({std::uint64_t{1} << 63}, 0, 0, 0)), "overflows int64"));
  // 2^62 F32 elements fit in int64 but take 2^64 bytes.
  BOOST_TEST(contains(open_error(one_tensor({std::uint64_t{1} << 62}, 0, 0, 0)), "take more than 2^64 bytes"));
  BOOST_TEST(contains(open_error(one_tensor({33}, 8, 0, 34)),
                      "tensor 'blk.0.attn_q.weight': ne[0] = 33 is not a multiple of Q8_0's block size 32"));
  BOOST_TEST(contains(open_error(one_tensor({100, 2}, 12, 0, 1000)),
                      "ne[0] = 100 is not a multiple of Q4_K's block size 256"));

  gguf_bytes twice;
  twice.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad().raw(std::string(64, '\0'));
  BOOST_TEST(contains(open_error(twice.bytes), "tensor 'w' appears twice (tensors #0 and #1)"));
  gguf_bytes long_name;
  long_name.header(1, 0).u64(5000).raw(std::string(40, 'w'));
  BOOST_TEST(contains(open_error(long_name.bytes), "the name of tensor #0: string length 5000"));
}

BOOST_AUTO_TEST_CASE(dequantize_names_unsupported_types_and_wrong_sizes) {
  gguf_bytes bytes;
  bytes.header(2, 0).tensor("q5k", {256}, 13, 0).tensor("f", {8, 2}, 0, 192).pad().raw(std::string(256, '\0'));
  const scratch_directory dir("gguf");
  const kvlab::gguf_file file(dir.write("types.gguf", bytes.bytes));
  std::vector<float> out(256);
  BOOST_CHECK_EXCEPTION(kvlab::dequantize(file.tensor("q5k"), out), kvlab::error,
                        says("tensor 'q5k' has type Q5_K, which kvlab cannot dequantize; supported: F32, F16, BF16, "
                             "Q8_0, Q4_0, Q4_K, Q6_K"));
  std::vector<float> wrong(15);
  BOOST_CHECK_EXCEPTION(kvlab::dequantize(file.tensor("f"), wrong), kvlab::error,
                        says("tensor 'f' has 16 elements, but the output holds 15 floats"));
  std::vector<float> row(8);
  BOOST_CHECK_EXCEPTION(kvlab::dequantize_rows(file.tensor("f"), 2, row), kvlab::error,
                        says("rows [2, 3) are outside its 2 rows"));
}

BOOST_AUTO_TEST_CASE(writer_rejects_bad_input_and_replaces_files_atomically) {
  const scratch_directory dir("gguf");
  const auto path = dir.path() / "out.gguf";
  const std::vector<float> values(64, 1.0f);
  const auto write_one = [&](kvlab::gguf_tensor_input tensor) {
    kvlab::write_gguf(path, {}, std::vector<kvlab::gguf_tensor_input>{std::move(tensor)});
  };
  write_one({"t", {64}, kvlab::ggml_type::f32, values});
  BOOST_CHECK_EXCEPTION(write_one({"t", {32, 3}, kvlab::ggml_type::f32, values}), kvlab::error,
                        says("tensor 't': its dimensions hold 96 values, but 64 were given"));
  BOOST_CHECK_EXCEPTION(write_one({"t", {16, 4}, kvlab::ggml_type::q8_0, values}), kvlab::error,
                        says("tensor 't': ne[0] = 16 is not a multiple of Q8_0's block size 32"));
  BOOST_CHECK_EXCEPTION(write_one({"t", {64}, kvlab::ggml_type::q4_k, values}), kvlab::error,
                        says("tensor 't': cannot store type Q4_K; supported: F32, F16, BF16, Q8_0, Q4_0"));
  BOOST_CHECK_EXCEPTION(write_one({"t", {1, 1, 1, 1, 64}, kvlab::ggml_type::f32, values}), kvlab::error,
                        says("has 5 dimensions; GGUF tensors have 1 to 4"));
  std::vector<float> with_nan = values;
  with_nan[5] = std::numeric_limits<float>::quiet_NaN();
  BOOST_CHECK_EXCEPTION(write_one({"t", {64}, kvlab::ggml_type::q4_0, with_nan}), kvlab::error,
                        says("tensor 't': element 5 is nan; Q4_0 stores finite values only"));
  BOOST_CHECK_EXCEPTION(
      kvlab::write_gguf(path, std::vector<kvlab::gguf_metadata_item>{{"k", std::uint32_t{1}}, {"k", true}}, {}),
      kvlab::error, says("metadata key 'k' appears twice"));
  BOOST_CHECK_EXCEPTION(
      kvlab::write_gguf(path, std::vector<kvlab::gguf_metadata_item>{{"general.alignment", std::uint32_t{24}}}, {}),
      kvlab::error, says("'general.alignment' is 24; it must be a nonzero power of two"));
  BOOST_CHECK_EXCEPTION(
      kvlab::write_gguf(path, {},
                        std::vector<kvlab::gguf_tensor_input>{{"t", {64}, kvlab::ggml_type::f32, values},
                                                              {"t", {64}, kvlab::ggml_type::f32, values}}),
      kvlab::error, says("tensor 't' appears twice"));
  // The failed writes left the file as it was and no temporary file behind; a successful one
  // replaces the file.
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"out.gguf"}), boost::test_tools::per_element());
  BOOST_TEST(kvlab::gguf_file(path).find_tensor("t") != nullptr);
  write_one({"u", {64}, kvlab::ggml_type::f16, values});
  BOOST_TEST(dir.entries() == (std::vector<std::string>{"out.gguf"}), boost::test_tools::per_element());
  const kvlab::gguf_file file(path);
  BOOST_TEST(file.find_tensor("t") == nullptr);
  BOOST_TEST(dequantized(file.tensor("u")) == values, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
