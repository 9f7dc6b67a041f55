// The bounded JSON cursor: RFC 8259 grammar checks, string unescaping, depth- and size-limited skipping.
// Recursion depth is at most the caller's max_depth (small constants), never the body's nesting.
#include "bounded_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include "ipj/core/error.hpp"

namespace ipj::serve {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, unsigned code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

}  // namespace

void JsonCursor::fail_here(const std::string& message) const {
  fail(ErrorCategory::invalid_input,
       "request body is not valid: " + message + " (at byte " + std::to_string(offset()) + ")");
}

void JsonCursor::expect(char expected, const char* context) {
  if (!consume(expected))
    fail_here(std::string("expected '") + expected + "' in " + context +
              (at_ < end_ ? "" : " but the body ended"));
}

void JsonCursor::expect_end() {
  skip_space();
  if (at_ != end_) fail_here("unexpected text after the JSON object");
}

std::string JsonCursor::read_string(std::size_t max_bytes, const char* context) {
  if (peek() != '"') fail_here(std::string(context) + " must be a string");
  std::string out;
  scan_string(&out, max_bytes, context);
  return out;
}

void JsonCursor::skip_string(const char* context) {
  scan_string(nullptr, 0, context);
}

// One string from its opening quote: escapes and UTF-8 checked as RFC 8259 (and nlohmann::json) require;
// decoded into `out` (at most max_bytes) unless out is null.
void JsonCursor::scan_string(std::string* out, std::size_t max_bytes, const char* context) {
  ++at_;  // the opening quote
  auto put = [&](char c) {
    if (!out) return;
    if (out->size() >= max_bytes)
      fail_here(std::string(context) + " is longer than " + std::to_string(max_bytes) + " bytes");
    *out += c;
  };
  while (at_ < end_) {
    const unsigned char c = static_cast<unsigned char>(*at_);
    if (c == '"') {
      ++at_;
      return;
    }
    if (c < 0x20) fail_here(std::string("control character in ") + context);
    if (c >= 0x80) {  // a multi-byte UTF-8 sequence: well-formed, shortest form, no surrogates, <= U+10FFFF
      const int length = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
      if (length == 0 || c > 0xF4 || end_ - at_ < length)
        fail_here(std::string("invalid UTF-8 in ") + context);
      const unsigned char second = static_cast<unsigned char>(at_[1]);
      unsigned low = 0x80, high = 0xBF;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
      if (second < low || second > high) fail_here(std::string("invalid UTF-8 in ") + context);
      for (int index = 2; index < length; ++index)
        if ((static_cast<unsigned char>(at_[index]) & 0xC0) != 0x80)
          fail_here(std::string("invalid UTF-8 in ") + context);
      for (int index = 0; index < length; ++index)
        put(at_[index]);
      at_ += length;
      continue;
    }
    ++at_;
    if (c != '\\') {
      put(static_cast<char>(c));
      continue;
    }
    if (at_ >= end_) break;
    const char escape = *at_++;
    switch (escape) {
      case '"':
        put('"');
        break;
      case '\\':
        put('\\');
        break;
      case '/':
        put('/');
        break;
      case 'b':
        put('\b');
        break;
      case 'f':
        put('\f');
        break;
      case 'n':
        put('\n');
        break;
      case 'r':
        put('\r');
        break;
      case 't':
        put('\t');
        break;
      case 'u': {
        auto read_hex4 = [&]() -> unsigned {
          if (end_ - at_ < 4) fail_here(std::string("truncated \\u escape in ") + context);
          unsigned value = 0;
          for (int digit = 0; digit < 4; ++digit) {
            const int nibble = hex_value(*at_++);
            if (nibble < 0) fail_here(std::string("bad \\u escape in ") + context);
            value = value * 16 + static_cast<unsigned>(nibble);
          }
          return value;
        };
        unsigned code_point = read_hex4();
        if (code_point >= 0xD800 && code_point < 0xDC00) {  // a high surrogate needs its low half
          if (end_ - at_ < 2 || at_[0] != '\\' || at_[1] != 'u')
            fail_here(std::string("unpaired surrogate in ") + context);
          at_ += 2;
          const unsigned low = read_hex4();
          if (low < 0xDC00 || low > 0xDFFF) fail_here(std::string("unpaired surrogate in ") + context);
          code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
        } else if (code_point >= 0xDC00 && code_point <= 0xDFFF) {
          fail_here(std::string("unpaired surrogate in ") + context);
        }
        std::string encoded;
        append_utf8(encoded, code_point);
        for (const char byte : encoded)
          put(byte);
        break;
      }
      default:
        fail_here(std::string("bad escape in ") + context);
    }
  }
  fail_here(std::string("unterminated string in ") + context);
}

