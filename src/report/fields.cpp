// Checked JSON reads with messages that name the file and the key.
#include "fields.hpp"

#include <cmath>

#include "ipj/core/error.hpp"

namespace ipj::report {
namespace {

const char* type_name(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

std::string joined(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

}  // namespace

std::string indexed(const std::string& where, const std::string& key, std::size_t index) {
  return joined(where, key) + "[" + std::to_string(index) + "]";
}

void Fields::fail_at(const std::string& where, const std::string& key, const std::string& what) const {
  fail(ErrorCategory::invalid_input, "'" + path_ + "' (" + kind_ + " results): " + joined(where, key) + " " +
                                         what + "; is it a complete file written by ipj " + kind_ +
                                         " --json?");
}

const Json* Fields::find(const Json& parent, const std::string& key, const std::string& where) const {
  if (!parent.is_object()) fail_at(where, "", std::string("must be an object, found ") + type_name(parent));
  const auto found = parent.find(key);
  if (found == parent.end() || found->is_null()) return nullptr;
  return &*found;
}

const Json& Fields::object(const Json& parent, const std::string& key, const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) fail_at(where, key, "is missing");
  if (!value->is_object()) fail_at(where, key, std::string("must be an object, found ") + type_name(*value));
  return *value;
}

const Json& Fields::array(const Json& parent, const std::string& key, const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) fail_at(where, key, "is missing");
  if (!value->is_array()) fail_at(where, key, std::string("must be an array, found ") + type_name(*value));
  return *value;
}

double Fields::number(const Json& parent, const std::string& key, const std::string& where) const {
  const std::optional<double> value = optional_number(parent, key, where);
  if (!value) fail_at(where, key, "is missing (a number is needed)");
  return *value;
}

std::string Fields::text(const Json& parent, const std::string& key, const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) fail_at(where, key, "is missing (a string is needed)");
  if (!value->is_string()) fail_at(where, key, std::string("must be a string, found ") + type_name(*value));
  return value->get<std::string>();
}

std::optional<double> Fields::optional_number(const Json& parent, const std::string& key,
                                              const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) return std::nullopt;
  if (!value->is_number()) fail_at(where, key, std::string("must be a number, found ") + type_name(*value));
  const double number = value->get<double>();
  if (!std::isfinite(number)) fail_at(where, key, "must be a finite number");
  return number;
}

std::string Fields::optional_text(const Json& parent, const std::string& key, const std::string& fallback,
                                  const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) return fallback;
  if (!value->is_string()) fail_at(where, key, std::string("must be a string, found ") + type_name(*value));
  return value->get<std::string>();
}

std::optional<bool> Fields::optional_flag(const Json& parent, const std::string& key,
                                          const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (!value) return std::nullopt;
  if (!value->is_boolean())
    fail_at(where, key, std::string("must be true or false, found ") + type_name(*value));
  return value->get<bool>();
}

const Json* Fields::optional_object(const Json& parent, const std::string& key,
                                    const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (value && !value->is_object())
    fail_at(where, key, std::string("must be an object, found ") + type_name(*value));
  return value;
}

const Json* Fields::optional_array(const Json& parent, const std::string& key,
                                   const std::string& where) const {
  const Json* value = find(parent, key, where);
  if (value && !value->is_array())
    fail_at(where, key, std::string("must be an array, found ") + type_name(*value));
  return value;
}

}  // namespace ipj::report
