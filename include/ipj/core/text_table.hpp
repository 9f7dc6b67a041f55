// A plain aligned text table for human output of CLI commands (first column left-aligned, others right unless
// marked with align_left).
#pragma once

#include <string>
#include <vector>

namespace ipj {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Text columns (names, descriptions) read better left-aligned; numbers stay right-aligned.
  void align_left(size_t column) { left_aligned_.push_back(column); }
  // Renders with two spaces between columns and a dashed rule under the header.
  std::string render() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> left_aligned_{0};
};

}  // namespace ipj