std::string_view JsonCursor::read_number_text(const char* context) {
  skip_space();
  const char* start = at_;
  if (at_ < end_ && *at_ == '-') ++at_;
  if (at_ >= end_ || !is_digit(*at_)) fail_here(std::string("expected a number in ") + context);
  if (*at_ == '0') {
    ++at_;
  } else {
    while (at_ < end_ && is_digit(*at_))
      ++at_;
  }
  if (at_ < end_ && *at_ == '.') {
    ++at_;
    if (at_ >= end_ || !is_digit(*at_)) fail_here(std::string("digits must follow '.' in ") + context);
    while (at_ < end_ && is_digit(*at_))
      ++at_;
  }
  if (at_ < end_ && (*at_ == 'e' || *at_ == 'E')) {
    ++at_;
    if (at_ < end_ && (*at_ == '+' || *at_ == '-')) ++at_;
    if (at_ >= end_ || !is_digit(*at_))
      fail_here(std::string("digits must follow the exponent in ") + context);
    while (at_ < end_ && is_digit(*at_))
      ++at_;
  }
  return {start, static_cast<std::size_t>(at_ - start)};
}

float JsonCursor::read_float(const char* context) {
  skip_space();
  const char* const start = at_;
  const char* at = at_;  // a local cursor: the loops below keep it in a register
  const char* const end = end_;
  auto fail_at = [&](const std::string& message) {
    at_ = at;
    fail_here(message);
  };
  const bool negative = at < end && *at == '-';
  if (negative) ++at;
  if (at >= end || !is_digit(*at)) fail_at(std::string("expected a number in ") + context);
  // Clinger's fast path: a mantissa below 2^24 and a power of ten up to 10^10 are exact in FP32, so one FP32
  // multiplication or division rounds correctly. Anything else goes through std::from_chars.
  std::uint64_t mantissa = 0;
  std::int64_t digits = 0, exponent = 0;  // 64 bits: a body of billions of digits cannot overflow them
  if (*at == '0') {
    ++at;
  } else {
    for (; at < end && is_digit(*at); ++at, ++digits)
      if (digits < 19) mantissa = mantissa * 10 + static_cast<std::uint64_t>(*at - '0');
    if (digits > 19) exponent += digits - 19;
  }
  if (at < end && *at == '.') {
    ++at;
    if (at >= end || !is_digit(*at)) fail_at(std::string("digits must follow '.' in ") + context);
    for (; at < end && is_digit(*at); ++at) {
      if (mantissa == 0 && *at == '0') {
        --exponent;  // leading zeros of a fraction do not count as digits
        continue;
      }
      if (digits < 19) {
        mantissa = mantissa * 10 + static_cast<std::uint64_t>(*at - '0');
        --exponent;
      }
      ++digits;
    }
  }
  bool explicit_exponent = false;
  int written_exponent = 0;  // saturated at +-100000: far beyond any double
  if (at < end && (*at == 'e' || *at == 'E')) {
    explicit_exponent = true;
    ++at;
    const bool negative_exponent = at < end && *at == '-';
    if (at < end && (*at == '+' || *at == '-')) ++at;
    if (at >= end || !is_digit(*at)) fail_at(std::string("digits must follow the exponent in ") + context);
    for (; at < end && is_digit(*at); ++at)
      written_exponent = std::min(written_exponent * 10 + (*at - '0'), 100000);
    if (negative_exponent) written_exponent = -written_exponent;
  }
  static constexpr float kPowers[] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f, 1e9f, 1e10f};
  if (!explicit_exponent && digits <= 19 && mantissa < (1u << 24) && exponent >= -10 && exponent <= 10) {
    const float value = static_cast<float>(mantissa);
    const float magnitude = exponent < 0 ? value / kPowers[-exponent] : value * kPowers[exponent];
    at_ = at;
    return negative ? -magnitude : magnitude;
  }
  at_ = at;
  float value = 0.0f;
  const auto result = std::from_chars(start, at, value);
  if (result.ec == std::errc() && result.ptr == at) return value;
  double wide = 0.0;
  const auto retry = std::from_chars(start, at, wide);
  if (retry.ec == std::errc() && std::isfinite(wide) &&
      std::fabs(wide) <= static_cast<double>(std::numeric_limits<float>::max()))
    return static_cast<float>(wide);  // an underflow: rounds to a subnormal or zero
  // Beyond double's range too: the value is about mantissa x 10^(exponent + written_exponent), with mantissa
  // below 10^19; a negative magnitude means a value below 1, i.e. an underflow (e.g. 1e-400): zero.
  const std::int64_t magnitude = std::min<std::int64_t>(digits, 19) + exponent + written_exponent;
  if (retry.ec == std::errc::result_out_of_range && (mantissa == 0 || magnitude < 0))
    return negative ? -0.0f : 0.0f;
  fail_here("input data holds " +
            std::string(start, static_cast<std::size_t>(std::min<std::ptrdiff_t>(at - start, 40))) +
            ", outside the FP32 range (NaN and Inf are refused on every path)");
}

