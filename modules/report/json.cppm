// A small JSON reader (RFC 8259): what kvlab reads back from its own result files and from
// file headers. Values are a tree of null, bool, number (double), string, array, object.
module;
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>
export module kvlab.report:json;
import kvlab.core;

export namespace kvlab {

struct json_value;
using json_array = std::vector<json_value>;
using json_object_map = std::map<std::string, json_value, std::less<>>;

struct json_value {
  std::variant<std::nullptr_t, bool, double, std::string, json_array, json_object_map> value;

  bool is_object() const { return std::holds_alternative<json_object_map>(value); }
  bool is_array() const { return std::holds_alternative<json_array>(value); }
  bool is_number() const { return std::holds_alternative<double>(value); }
  bool is_string() const { return std::holds_alternative<std::string>(value); }
  const json_object_map& object() const { return std::get<json_object_map>(value); }
  const json_array& array() const { return std::get<json_array>(value); }
  double number() const { return std::get<double>(value); }
  const std::string& string() const { return std::get<std::string>(value); }
  // The member `key` of an object, or nullptr.
  const json_value* find(std::string_view key) const {
    if (!is_object()) return nullptr;
    const auto found = object().find(key);
    return found == object().end() ? nullptr : &found->second;
  }
};

namespace detail {

class json_parser {
public:
  json_parser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  json_value document() {
    json_value v = value(0);
    skip_blanks();
    if (at_ < text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw error(std::string(what_) + ": invalid JSON at byte " + std::to_string(at_) + ": " + problem);
  }
  void skip_blanks() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }
  char peek() {
    skip_blanks();
    if (at_ >= text_.size()) fail("unexpected end");
    return text_[at_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  bool literal(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  json_value value(int depth) {
    if (depth > 64) fail("nested too deeply");
    const char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return {string()};
    if (literal("null")) return {nullptr};
    if (literal("true")) return {true};
    if (literal("false")) return {false};
    return {number()};
  }
  json_value object(int depth) {
    expect('{');
    json_object_map members;
    if (peek() == '}') {
      ++at_;
      return {std::move(members)};
    }
    while (true) {
      if (peek() != '"') fail("expected a member name");
      std::string key = string();
      expect(':');
      if (!members.emplace(key, value(depth + 1)).second) fail("member '" + key + "' appears twice");
      if (peek() == '}') {
        ++at_;
        return {std::move(members)};
      }
      expect(',');
    }
  }
  json_value array(int depth) {
    expect('[');
    json_array items;
    if (peek() == ']') {
      ++at_;
      return {std::move(items)};
    }
    while (true) {
      items.push_back(value(depth + 1));
      if (peek() == ']') {
        ++at_;
        return {std::move(items)};
      }
      expect(',');
    }
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fail("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= text_.size()) fail("unterminated escape");
      const char e = text_[at_++];
      switch (e) {
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      case '/': out += '/'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': append_utf8(out, code_point()); break;
      default: fail(std::string("unknown escape \\") + e);
      }
    }
  }
  // A \u escape's code point; a surrogate pair (\uD83D\uDE00) is one code point, and a lone
  // surrogate is not text.
  unsigned code_point() {
    const unsigned first = hex4();
    if (first >= 0xdc00 && first <= 0xdfff) fail("lone low surrogate in \\u escape");
    if (first < 0xd800 || first > 0xdbff) return first;
    if (text_.substr(at_, 2) != "\\u") fail("high surrogate without its low half");
    at_ += 2;
    const unsigned second = hex4();
    if (second < 0xdc00 || second > 0xdfff) fail("high surrogate without its low half");
    return 0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00);
  }
  unsigned hex4() {
    if (at_ + 4 > text_.size()) fail("short \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const int digit = hex_digit_value(text_[at_++]);
      if (digit < 0) fail("bad hex digit in \\u escape");
      code = code << 4 | static_cast<unsigned>(digit);
    }
    return code;
  }
  double number() {
    const std::size_t start = at_;
    while (at_ < text_.size() && std::string_view("+-0123456789.eE").find(text_[at_]) != std::string_view::npos) ++at_;
    if (at_ == start) fail("expected a value");
    return parse_number<double>(text_.substr(start, at_ - start),
                                std::string(what_) + ", number at byte " + std::to_string(start));
  }

  std::string_view text_;
  std::string_view what_;
  std::size_t at_ = 0;
};

} // namespace detail

// Parses `text`; errors name `what` (a file, say) and the byte where parsing failed.
inline json_value parse_json(std::string_view text, std::string_view what) {
  return detail::json_parser(text, what).document();
}

} // namespace kvlab
