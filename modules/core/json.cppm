// kvlab's JSON reader (RFC 8259), for every JSON file kvlab reads: result cells, Hugging Face
// config, index and tokenizer files, safetensors headers. A syntax error names the byte where
// reading stopped and what was expected against what was found there. Numbers keep the text
// they were written as, so integers past 2^53 (safetensors offsets, seeds) read back exactly.
module;
#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>
export module kvlab.core:json;
import :errors;
import :text;

export namespace kvlab {

// Objects and arrays nest at most this deep: the reader recurses once per level, and no file
// kvlab reads needs more than a handful (a safetensors header needs 3).
inline constexpr std::size_t json_max_depth = 64;

struct json_value;
using json_array = std::vector<json_value>;
using json_object_map = std::map<std::string, json_value, std::less<>>;

// A number as written (RFC 8259 grammar, checked) and the nearest double, which is finite.
struct json_number_text {
  std::string text;
  double value = 0;
};

struct json_value {
  std::variant<std::nullptr_t, bool, json_number_text, std::string, json_array, json_object_map> value;
  std::size_t position = 0; // the value's first byte in the text it was read from

  bool is_null() const { return std::holds_alternative<std::nullptr_t>(value); }
  bool is_bool() const { return std::holds_alternative<bool>(value); }
  bool is_number() const { return std::holds_alternative<json_number_text>(value); }
  bool is_string() const { return std::holds_alternative<std::string>(value); }
  bool is_array() const { return std::holds_alternative<json_array>(value); }
  bool is_object() const { return std::holds_alternative<json_object_map>(value); }
  bool boolean() const { return std::get<bool>(value); }
  double number() const { return std::get<json_number_text>(value).value; }
  const std::string& number_text() const { return std::get<json_number_text>(value).text; }
  const std::string& string() const { return std::get<std::string>(value); }
  const json_array& array() const { return std::get<json_array>(value); }
  const json_object_map& object() const { return std::get<json_object_map>(value); }

  // The number exactly, when it is written as a whole number in T's range: "7" and
  // "18446744073709551615" are integers, "7.0" and "7e0" are not.
  template <std::integral T>
  std::optional<T> integer() const {
    if (!is_number()) return std::nullopt;
    const std::string& text = number_text();
    T result{};
    const auto [end, failure] = std::from_chars(text.data(), text.data() + text.size(), result);
    if (failure != std::errc{} || end != text.data() + text.size()) return std::nullopt;
    return result;
  }

  // The member `key` of an object, or nullptr.
  const json_value* find(std::string_view key) const {
    if (!is_object()) return nullptr;
    const auto found = object().find(key);
    return found == object().end() ? nullptr : &found->second;
  }

  // "an object", "a number", ...: what a message says was found.
  std::string_view kind_name() const {
    constexpr std::string_view names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[value.index()];
  }
};

// Text that is not JSON: where reading stopped, and what was expected and found there.
class json_error : public error {
public:
  json_error(std::string_view source, std::size_t position, std::string problem, std::string excerpt)
      : error(std::string(source) + ": invalid JSON at byte " + std::to_string(position) + ": " + problem +
              "; the text there reads \"" + excerpt + "\""),
        position_(position), problem_(std::move(problem)), excerpt_(std::move(excerpt)) {}

