// A JSON cursor over a byte range for request bodies from the network: every value it skips or reads is
// validated against RFC 8259 with an explicit depth limit (no unbounded recursion) and a size limit, so a
// hostile body costs time proportional to its length and memory proportional to what the caller keeps.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ipj::serve {

class JsonCursor {
 public:
  JsonCursor(const char* begin, const char* end) : begin_(begin), at_(begin), end_(end) {}

  // The next non-space character, or '\0' at the end of the range.
  char peek() {
    skip_space();
    return at_ < end_ ? *at_ : '\0';
  }
  // Consumes `expected` after optional whitespace; false (nothing consumed) when another character follows.
  bool consume(char expected) {
    if (peek() != expected || at_ >= end_) return false;
    ++at_;
    return true;
  }
  // Consumes `expected` or throws naming `context`.
  void expect(char expected, const char* context);
  // Reads a string (decoding escapes to UTF-8) of at most `max_bytes` decoded bytes.
  std::string read_string(std::size_t max_bytes, const char* context);
  // Validates one value of any kind, nested at most `max_depth` levels and at most `max_bytes` long, and
  // returns its text (for a JSON library to parse: the checks make that parse bounded).
  std::string_view skip_value(int max_depth, std::size_t max_bytes, const char* context);
  // The extent [begin, end) of the JSON number at the cursor (grammar-checked), the cursor moved past it.
  std::string_view read_number_text(const char* context);
  // The JSON number at the cursor as FP32, correctly rounded (an exact fast path for short decimals, else
  // std::from_chars); numbers beyond FP32's range are refused, underflows round to a subnormal or zero.
  float read_float(const char* context);
  // Throws unless only whitespace is left.
  void expect_end();
  // Byte offset of the cursor in the body, for error messages.
  std::size_t offset() const { return static_cast<std::size_t>(at_ - begin_); }
  [[noreturn]] void fail_here(const std::string& message) const;

 private:
  void skip_space() {
    while (at_ < end_ && (*at_ == ' ' || *at_ == '\n' || *at_ == '\r' || *at_ == '\t'))
      ++at_;
  }
  void skip_string(const char* context);
  void scan_string(std::string* out, std::size_t max_bytes, const char* context);
  void skip_literal(const char* literal, const char* context);
  void skip_nested(int depth_left, const char* context);

  const char* begin_;
  const char* at_;
  const char* end_;
};

}  // namespace ipj::serve
