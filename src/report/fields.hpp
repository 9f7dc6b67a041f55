// Checked reads of a results file's JSON for the kind builders: every missing or mistyped key becomes an
// Error(invalid_input) that names the file and the key, never a JSON exception (which would exit 70).
// Private to src/report.
#pragma once

#include <optional>
#include <string>

#include "ipj/core/json_io.hpp"

namespace ipj::report {

class Fields {
 public:
  // `path`: the file named in errors; `kind`: what it claims to be ("train", ...).
  Fields(std::string path, std::string kind) : path_(std::move(path)), kind_(std::move(kind)) {}

  // Required values; `where` is the JSON path of `parent` for messages ("" = top level, "rows[2]").
  const Json& object(const Json& parent, const std::string& key, const std::string& where = "") const;
  const Json& array(const Json& parent, const std::string& key, const std::string& where = "") const;
  double number(const Json& parent, const std::string& key, const std::string& where = "") const;
  std::string text(const Json& parent, const std::string& key, const std::string& where = "") const;

  // Optional values: absent or null gives nullopt / the fallback; present with another type is an error.
  std::optional<double> optional_number(const Json& parent, const std::string& key,
                                        const std::string& where = "") const;
  std::string optional_text(const Json& parent, const std::string& key, const std::string& fallback = "",
                            const std::string& where = "") const;
  std::optional<bool> optional_flag(const Json& parent, const std::string& key,
                                    const std::string& where = "") const;
  // Present and an object (null or absent: nullptr).
  const Json* optional_object(const Json& parent, const std::string& key,
                              const std::string& where = "") const;
  const Json* optional_array(const Json& parent, const std::string& key, const std::string& where = "") const;

  // Throws Error(invalid_input): "'PATH' (KIND results): WHERE.KEY WHAT".
  [[noreturn]] void fail_at(const std::string& where, const std::string& key, const std::string& what) const;

  const std::string& path() const { return path_; }

 private:
  const Json* find(const Json& parent, const std::string& key, const std::string& where) const;

  std::string path_;
  std::string kind_;
};

// "rows[3]" style JSON paths for messages.
std::string indexed(const std::string& where, const std::string& key, std::size_t index);

}  // namespace ipj::report
