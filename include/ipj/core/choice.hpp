// Named choices: an enum with one spelling per value, parsed once where text enters (CLI flags, JSON files)
// and spelt back the same way. An enum takes part by specialising ChoiceNames<Enum> with a `names` array of
// {value, spelling} pairs. Header-only and LibTorch-free.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "ipj/core/error.hpp"

namespace ipj {

// Specialise for each choice enum:
//   template <> struct ChoiceNames<Colour> {
//     static constexpr std::array<std::pair<Colour, const char*>, 2> names{{{Colour::red, "red"}, ...}};
//   };
template <typename Enum>
struct ChoiceNames;

// "a, b or c": the spellings of every value, for help and error messages.
template <typename Enum>
std::string choice_list() {
  const auto& names = ChoiceNames<Enum>::names;
  std::string list;
  for (std::size_t index = 0; index < names.size(); ++index) {
    if (index > 0) list += index + 1 == names.size() ? " or " : ", ";
    list += names[index].second;
  }
  return list;
}

// The spelling of `value` (what flags take and JSON files hold).
template <typename Enum>
std::string choice_name(Enum value) {
  for (const auto& [candidate, name] : ChoiceNames<Enum>::names)
    if (candidate == value) return name;
  fail(ErrorCategory::internal, "a choice value without a name");
}

// Parses a spelling. `setting` names where the text came from, e.g. "precision" in the library or
// "--precision" at the CLI: throws ipj::Error(usage) "<setting> must be a, b or c, got '<text>'".
template <typename Enum>
Enum parse_choice(const std::string& text, const std::string& setting) {
  for (const auto& [value, name] : ChoiceNames<Enum>::names)
    if (text == name) return value;
  fail(ErrorCategory::usage, setting + " must be " + choice_list<Enum>() + ", got '" + text + "'");
}

}  // namespace ipj