  std::size_t position() const noexcept { return position_; }
  const std::string& problem() const noexcept { return problem_; }
  // The text from `position` on, as detail::printable shows it, cut after 40 bytes.
  const std::string& excerpt() const noexcept { return excerpt_; }

private:
  std::size_t position_;
  std::string problem_;
  std::string excerpt_;
};

namespace detail {

// A strict recursive-descent reader: the whole grammar of RFC 8259 and nothing more (no
// comments, trailing commas, NaN or leading zeros), UTF-8 only, no duplicate keys.
class json_reader {
public:
  json_reader(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  json_value document() {
    // RFC 8259 sec. 8.1: JSON text is UTF-8; checked once here, so strings copy bytes as they are.
    if (const auto bad = first_invalid_utf8(text_))
      fail_at(*bad, "not valid UTF-8: the byte " + printable(text_.substr(*bad, 1)) + " starts no character");
    json_value root = value(1);
    skip_whitespace();
    if (at_ != text_.size()) fail("unexpected " + found() + " after the JSON value (only whitespace may follow it)");
    return root;
  }

private:
  bool at(char c) const { return at_ < text_.size() && text_[at_] == c; }
  bool at_digit() const { return at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9'; }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  void skip_whitespace() {
    while (at_ < text_.size() && std::string_view(" \t\n\r").find(text_[at_]) != std::string_view::npos) ++at_;
  }

  // What stands at the current byte, for "expected X, found Y".
  std::string found() const {
    if (at_ >= text_.size()) return "the end of the text";
    std::size_t word = 0; // a bare word such as "nul" or "True" is shown whole
    while (at_ + word < text_.size() && word < 20 &&
           ((text_[at_ + word] | 0x20) >= 'a' && (text_[at_ + word] | 0x20) <= 'z'))
      ++word;
    return "'" + printable(text_.substr(at_, word == 0 ? 1 : word)) + "'";
  }

  // `depth` counts the containers around the value, the value's own included.
  json_value value(std::size_t depth) {
    skip_whitespace();
    const std::size_t start = at_;
    if (at('{') || at('[')) {
      if (depth > json_max_depth)
        fail("objects and arrays nest deeper than " + std::to_string(json_max_depth) + " levels");
      return at('{') ? object(depth) : array(depth);
    }
    if (at('"')) return {string(), start};
    if (at('-') || at_digit()) return {number(), start};
    if (literal("true")) return {true, start};
    if (literal("false")) return {false, start};
    if (literal("null")) return {nullptr, start};
    fail("expected a value (object, array, string, number, true, false or null), found " + found());
  }

  json_value object(std::size_t depth) {
    json_value object{json_object_map{}, at_};
    auto& members = std::get<json_object_map>(object.value);
    ++at_; // '{'
    skip_whitespace();
    if (at('}')) {
      ++at_;
      return object;
    }
    while (true) {
      skip_whitespace();
      if (!at('"'))
        fail("expected a string key, found " + found() + (at('}') ? " (a trailing comma is not JSON)" : ""));
      const std::size_t key_position = at_;
      auto [member, inserted] = members.try_emplace(string());
      // RFC 8259 leaves a repeated name's meaning to the reader; kvlab refuses it rather than guess.
      if (!inserted) fail_at(key_position, "duplicate key \"" + printable(member->first) + "\"");
      skip_whitespace();
      if (!at(':')) fail("expected ':' after the key \"" + printable(member->first) + "\", found " + found());
      ++at_;
      member->second = value(depth + 1);
      skip_whitespace();
      if (at(',')) {
        ++at_;
      } else if (at('}')) {
        ++at_;
        return object;
      } else {
        fail("expected ',' or '}' after a member of an object, found " + found());
      }
    }
  }

  json_value array(std::size_t depth) {
    json_value array{json_array{}, at_};
    auto& elements = std::get<json_array>(array.value);
    ++at_; // '['
    skip_whitespace();
    if (at(']')) {
      ++at_;
      return array;
    }
    while (true) {
      skip_whitespace();
      if (at(']')) fail("expected a value, found ']' (a trailing comma is not JSON)");
      elements.push_back(value(depth + 1));
      skip_whitespace();
      if (at(',')) {
        ++at_;
      } else if (at(']')) {
        ++at_;
        return array;
      } else {
        fail("expected ',' or ']' after an element of an array, found " + found());
      }
    }
  }

  std::string string() {
    const std::size_t start = at_;
    ++at_; // the opening '"'
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fail_at(start, "unterminated string");
      const auto c = static_cast<unsigned char>(text_[at_]);
      if (c == '"') {
        ++at_;
        return out;
      }
      if (c < 0x20) fail("control character " + printable(text_.substr(at_, 1)) + " in a string must be escaped");
      if (c != '\\') {
        out += static_cast<char>(c);
        ++at_;
        continue;
      }
      if (at_ + 1 >= text_.size()) fail_at(start, "unterminated string");
      const std::size_t escape_position = at_;
      const char escaped = text_[at_ + 1];
      at_ += 2;
      switch (escaped) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': append_utf8(out, unicode_escape(escape_position)); break;
      default:
        fail_at(escape_position, "invalid escape '\\" + printable(std::string_view(&escaped, 1)) +
                                     "' (JSON allows \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
      }
    }
  }

