// The JSON reader in kvlab.core: RFC 8259 and nothing more, errors that name the byte and
// what was expected there, integers kept exactly, and no input that can exhaust the stack.
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>
import kvlab;

namespace {

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// The error reading `text`; the test fails when there is none.
kvlab::json_error error_of(std::string_view text) {
  try {
    kvlab::parse_json(text, "test.json");
  } catch (const kvlab::json_error& e) {
    return e;
  }
  BOOST_ERROR("no error reading: " << text);
  return {"", 0, "", ""};
}

struct bad_text {
  std::string text;
  std::size_t byte;
  std::string problem;
};

void check_errors(const std::vector<bad_text>& cases) {
  for (const auto& [text, byte, problem] : cases) {
    const kvlab::json_error e = error_of(text);
    BOOST_TEST(e.position() == byte, text << " -> " << e.what());
    BOOST_TEST(contains(e.problem(), problem), text << " -> " << e.what());
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(json_reader)

BOOST_AUTO_TEST_CASE(reads_every_kind_of_value_with_its_first_byte) {
  const auto v = kvlab::parse_json(R"( {"a": [1, -2.5e3, true, null], "s": "x\"\u00e9", "o": {}} )", "test.json");
  BOOST_TEST(v.position == 1u);
  const auto& a = v.find("a")->array();
  BOOST_TEST(v.find("a")->position == 7u);
  BOOST_TEST(a[0].integer<int>().value() == 1);
  BOOST_TEST(a[1].number() == -2500.0);
  BOOST_TEST(a[1].number_text() == "-2.5e3");
  BOOST_TEST(a[1].position == 11u);
  BOOST_TEST((a[2].is_bool() && a[2].boolean()));
  BOOST_TEST(a[3].is_null());
  BOOST_TEST(a[3].position == 25u);
  BOOST_TEST(v.find("s")->string() == "x\"\xc3\xa9");
  BOOST_TEST(v.find("o")->object().empty());
  BOOST_TEST(v.find("missing") == nullptr);
  BOOST_TEST(a[0].find("a") == nullptr); // not an object
  BOOST_TEST(v.kind_name() == "an object");
  BOOST_TEST(a[0].kind_name() == "a number");
  BOOST_TEST(a[3].kind_name() == "null");
}

BOOST_AUTO_TEST_CASE(errors_name_the_text_the_byte_and_what_was_expected_and_found) {
  const kvlab::json_error e = error_of(R"({"a": [1, 2,]})");
  BOOST_TEST(std::string(e.what()) ==
                 R"(test.json: invalid JSON at byte 12: expected a value, found ']' (a trailing comma is not JSON); )"
                 R"(the text there reads "]}")",
             e.what());
  BOOST_TEST(dynamic_cast<const kvlab::error*>(&e) != nullptr); // callers that catch kvlab::error see it
  check_errors({
      {R"({"a" 1})", 5, "expected ':' after the key \"a\", found '1'"},
      {R"({"a": 1)", 7, "expected ',' or '}' after a member of an object, found the end of the text"},
      {R"({"a": 1,})", 8, "expected a string key, found '}' (a trailing comma is not JSON)"},
      {R"({1: 2})", 1, "expected a string key, found '1'"},
      {R"([1 2])", 3, "expected ',' or ']' after an element of an array, found '2'"},
      {R"([nul])", 1, "expected a value (object, array, string, number, true, false or null), found 'nul'"},
      {R"([True])", 1, "found 'True'"},
      {R"(['a'])", 1, "found '''"},
      {R"({"a": "abc})", 6, "unterminated string"},
      {"[\"a\tb\"]", 3, "control character \\x09 in a string must be escaped"},
  });
}

