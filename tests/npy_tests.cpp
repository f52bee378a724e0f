// .npy reading and writing: files built byte by byte as np.save writes them, round trips,
// the exact header numpy writes, atomic replacement, and every kind of malformed file.
#include <boost/test/unit_test.hpp>

#include "test_files.hpp"
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>
import kvlab;

using namespace kvlab_test;

using namespace std::string_literals;

namespace {

template <class Bits>
std::string bytes_of(Bits bits, bool big_endian) {
  std::string bytes;
  for (std::size_t i = 0; i < sizeof(Bits); ++i) {
    const std::size_t shift = 8 * (big_endian ? sizeof(Bits) - 1 - i : i);
    bytes += static_cast<char>((bits >> shift) & 0xff);
  }
  return bytes;
}

std::string float32_data(std::initializer_list<float> values, bool big_endian = false) {
  std::string bytes;
  for (const float value : values) bytes += bytes_of(std::bit_cast<std::uint32_t>(value), big_endian);
  return bytes;
}

std::string float64_data(std::initializer_list<double> values, bool big_endian = false) {
  std::string bytes;
  for (const double value : values) bytes += bytes_of(std::bit_cast<std::uint64_t>(value), big_endian);
  return bytes;
}

std::string float16_data(std::initializer_list<std::uint16_t> bits, bool big_endian = false) {
  std::string bytes;
  for (const std::uint16_t value : bits) bytes += bytes_of(value, big_endian);
  return bytes;
}

std::string read_error(const std::filesystem::path& file) {
  return kvlab_test::message_of<kvlab::error>([&] { kvlab::read_npy(file); });
}

std::string read_error_of(const std::string& bytes) {
  const scratch_file file("malformed");
  file.write(bytes);
  const std::string message = read_error(file.path());
  // Every message names the file.
  BOOST_TEST(message.find(file.path().string()) != std::string::npos, message);
  return message;
}

using shape_t = std::vector<std::size_t>;

} // namespace

BOOST_AUTO_TEST_SUITE(npy)

BOOST_AUTO_TEST_CASE(reads_version_1_float32_as_numpy_writes_it) {
  // np.save(f, np.array([[1.5, -2, 0.25], [3e38, -0.0, 1e-45]], dtype='<f4'))
  const std::string header = "\x93NUMPY\x01\x00\x76\x00"s +
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') +
                             "\n";
  BOOST_REQUIRE_EQUAL(header.size(), 128u);
  const scratch_file file("v1_f4");
  file.write(header + float32_data({1.5f, -2.0f, 0.25f, 3e38f, -0.0f, 1e-45f}));
  const auto array = kvlab::read_npy(file.path());
  BOOST_TEST(array.shape == (shape_t{2, 3}), boost::test_tools::per_element());
  const std::vector<float> expected{1.5f, -2.0f, 0.25f, 3e38f, -0.0f, 1e-45f};
  BOOST_TEST(same_bits(array.values, expected));
}