void JsonCursor::skip_literal(const char* literal, const char* context) {
  const std::string_view text(literal);
  if (static_cast<std::size_t>(end_ - at_) < text.size() || std::string_view(at_, text.size()) != text)
    fail_here(std::string("unexpected character in ") + context);
  at_ += text.size();
}

void JsonCursor::skip_nested(int depth_left, const char* context) {
  const char c = peek();
  switch (c) {
    case '"':
      skip_string(context);
      return;
    case 't':
      skip_literal("true", context);
      return;
    case 'f':
      skip_literal("false", context);
      return;
    case 'n':
      skip_literal("null", context);
      return;
    case '{':
    case '[': {
      if (depth_left <= 0) fail_here(std::string(context) + " is nested too deeply");
      ++at_;
      const char close = c == '{' ? '}' : ']';
      if (consume(close)) return;
      for (;;) {
        if (c == '{') {
          if (peek() != '"') fail_here(std::string("expected a key in ") + context);
          skip_string(context);
          expect(':', context);
        }
        skip_nested(depth_left - 1, context);
        if (consume(',')) continue;
        expect(close, context);
        return;
      }
    }
    default:
      if (c == '-' || is_digit(c)) {
        read_number_text(context);
        return;
      }
      fail_here(at_ < end_ ? std::string("unexpected character in ") + context
                           : std::string("the body ended inside ") + context);
  }
}

std::string_view JsonCursor::skip_value(int max_depth, std::size_t max_bytes, const char* context) {
  skip_space();
  const char* start = at_;
  // Scans a window of max_bytes + 1: a longer value is refused after that much work, whatever follows.
  const char* real_end = end_;
  if (static_cast<std::size_t>(end_ - at_) > max_bytes) end_ = at_ + max_bytes + 1;
  const bool windowed = end_ != real_end;
  try {
    skip_nested(max_depth, context);
  } catch (const Error&) {
    end_ = real_end;
    if (windowed && static_cast<std::size_t>(at_ - start) >= max_bytes)
      fail_here(std::string(context) + " is longer than " + std::to_string(max_bytes) + " bytes");
    throw;
  }
  end_ = real_end;
  if (static_cast<std::size_t>(at_ - start) > max_bytes)
    fail_here(std::string(context) + " is longer than " + std::to_string(max_bytes) + " bytes");
  return {start, static_cast<std::size_t>(at_ - start)};
}

}  // namespace ipj::serve
