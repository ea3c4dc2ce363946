// Integer and number ranges as GBNF (json-schema-parts.h). A decimal range [a, b] of the same
// digit count splits on its first digit: a's first digit with the rest of a's range, the whole
// digits strictly between, and b's first digit with the rest of b's range.
#include <cmath>

#include "grammar/json-schema-parts.h"

namespace hearth::schema {
namespace {

constexpr int64_t kIntegerCap = 999999999999999;  // 15 digits: exact in a double
constexpr int64_t kWholeCap = 999999999;  // decimals: 9 whole digits + 6 fraction digits stay
                                          // below the next integer after double rounding
constexpr const char* kFraction = "\".\" [0-9]{1,6}";

std::string digits_any(size_t n) {
  if (n == 0) return "";
  return n == 1 ? "[0-9]" : "[0-9]{" + std::to_string(n) + "}";
}

std::string join_alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string concat(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

// Strings of equal length, lo <= hi.
std::string same_length(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "";
  if (lo == hi) return "\"" + lo + "\"";
  if (lo[0] == hi[0])
    return concat("\"" + lo.substr(0, 1) + "\"", same_length(lo.substr(1), hi.substr(1)));
  const bool lo_rest_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_rest_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  std::vector<std::string> alts;
  char first = lo[0], last = hi[0];
  if (!lo_rest_zero) {
    alts.push_back(
        concat("\"" + lo.substr(0, 1) + "\"", same_length(lo.substr(1), std::string(n - 1, '9'))));
    ++first;
  }
  if (!hi_rest_nine) --last;
  if (first <= last) {
    const std::string head = first == last ? "\"" + std::string(1, first) + "\""
                                           : std::string("[") + first + "-" + last + "]";
    alts.push_back(concat(head, digits_any(n - 1)));
  }
  if (!hi_rest_nine)
    alts.push_back(
        concat("\"" + hi.substr(0, 1) + "\"", same_length(std::string(n - 1, '0'), hi.substr(1))));
  return join_alternatives(alts);
}

// 0 <= a <= b: their decimal forms without leading zeros.
std::string non_negative(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  const size_t la = std::to_string(a).size(), lb = std::to_string(b).size();
  int64_t pow = 1;
  for (size_t i = 1; i < la; ++i) pow *= 10;
  for (size_t len = la; len <= lb; ++len, pow *= 10) {
    const int64_t lo = len == la ? a : pow, hi = len == lb ? b : pow * 10 - 1;
    alts.push_back(same_length(std::to_string(lo), std::to_string(hi)));
  }
  return join_alternatives(alts);
}

// All integers in [lo, hi] (lo <= hi), negatives with a '-'.
std::string integers(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) alts.push_back("\"-\" " + non_negative(-std::min<int64_t>(hi, -1), -lo));
  if (hi >= 0) alts.push_back(non_negative(std::max<int64_t>(lo, 0), hi));
  return join_alternatives(alts);
}

// The smallest integer allowed by a lower bound / largest by an upper bound, clamped to cap.
int64_t lowest_integer(const std::optional<double>& v, bool exclusive, int64_t cap) {
  if (!v) return -cap;
  if (*v > double(cap)) return cap + 1;
  if (*v < -double(cap)) return -cap;
  double c = std::ceil(*v);
  if (exclusive && c == *v) c += 1;
  return int64_t(c);
}
int64_t highest_integer(const std::optional<double>& v, bool exclusive, int64_t cap) {
  if (!v) return cap;
  if (*v < -double(cap)) return -cap - 1;
  if (*v > double(cap)) return cap;
  double f = std::floor(*v);
  if (exclusive && f == *v) f -= 1;
  return int64_t(f);
}

Status check_finite(const NumericBounds& b) {
  if ((b.min && !std::isfinite(*b.min)) || (b.max && !std::isfinite(*b.max)))
    return Status::error("a numeric bound is not a finite number");
  return Status::ok();
}

}  // namespace

Result<std::string> integer_range(const NumericBounds& b) {
  HEARTH_TRY(check_finite(b));
  const int64_t lo = lowest_integer(b.min, b.min_exclusive, kIntegerCap);
  const int64_t hi = highest_integer(b.max, b.max_exclusive, kIntegerCap);
  if (lo > hi) return Status::error("no integer satisfies minimum/maximum");
  return integers(lo, hi);
}

Result<std::string> number_range(const NumericBounds& b) {
  HEARTH_TRY(check_finite(b));
  std::vector<std::string> alts;
  const int64_t lo = lowest_integer(b.min, b.min_exclusive, kIntegerCap);
  const int64_t hi = highest_integer(b.max, b.max_exclusive, kIntegerCap);
  if (lo <= hi) alts.push_back(integers(lo, hi));
  // w.ddd lies in [w, w + 1): w must meet the lower bound, w + 1 must not pass the upper one.
  const int64_t pos_lo = std::max<int64_t>(0, lowest_integer(b.min, b.min_exclusive, kWholeCap));
  const int64_t pos_hi = b.max ? highest_integer(b.max, false, kWholeCap) - 1 : kWholeCap;
  if (pos_lo <= pos_hi) alts.push_back(non_negative(pos_lo, pos_hi) + " " + kFraction);
  // -w.ddd lies in (-(w + 1), -w]: -w must meet the upper bound, -(w + 1) the lower one.
  const int64_t neg_lo =
      std::max<int64_t>(0, b.max ? -highest_integer(b.max, b.max_exclusive, kWholeCap) : 0);
  const int64_t neg_hi = b.min ? -lowest_integer(b.min, false, kWholeCap) - 1 : kWholeCap;
  if (neg_lo <= neg_hi) alts.push_back("\"-\" " + non_negative(neg_lo, neg_hi) + " " + kFraction);
  if (alts.empty())
    return Status::error(
        "no number satisfies minimum/maximum (bounds closer than 1 apart around no integer are "
        "not supported)");
  return join_alternatives(alts);
}

}  // namespace hearth::schema