  std::uint32_t hex4(std::size_t escape_position) {
    if (text_.size() - at_ < 4) fail_at(escape_position, "\\u must be followed by 4 hexadecimal digits");
    std::uint32_t code = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const int digit = hex_digit_value(text_[at_ + i]);
      if (digit < 0) fail_at(escape_position, "\\u must be followed by 4 hexadecimal digits");
      code = code << 4 | static_cast<std::uint32_t>(digit);
    }
    at_ += 4;
    return code;
  }

  // The code point of \uXXXX, or of a UTF-16 surrogate pair \uD83D\uDE00; a lone surrogate is
  // no character and cannot be written as UTF-8.
  std::uint32_t unicode_escape(std::size_t escape_position) {
    const std::uint32_t code = hex4(escape_position);
    const std::string escape = "\\u" + printable(text_.substr(escape_position + 2, 4));
    if (code >= 0xdc00 && code <= 0xdfff)
      fail_at(escape_position, escape + " is a low surrogate without a high surrogate before it");
    if (code < 0xd800 || code > 0xdbff) return code;
    const std::string unpaired = escape + " is a high surrogate not followed by a low surrogate \\uDC00..\\uDFFF";
    if (text_.substr(at_, 2) != "\\u") fail_at(escape_position, unpaired);
    at_ += 2;
    const std::uint32_t low = hex4(escape_position);
    if (low < 0xdc00 || low > 0xdfff) fail_at(escape_position, unpaired);
    return 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, held by a double: 1e999 is an error, not infinity.
  json_number_text number() {
    const std::size_t start = at_;
    const auto digits = [&](std::string_view after) {
      if (!at_digit()) fail("expected a digit after " + std::string(after) + ", found " + found());
      while (at_digit()) ++at_;
    };
    if (at('-')) ++at_;
    if (at('0')) {
      ++at_;
      if (at_digit()) fail_at(start, "leading zeros are not allowed in JSON numbers");
    } else {
      digits("'-'");
    }
    if (at('.')) {
      ++at_;
      digits("the decimal point");
    }
    if (at('e') || at('E')) {
      ++at_;
      if (at('+') || at('-')) ++at_;
      digits("the exponent's 'e'");
    }
    json_number_text number{std::string(text_.substr(start, at_ - start))};
    const auto [end, failure] =
        std::from_chars(number.text.data(), number.text.data() + number.text.size(), number.value);
    if (failure != std::errc{} || end != number.text.data() + number.text.size())
      fail_at(start, "the number " + number.text +
                         " does not fit in a double (its magnitude must be 0 or from 4.9e-324 to 1.8e308)");
    return number;
  }

  [[noreturn]] void fail(const std::string& problem) const { fail_at(at_, problem); }
  [[noreturn]] void fail_at(std::size_t position, const std::string& problem) const {
    throw json_error(what_, position, problem, printable(text_.substr(std::min(position, text_.size())), 40));
  }

  std::string_view text_;
  std::string_view what_;
  std::size_t at_ = 0;
};

} // namespace detail

// Reads `text` as one JSON value; a json_error names `what` (a file, say), the byte where
// reading stopped and what was expected there.
inline json_value parse_json(std::string_view text, std::string_view what) {
  return detail::json_reader(text, what).document();
}

} // namespace kvlab
