// Errors as values: Status (ok or a one-line message) and Result<T> (a value or a Status).
// Add context with .with_context("file.gguf") as the error travels up; never abort on bad input.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace hearth {

class Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened: "model.gguf: tensor count 9e18 exceeds ...".
  // (A message that already names `where` first, as a GGUF getter's names its file, keeps it once.)
  Status with_context(const std::string& where) const {
    if (!failed_) return *this;
    if (message_.size() > where.size() + 1 && message_.compare(0, where.size(), where) == 0 &&
        message_.compare(where.size(), 2, ": ") == 0)
      return *this;
    return error(where + ": " + message_);
  }

 private:
  bool failed_ = false;
  std::string message_;
};

template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }
  const std::string& message() const {
    static const std::string empty;
    return is_ok() ? empty : std::get<1>(v_).message();
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hearth

#define HEARTH_CONCAT_INNER(a, b) a##b
#define HEARTH_CONCAT(a, b) HEARTH_CONCAT_INNER(a, b)

// HEARTH_TRY(status_expr): return the Status from the enclosing function if it failed.
#define HEARTH_TRY(expr)                                        \
  do {                                                          \
    ::hearth::Status hearth_try_status_ = (expr);               \
    if (!hearth_try_status_.is_ok()) return hearth_try_status_; \
  } while (0)

// HEARTH_ASSIGN_OR_RETURN(auto x, result_expr): unwrap a Result or return its Status.
#define HEARTH_ASSIGN_OR_RETURN(lhs, expr) \
  HEARTH_ASSIGN_OR_RETURN_IMPL(HEARTH_CONCAT(hearth_result_, __LINE__), lhs, expr)
#define HEARTH_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
