#pragma once
// Typed errors. Bad input raises ConfigError / IoError / UnsupportedError with a
// message that is already the whole user-facing line ("file:line: key: what");
// the CLI prints it and exits with status 2. Broken internal invariants raise
// InternalError through DTSIM_ASSERT.

#include <stdexcept>
#include <string>

namespace dtsim {

/// Base of every error dtsim raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A configuration file, option or value is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};
/// A file cannot be read or written.
class IoError : public Error {
 public:
  using Error::Error;
};
/// The request is valid but not supported (yet).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};
/// A calibration profile is missing, corrupt or incompatible.
class CalibrationError : public Error {
 public:
  using Error::Error;
};
/// An internal invariant was broken: a bug in dtsim, never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void assertion_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace dtsim

/// Checks an internal invariant; throws dtsim::InternalError with file:line.
#define DTSIM_ASSERT(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) ::dtsim::assertion_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