BOOST_AUTO_TEST_CASE(empty_text_and_trailing_text_are_errors) {
  check_errors({
      {"", 0, "expected a value (object, array, string, number, true, false or null), found the end of the text"},
      {" \n\t", 3, "found the end of the text"},
      {"[1] x", 4, "unexpected 'x' after the JSON value (only whitespace may follow it)"},
      {"{} {}", 3, "unexpected '{' after the JSON value"},
      {"1 2", 2, "unexpected '2' after the JSON value"},
  });
  BOOST_TEST(kvlab::parse_json(" \r\n\t[] \r\n\t", "test.json").array().empty());
}

BOOST_AUTO_TEST_CASE(nesting_deeper_than_the_limit_is_an_error_not_a_stack_overflow) {
  const std::size_t limit = kvlab::json_max_depth;
  const std::string deepest = std::string(limit, '[') + std::string(limit, ']');
  BOOST_TEST(kvlab::parse_json(deepest, "test.json").is_array());
  check_errors({
      {std::string(limit + 1, '[') + std::string(limit + 1, ']'), limit, "nest deeper than 64 levels"},
      {std::string(100'000, '['), limit, "nest deeper than 64 levels"},
  });
  std::string objects;
  for (int i = 0; i < 100'000; ++i) objects += "{\"a\":";
  BOOST_TEST(error_of(objects).position() == 5 * limit);
}

BOOST_AUTO_TEST_CASE(integers_keep_every_digit_past_two_to_the_53) {
  const auto v =
      kvlab::parse_json("[18446744073709551615, 9007199254740993, -9223372036854775808, 0, -0, 7.0, 7e0]", "test.json");
  const auto& a = v.array();
  BOOST_TEST(a[0].integer<std::uint64_t>().value() == std::numeric_limits<std::uint64_t>::max());
  BOOST_TEST(a[1].integer<std::uint64_t>().value() == (std::uint64_t{1} << 53) + 1);
  BOOST_TEST(a[1].number() == 0x1p53); // the double alone would lose the last digit
  BOOST_TEST(a[2].integer<std::int64_t>().value() == std::numeric_limits<std::int64_t>::min());
  BOOST_TEST(a[3].integer<std::uint64_t>().value() == 0u);
  BOOST_TEST(a[4].integer<std::int64_t>().value() == 0);
  // Out of the type's range, negative for an unsigned type, or not written as a whole number.
  BOOST_TEST(!a[0].integer<std::int64_t>());
  BOOST_TEST(!a[0].integer<std::uint32_t>());
  BOOST_TEST(!a[2].integer<std::uint64_t>());
  BOOST_TEST(!a[5].integer<int>());
  BOOST_TEST(!a[6].integer<int>());
  BOOST_TEST(a[6].number() == 7.0);
  BOOST_TEST(!kvlab::parse_json(R"("7")", "test.json").integer<int>()); // a string is no number
  // Past 2^64 a number is still a number, only not a 64-bit integer.
  const auto big = kvlab::parse_json("18446744073709551616", "test.json");
  BOOST_TEST(big.number() == 0x1p64);
  BOOST_TEST(!big.integer<std::uint64_t>());
}

BOOST_AUTO_TEST_CASE(numbers_follow_the_rfc_8259_grammar) {
  for (const char* good : {"0", "-0", "10", "-1.5", "1e5", "1E+5", "2.5e-3", "0.000001"})
    BOOST_TEST(kvlab::parse_json(good, "test.json").number_text() == good);
  check_errors({
      {"01", 0, "leading zeros are not allowed"},
      {"-01", 0, "leading zeros are not allowed"},
      {"-", 1, "expected a digit after '-', found the end of the text"},
      {"-a", 1, "expected a digit after '-', found 'a'"},
      {"1.", 2, "expected a digit after the decimal point"},
      {"1.e5", 2, "expected a digit after the decimal point"},
      {"1e", 2, "expected a digit after the exponent's 'e'"},
      {"1e+", 3, "expected a digit after the exponent's 'e'"},
      {".5", 0, "expected a value"},
      {"+1", 0, "expected a value"},
      {"NaN", 0, "found 'NaN'"},
      {"-Infinity", 1, "expected a digit after '-', found 'Infinity'"},
      {"0x10", 1, "unexpected 'x' after the JSON value"},
  });
}

BOOST_AUTO_TEST_CASE(numbers_outside_the_double_range_are_errors_not_infinity_or_zero) {
  check_errors({
      {"1e999", 0, "the number 1e999 does not fit in a double"},
      {"[-1e999]", 1, "the number -1e999 does not fit in a double"},
      {"1e-400", 0, "does not fit in a double"},
  });
  BOOST_TEST(kvlab::parse_json("1.7976931348623157e308", "test.json").number() == std::numeric_limits<double>::max());
  BOOST_TEST(kvlab::parse_json("4.9e-324", "test.json").number() == std::numeric_limits<double>::denorm_min());
}

BOOST_AUTO_TEST_CASE(escapes_decode_and_others_are_refused_at_the_backslash) {
  BOOST_TEST(kvlab::parse_json(R"("\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac")", "test.json").string() ==
             "\"\\/\b\f\n\r\tA\xc3\xa9\xe2\x82\xac");
  BOOST_TEST(kvlab::parse_json(R"("\ud83d\ude00")", "test.json").string() == "\xf0\x9f\x98\x80"); // one emoji
  BOOST_TEST(kvlab::parse_json(R"("\u0000")", "test.json").string() == std::string(1, '\0'));
  check_errors({
      {R"("\q")", 1, "invalid escape '\\q' (JSON allows"},
      {R"("\x41")", 1, "invalid escape '\\x'"},
      {R"("ab\u12G4")", 3, "\\u must be followed by 4 hexadecimal digits"},
      {R"("\u12")", 1, "\\u must be followed by 4 hexadecimal digits"},
      {"\"\\", 0, "unterminated string"},
  });
}

BOOST_AUTO_TEST_CASE(lone_surrogates_and_bytes_that_are_not_utf8_are_refused) {
  check_errors({
      {R"("\ud83d")", 1, "\\ud83d is a high surrogate not followed by a low surrogate"},
      {R"("\ud83dx")", 1, "high surrogate not followed by a low surrogate"},
      {R"("\ud83d\u0041")", 1, "high surrogate not followed by a low surrogate"},
      {R"("\ud83d\ud83d")", 1, "high surrogate not followed by a low surrogate"},
      {R"("x\ude00")", 2, "\\ude00 is a low surrogate without a high surrogate before it"},
      {"\"k\xff\"", 2, "not valid UTF-8: the byte \\xff starts no character"},
      {"[\"\xc0\xaf\"]", 2, "not valid UTF-8"},       // an overlong '/'
      {"\"\xed\xa0\x80\"", 1, "not valid UTF-8"},     // an encoded surrogate
      {"\"\xf4\x90\x80\x80\"", 1, "not valid UTF-8"}, // above U+10FFFF
      {"\"\xe2\x82\"", 1, "not valid UTF-8"},         // cut short
      {"[1]\xff", 3, "not valid UTF-8"},              // outside a string too
  });
  BOOST_TEST(kvlab::parse_json("\"\xf4\x8f\xbf\xbf\"", "test.json").string() == "\xf4\x8f\xbf\xbf"); // U+10FFFF
}

BOOST_AUTO_TEST_CASE(a_repeated_key_is_refused_at_its_second_appearance) {
  check_errors({
      {R"({"a": 1, "a": 2})", 9, "duplicate key \"a\""},
      {R"({"a": 1, "b": {"a": 1, "a": 1}})", 23, "duplicate key \"a\""},
      {R"({"\u0061": 1, "a": 2})", 14, "duplicate key \"a\""}, // the same key, escaped once
  });
  BOOST_TEST(kvlab::parse_json(R"([{"a": 1}, {"a": 2}])", "test.json").array().size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