BOOST_AUTO_TEST_CASE(reads_version_2_and_3_headers) {
  // np.lib.format.write_array(f, np.array([7, 8, 9], dtype='<f4'), version=(2, 0)): 4-byte length field.
  const scratch_file v2("v2");
  v2.write("\x93NUMPY\x02\x00\x74\x00\x00\x00"s + "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }" +
           std::string(58, ' ') + "\n" + float32_data({7, 8, 9}));
  const auto two = kvlab::read_npy(v2.path());
  BOOST_TEST(two.shape == (shape_t{3}), boost::test_tools::per_element());
  BOOST_TEST(two.values == (std::vector<float>{7, 8, 9}), boost::test_tools::per_element());

  // version=(3, 0): the same layout with a UTF-8 header.
  const scratch_file v3("v3");
  v3.write("\x93NUMPY\x03\x00\x74\x00\x00\x00"s + "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
           std::string(56, ' ') + "\n" + float32_data({1, 2, 3, 4, 5, 6}));
  const auto three = kvlab::read_npy(v3.path());
  BOOST_TEST(three.shape == (shape_t{2, 3}), boost::test_tools::per_element());
  BOOST_TEST(three.values == (std::vector<float>{1, 2, 3, 4, 5, 6}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(reads_float16_exactly_in_a_1d_shape) {
  // np.save(f, np.array([1, -2, 65504, 2**-24, 0.333], dtype='<f2')): 1-D shape (5,).
  const scratch_file file("f2");
  file.write("\x93NUMPY\x01\x00\x76\x00"s + "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }" +
             std::string(60, ' ') + "\n" + float16_data({0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555}));
  const auto array = kvlab::read_npy(file.path());
  BOOST_TEST(array.shape == (shape_t{5}), boost::test_tools::per_element());
  const std::vector<float> expected{1.0f, -2.0f, 65504.0f, 0x1p-24f, kvlab::half_bits_to_float(0x3555)};
  BOOST_TEST(same_bits(array.values, expected));
  BOOST_TEST(array.values[4] == 0.333251953125f); // 0x3555 exactly
}

BOOST_AUTO_TEST_CASE(reads_float64_rounded_to_float32) {
  // np.save(f, np.array([[0.1, -1e-300, 1e30], [3.0, -0.5, 1e38]], dtype='<f8'))
  const scratch_file file("f8");
  file.write("\x93NUMPY\x01\x00\x76\x00"s + "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }" +
             std::string(58, ' ') + "\n" + float64_data({0.1, -1e-300, 1e30, 3.0, -0.5, 1e38}));
  const auto array = kvlab::read_npy(file.path());
  BOOST_TEST(array.shape == (shape_t{2, 3}), boost::test_tools::per_element());
  const std::vector<float> expected{0.1f, -0.0f, 1e30f, 3.0f, -0.5f, 1e38f};
  BOOST_TEST(same_bits(array.values, expected));
}

BOOST_AUTO_TEST_CASE(reads_big_endian_float32_float16_float64) {
  // np.save(f, np.arange(12, dtype='>f4').reshape(2, 2, 3)): a 3-D shape, bytes swapped.
  const scratch_file f4("be_f4");
  f4.write("\x93NUMPY\x01\x00\x76\x00"s + "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2, 3), }" +
           std::string(55, ' ') + "\n" + float32_data({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -11.5f}, true));
  const auto a = kvlab::read_npy(f4.path());
  BOOST_TEST(a.shape == (shape_t{2, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(a.values == (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, -11.5f}),
             boost::test_tools::per_element());

  const scratch_file f2("be_f2");
  f2.write("\x93NUMPY\x01\x00\x76\x00"s + "{'descr': '>f2', 'fortran_order': False, 'shape': (4,), }" +
           std::string(60, ' ') + "\n" + float16_data({0x3c00, 0xc000, 0x3800, 0x8001}, true));
  const auto b = kvlab::read_npy(f2.path());
  BOOST_TEST(same_bits(b.values, std::vector<float>{1.0f, -2.0f, 0.5f, -0x1p-24f}));

  const scratch_file f8("be_f8");
  f8.write("\x93NUMPY\x01\x00\x76\x00"s + "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 2), }" +
           std::string(58, ' ') + "\n" + float64_data({0.1, -2.0, 1e-3, 12345.0}, true));
  const auto c = kvlab::read_npy(f8.path());
  BOOST_TEST(c.shape == (shape_t{2, 2}), boost::test_tools::per_element());
  BOOST_TEST(same_bits(c.values, std::vector<float>{0.1f, -2.0f, 1e-3f, 12345.0f}));
}

BOOST_AUTO_TEST_CASE(accepts_headers_other_writers_produce) {
  const std::string six = float32_data({1, 2, 3, 4, 5, 6});
  // Keys in another order, double quotes, no trailing comma, extra spaces, a trailing comma
  // inside the tuple, no padding at all, and Python 2's long-integer suffix.
  for (const std::string& dict : {"{\"shape\": (2, 3), \"descr\": \"<f4\", \"fortran_order\": False}"s,
                                  "{ 'fortran_order' :False ,'shape':( 2 ,3 , ) , 'descr' : '<f4' , }"s,
                                  "{'descr':'<f4','fortran_order':False,'shape':(2,3)}"s,
                                  "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }"s}) {
    const scratch_file file("lenient");
    file.write(npy_version_1_file(dict, six));
    const auto array = kvlab::read_npy(file.path());
    BOOST_TEST(array.shape == (shape_t{2, 3}), boost::test_tools::per_element());
    BOOST_TEST(array.values == (std::vector<float>{1, 2, 3, 4, 5, 6}), boost::test_tools::per_element());
  }
  const std::string unpadded = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}";
  const scratch_file file("unpadded");
  file.write("\x93NUMPY\x01\x00"s + static_cast<char>(unpadded.size()) + '\0' + unpadded + float32_data({4, 5, 6}));
  BOOST_TEST(kvlab::read_npy(file.path()).values == (std::vector<float>{4, 5, 6}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(written_header_is_byte_identical_to_numpy) {
  // np.save(f, np.zeros((2, 3), dtype=np.float32)) writes exactly these 128 bytes.
  const std::string numpy_header =
      "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"s + std::string(58, ' ') +
      "\n";
  BOOST_REQUIRE_EQUAL(numpy_header.size(), 128u);
  const scratch_file file("written");
  const std::vector<float> values{1.5f, -2, 0.25f, 3e38f, -0.0f, 1e-45f};
  kvlab::write_npy(file.path(), shape_t{2, 3}, values);
  const std::string bytes = file.contents();
  BOOST_REQUIRE_EQUAL(bytes.size(), 128u + 6 * 4);
  BOOST_TEST(bytes.substr(0, 128) == numpy_header);
  BOOST_TEST(bytes.substr(128) == float32_data({1.5f, -2, 0.25f, 3e38f, -0.0f, 1e-45f}));
}

BOOST_AUTO_TEST_CASE(written_header_pads_like_numpy_at_alignment_boundaries) {
  // numpy leaves 21 - len(str(shape[0])) spare spaces after the dict and then pads to 64
  // with at least one space: 15 ones need 192 bytes; 36 ones land exactly on 192 with the
  // spare spaces and '\n', so numpy adds a full 64 spaces (256 bytes).
  for (const auto& [dimensions, expected_header_bytes] : {std::pair{15u, 192u}, std::pair{36u, 256u}}) {
    const scratch_file file("padding");
    const shape_t shape(dimensions, 1);
    kvlab::write_npy(file.path(), shape, std::vector<float>{42});
    const std::string bytes = file.contents();
    BOOST_REQUIRE_EQUAL(bytes.size(), expected_header_bytes + 4);
    BOOST_TEST(bytes[expected_header_bytes - 1] == '\n');
    BOOST_TEST(static_cast<unsigned char>(bytes[8]) + 256u * static_cast<unsigned char>(bytes[9]) ==
               expected_header_bytes - 10);
    const std::string dict = bytes.substr(10, bytes.find('}') - 9);
    BOOST_TEST(dict.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1,"));
    BOOST_TEST(dict.ends_with(", 1), }"));
    const std::size_t spaces = expected_header_bytes - 10 - dict.size() - 1;
    BOOST_TEST(bytes.substr(10 + dict.size(), spaces) == std::string(spaces, ' '));
    BOOST_TEST(spaces == (dimensions == 15u ? 20u + 63u : 20u + 64u));
    BOOST_TEST(kvlab::read_npy(file.path()).shape == shape, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(write_then_read_round_trips_bit_for_bit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const shape_t& shape : {shape_t{7}, shape_t{2, 3}, shape_t{2, 3, 4}, shape_t{1, 1, 1, 5}, shape_t{1000, 3}}) {
    std::size_t count = 1;
    for (const std::size_t d : shape) count *= d;
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.37f - 3.0f;
    values[0] = -0.0f;
    if (count > 3) {
      values[1] = inf;
      values[2] = nan;
      values[3] = 0x1p-149f;
    }
    const scratch_file file("round_trip");
    kvlab::write_npy(file.path(), shape, values);
    const std::string bytes = file.contents();
    const std::size_t data_start = bytes.size() - count * 4;
    BOOST_TEST(data_start % 64 == 0u);
    BOOST_TEST(bytes[data_start - 1] == '\n');
    const auto array = kvlab::read_npy(file.path());
    BOOST_TEST(array.shape == shape, boost::test_tools::per_element());
    BOOST_TEST(same_bits(array.values, values));
  }
}

BOOST_AUTO_TEST_CASE(write_replaces_atomically_and_leaves_no_temporary_files) {
  const scratch_directory directory;
  const auto target = directory.path() / "keys.npy";
  kvlab::write_npy(target, shape_t{2}, std::vector<float>{1, 2});
  kvlab::write_npy(target, shape_t{3}, std::vector<float>{3, 4, 5}); // over an existing file
  BOOST_TEST(kvlab::read_npy(target).values == (std::vector<float>{3, 4, 5}), boost::test_tools::per_element());
  BOOST_TEST(directory.entries() == std::vector<std::string>{"keys.npy"}, boost::test_tools::per_element());

  // A rejected write leaves the existing file as it was, and no temporary behind.
  BOOST_CHECK_THROW(kvlab::write_npy(target, shape_t{2, 2}, std::vector<float>{1, 2, 3}), kvlab::error);
  BOOST_TEST(kvlab::read_npy(target).values == (std::vector<float>{3, 4, 5}), boost::test_tools::per_element());
  // A write whose rename fails (the target is a directory) cleans up its temporary file.
  std::filesystem::create_directory(directory.path() / "taken.npy");
  const std::string message = kvlab_test::message_of<kvlab::error>(
      [&] { kvlab::write_npy(directory.path() / "taken.npy", shape_t{1}, std::vector<float>{1}); });
  BOOST_TEST(contains(message, "taken.npy': cannot replace it"), message);
  BOOST_TEST(directory.entries().size() == 2u);
}

BOOST_AUTO_TEST_CASE(write_rejects_bad_arguments_naming_the_file) {
  const auto write_error = [](const std::filesystem::path& file, const shape_t& shape,
                              const std::vector<float>& values) {
    return kvlab_test::message_of<kvlab::error>([&] { kvlab::write_npy(file, shape, values); });
  };
  const auto file = unique_temp_path("never_written.npy");
  const std::string mismatch = write_error(file, {2, 3}, {1, 2, 3, 4, 5});
  BOOST_TEST(contains(mismatch, file.string()), mismatch);
  BOOST_TEST(contains(mismatch, "shape (2, 3) holds 6 values, but 5 were given"), mismatch);
  BOOST_TEST(contains(write_error(file, {}, {1}), "cannot write shape ()"));
  BOOST_TEST(contains(write_error(file, {2, 0}, {}), "shape (2, 0): it has a zero dimension"));
  BOOST_TEST(
      contains(write_error(file, {std::size_t{1} << 32, std::size_t{1} << 32}, {1}), "holds more than 2^64 values"));
  const std::string no_directory = write_error(unique_temp_path("missing") / "x.npy", {1}, {1});
  BOOST_TEST(contains(no_directory, "cannot create the temporary file"), no_directory);
  BOOST_TEST(contains(no_directory, "No such file or directory"), no_directory);
  BOOST_TEST(!std::filesystem::exists(file));
}

BOOST_AUTO_TEST_CASE(missing_or_unreadable_files_cannot_be_opened) {
  const auto missing = unique_temp_path("missing.npy");
  const std::string message = read_error(missing);
  BOOST_TEST(contains(message, "npy file '" + missing.string() + "': cannot open: no such file"), message);
  const scratch_directory directory;
  BOOST_TEST(contains(read_error(directory.path()), "cannot open: it is a directory"));
  const auto loop = directory.path() / "loop.npy"; // a symbolic link to itself
  std::filesystem::create_symlink(loop, loop);
  const std::string looping = read_error(loop);
  BOOST_TEST(contains(looping, "cannot open: Too many levels of symbolic links"), looping);
}

BOOST_AUTO_TEST_CASE(bad_magic_is_not_an_npy_file) {
  const std::string message = read_error_of("PK\x03\x04 this is a zip archive, not an .npy file");
  BOOST_TEST(contains(message, "not an .npy file: expected the magic string \\x93NUMPY, found \"PK\\x03\\x04 t\""),
             message);
  BOOST_TEST(contains(read_error_of(""), "not an .npy file"));
  BOOST_TEST(contains(read_error_of("\x93NUM"), "(the file has only 4 bytes)"));
}

BOOST_AUTO_TEST_CASE(unsupported_versions_are_named) {
  const std::string message = read_error_of("\x93NUMPY\x04\x00\x76\x00{}"s);
  BOOST_TEST(contains(message, "unsupported .npy format version 4.0; supported: 1.0, 2.0, 3.0"), message);
  BOOST_TEST(contains(read_error_of("\x93NUMPY\x01\x01\x76\x00{}"s), "version 1.1;"));
}

BOOST_AUTO_TEST_CASE(truncated_headers_are_reported) {
  BOOST_TEST(contains(read_error_of("\x93NUMPY\x01"), "truncated header: the file ends after 7 bytes"));
  const std::string in_length = read_error_of("\x93NUMPY\x02\x00\x76\x00"s);
  BOOST_TEST(
      contains(in_length, "truncated header: the file ends after 10 bytes, inside the 4-byte header length field"),
      in_length);
  const std::string short_header = read_error_of("\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', "s);
  BOOST_TEST(contains(short_header, "truncated header: the header length field says 118 bytes, but only 17 bytes "
                                    "follow the 10-byte prefix"),
             short_header);
  // A corrupt 4-byte length field is refused before anything of that size is allocated.
  const std::string huge = read_error_of("\x93NUMPY\x02\x00\xff\xff\xff\xff{}"s);
  BOOST_TEST(contains(huge, "header length field says 4294967295 bytes, more than the 1048576"), huge);
}

BOOST_AUTO_TEST_CASE(headers_that_are_not_the_dict_literal_are_rejected) {
  const std::string data = float32_data({1, 2, 3});
  const std::string invalid = "header is not a valid Python dict literal of the keys 'descr', 'fortran_order', 'shape'";
  const auto check = [&](const std::string& dict, const std::string& problem) {
    const std::string message = read_error_of(npy_version_1_file(dict, data));
    BOOST_TEST(contains(message, invalid), message);
    BOOST_TEST(contains(message, problem), message);
  };
  check("['descr', '<f4']", "expected '{' opening the dict at byte 0");
  check("{'descr': '<f4', 'fortran_order': False}", "key 'shape' is missing");
  check("{'descr': '<f4', 'shape': (3,)}", "key 'fortran_order' is missing");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", "unexpected key 'extra'");
  check("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "key 'descr' appears twice");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
        "shape (3) is an integer in parentheses, not a tuple");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': [3]}", "expected a tuple such as (2, 3)");
  check("{'descr': '<f4', 'fortran_order': false, 'shape': (3,)}", "expected True or False");
  check("{'descr': '<f4', 'fortran_order': Falsely, 'shape': (3,)}", "expected True or False");
  check("{'descr' '<f4', 'fortran_order': False, 'shape': (3,)}", "expected ':' after key 'descr'");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ", "expected a quoted key or '}'");
  check("{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "expected ',' or '}' after the value of 'descr'");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", "expected ',' or ')' in the shape tuple");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}", "dimension must not be negative");
  check("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", "unexpected text after the closing '}'");
  check("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (3,)}", "escape sequences");
  check("{descr: '<f4', 'fortran_order': False, 'shape': (3,)}", "expected a quoted key");
  check("{'descr': 4, 'fortran_order': False, 'shape': (3,)}", "quoted dtype string");
  // Python 3 headers (format 3.0) must not carry Python 2's long suffix.
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3L,), }";
  const std::string v3 = read_error_of("\x93NUMPY\x03\x00"s + static_cast<char>(dict.size() + 1) + '\0' + '\0' + '\0' +
                                       dict + "\n" + data);
  BOOST_TEST(contains(v3, "expected ',' or ')' in the shape tuple"), v3);
}

BOOST_AUTO_TEST_CASE(unsupported_dtypes_list_the_supported_ones) {
  const std::string message = read_error_of(
      npy_version_1_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", std::string(12, 'x')));
  BOOST_TEST(contains(message, "unsupported dtype '<i4'; supported: '<f4', '<f2', '<f8', '>f4', '>f2', '>f8'"),
             message);
  BOOST_TEST(
      contains(read_error_of(npy_version_1_file("{'descr': 'float32', 'fortran_order': False, 'shape': (3,)}", "")),
               "unsupported dtype 'float32'"));
  const std::string structured = read_error_of(
      npy_version_1_file("{'descr': [('x', '<f4'), ('y', '<f4')], 'fortran_order': False, 'shape': (3,), }", ""));
  BOOST_TEST(contains(structured, "unsupported dtype: the header describes a structured (record) dtype; supported: "
                                  "'<f4'"),
             structured);
}

BOOST_AUTO_TEST_CASE(fortran_order_is_rejected_with_the_fix) {
  const std::string message = read_error_of(npy_version_1_file(
      "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", float32_data({1, 2, 3, 4, 5, 6})));
  BOOST_TEST(contains(message, "fortran_order is True"), message);
  BOOST_TEST(contains(message, "np.ascontiguousarray"), message);
}

BOOST_AUTO_TEST_CASE(scalars_are_rejected) {
  const std::string message =
      read_error_of(npy_version_1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", float32_data({1})));
  BOOST_TEST(contains(message, "shape () is a scalar"), message);
}

BOOST_AUTO_TEST_CASE(data_size_must_match_the_shape) {
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  const std::string truncated = read_error_of(npy_version_1_file(dict, float32_data({1, 2, 3, 4, 5})));
  BOOST_TEST(contains(truncated, "expected 24 bytes of data (shape (2, 3) of '<f4'), found 20 (the file is truncated)"),
             truncated);
  const std::string trailing = read_error_of(npy_version_1_file(dict, float32_data({1, 2, 3, 4, 5, 6}) + "!"));
  BOOST_TEST(contains(trailing, "expected 24 bytes of data (shape (2, 3) of '<f4'), found 25 (trailing bytes)"),
             trailing);
  const std::string half = read_error_of(
      npy_version_1_file("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", float16_data({1, 2, 3})));
  BOOST_TEST(contains(half, "expected 8 bytes of data (shape (4,) of '<f2'), found 6"), half);
}

BOOST_AUTO_TEST_CASE(zero_and_absurd_dimensions_are_rejected) {
  const std::string zero =
      read_error_of(npy_version_1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }", ""));
  BOOST_TEST(contains(zero, "shape (2, 0, 3) has a zero dimension"), zero);
  const std::string digits = read_error_of(
      npy_version_1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 1), }", ""));
  BOOST_TEST(contains(digits, "absurd shape: dimension 99999999999999999999999 does not fit in 64 bits"), digits);
  // Each dimension fits, but the element count does not.
  const std::string product = read_error_of(npy_version_1_file(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 1), }", float32_data({1})));
  BOOST_TEST(contains(product, "absurd shape (4294967296, 4294967296, 1)"), product);
  // The element count fits, but 4 bytes each wrap around 2^64 to exactly the 4 bytes present.
  const std::string bytes = read_error_of(npy_version_1_file(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387905,), }", float32_data({1})));
  BOOST_TEST(contains(bytes, "absurd shape (4611686018427387905,): its size in bytes does not fit in 64 bits"), bytes);
}

BOOST_AUTO_TEST_CASE(float64_beyond_float32_range_is_an_error) {
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  const std::string message = read_error_of(npy_version_1_file(dict, float64_data({1.0, -1e300, 2.0})));
  BOOST_TEST(contains(message, "element 1 = -1e+300 is outside the float32 range"), message);
  const std::string big_endian = read_error_of(
      npy_version_1_file("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", float64_data({1.0, 4e38}, true)));
  BOOST_TEST(contains(big_endian, "element 1 = 4e+38 is outside the float32 range"), big_endian);
  // Infinities and NaN have float32 counterparts; they are kept (the cache reports them).
  const scratch_file file("f8_special");
  file.write(npy_version_1_file(dict, float64_data({std::numeric_limits<double>::infinity(), std::nan(""), 0x1p-160})));
  const auto array = kvlab::read_npy(file.path());
  BOOST_TEST(std::isinf(array.values[0]));
  BOOST_TEST(std::isnan(array.values[1]));
  BOOST_TEST(array.values[2] == 0.0f);
}

BOOST_AUTO_TEST_CASE(random_corruptions_give_an_array_or_a_kvlab_error) {
  // Mutated, truncated and extended copies of valid files: read_npy must return a
  // consistent array or throw kvlab::error (anything else, or a crash, fails the test).
  const std::vector<std::string> originals = {
      npy_version_1_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                         float32_data({1, 2, 3, 4, 5, 6})),
      npy_version_1_file("{'descr': '>f8', 'fortran_order': False, 'shape': (3,), }", float64_data({1, 2, 3}, true)),
      npy_version_1_file("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 2, 2), }", float16_data({1, 2, 3, 4}))};
  std::mt19937 random(20240611);
  const scratch_file file("corrupt");
  std::size_t arrays = 0, errors = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::string bytes = originals[random() % originals.size()];
    switch (random() % 4) {
    case 0: bytes.resize(random() % bytes.size()); break;
    case 1: bytes.insert(random() % bytes.size(), 1, static_cast<char>(random())); break;
    default:
      for (unsigned flips = 1 + random() % 3; flips > 0; --flips)
        bytes[random() % bytes.size()] = static_cast<char>(random());
    }
    file.write(bytes);
    try {
      const auto array = kvlab::read_npy(file.path());
      std::size_t count = 1;
      for (const std::size_t dimension : array.shape) count *= dimension;
      BOOST_TEST_REQUIRE(count == array.values.size());
      ++arrays;
    } catch (const kvlab::error&) {
      ++errors;
    }
  }
  BOOST_TEST(arrays > 0u); // some mutations only touch padding or data
  BOOST_TEST(errors > 0u);
}

BOOST_AUTO_TEST_SUITE_END()
