// Aligned text table rendering.
#include "ipj/core/text_table.hpp"

#include <algorithm>
#include <sstream>

namespace ipj {

std::string TextTable::render() const {
  std::vector<size_t> widths(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t column = 0; column < row.size() && column < widths.size(); ++column)
      widths[column] = std::max(widths[column], row[column].size());
  };
  widen(header_);
  for (const auto& row : rows_)
    widen(row);

  std::ostringstream out;
  auto emit = [&](const std::vector<std::string>& row) {
    for (size_t column = 0; column < widths.size(); ++column) {
      const std::string cell = column < row.size() ? row[column] : "";
      const std::string padding(widths[column] - cell.size(), ' ');
      if (column > 0) out << "  ";
      const bool left = std::find(left_aligned_.begin(), left_aligned_.end(), column) != left_aligned_.end();
      out << (left ? cell + padding : padding + cell);
    }
    out << '\n';
  };
  emit(header_);
  size_t rule = 0;
  for (size_t width : widths)
    rule += width;
  out << std::string(rule + 2 * (widths.empty() ? 0 : widths.size() - 1), '-') << '\n';
  for (const auto& row : rows_)
    emit(row);
  return out.str();
}

}  // namespace ipj
