// Sections of `ipj quantize`, `ipj prune` and `ipj distill`: accuracy before and after, and what shrank.
#include "kinds.hpp"
#include "text_format.hpp"

namespace ipj::report {
namespace {

// Two bars per chart: before and after.
Chart before_after(const std::string& title, const std::string& before, const std::string& after,
                   double before_value, double after_value, Axis y, int color) {
  Chart chart;
  chart.title = title;
  chart.kind = ChartKind::bar;
  chart.x.categories = {before, after};
  chart.y = std::move(y);
  chart.y.include_zero = true;
  chart.series.push_back({title, {{0, before_value}, {1, after_value}}, {}, false, color});
  return chart;
}

Axis plain_axis(const std::string& label, const std::string& unit) {
  Axis axis;
  axis.label = label;
  axis.unit = unit;
  return axis;
}

}  // namespace

Section build_quantize_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const std::string mode = fields.optional_text(json, "mode", "?");
  const std::string model =
      fields.optional_text(json, "model_name", fields.optional_text(json, "model", "?"));
  section.title = "Quantization: " + model + ", int8 " + mode;
  section.facts.emplace_back("model", fields.optional_text(json, "model", "?"));
  section.facts.emplace_back("mode", mode);
  section.facts.emplace_back("engine", fields.optional_text(json, "engine", "?"));
  if (const auto samples = fields.optional_number(json, "test_samples"))
    section.facts.emplace_back("test samples", significant(*samples, 6));
  const double fp32_acc = fields.number(json, "fp32_acc");
  const double int8_acc = fields.number(json, "int8_acc");
  const double drop = fields.optional_number(json, "acc_drop_pt").value_or((fp32_acc - int8_acc) * 100.0);
  const double fp32_bytes = fields.number(json, "fp32_bytes");
  const double int8_bytes = fields.number(json, "int8_bytes");
  if (const auto accepted = fields.optional_flag(json, "accepted"); accepted && !*accepted)
    section.notes.push_back("refused: the accuracy drop exceeded --max-drop, so no int8 file was written");
  section.metrics.push_back(make_metric("int8_acc", "int8 test accuracy", "", int8_acc,
                                        Direction::higher_is_better, MetricCategory::accuracy, true));
  section.metrics.push_back(make_metric("acc_drop_pt", "accuracy drop", "pt", drop,
                                        Direction::lower_is_better, MetricCategory::accuracy));
  section.metrics.push_back(make_metric("int8_bytes", "int8 weights", "bytes", int8_bytes,
                                        Direction::lower_is_better, MetricCategory::size));
  Axis accuracy = accuracy_axis("test accuracy");
  section.charts.push_back(before_after("Test accuracy", "fp32", "int8", fp32_acc, int8_acc, accuracy, 0));
  section.charts.push_back(before_after("Weights", "fp32", "int8", fp32_bytes / 1024.0, int8_bytes / 1024.0,
                                        plain_axis("size", "KiB"), 1));
  Table table;
  table.title = "fp32 vs int8";
  table.header = {"", "fp32", "int8"};
  table.rows.push_back({"test accuracy", fixed(fp32_acc, 4), fixed(int8_acc, 4)});
  table.rows.push_back({"weights (KiB)", fixed(fp32_bytes / 1024.0, 1), fixed(int8_bytes / 1024.0, 1)});
  table.rows.push_back({"accuracy drop", "", fixed(drop, 2) + " pt"});
  section.tables.push_back(table);
  return section;
}

Section build_prune_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const std::string method = fields.optional_text(json, "method", "?");
  section.title = "Pruning: " + fields.optional_text(json, "model", "?") + ", " + method;
  section.facts.emplace_back("method", method);
  if (const auto sparsity = fields.optional_number(json, "sparsity"))
    section.facts.emplace_back("sparsity", fixed(*sparsity, 2));
  const double original_acc = fields.number(json, "original_acc");
  const double pruned_acc = fields.number(json, "pruned_acc");
  const double original_params = fields.number(json, "original_params");
  const double pruned_params = fields.number(json, "pruned_params");
  section.metrics.push_back(make_metric("pruned_acc", "pruned test accuracy", "", pruned_acc,
                                        Direction::higher_is_better, MetricCategory::accuracy, true));
  section.metrics.push_back(make_metric("acc_drop_pt", "accuracy drop", "pt",
                                        fields.optional_number(json, "acc_drop_pt").value_or(0.0),
                                        Direction::lower_is_better, MetricCategory::accuracy));
  section.metrics.push_back(make_metric("pruned_params", "parameters after pruning", "", pruned_params,
                                        Direction::lower_is_better, MetricCategory::size));
  Table table;
  table.title = "Original vs pruned";
  table.header = {"", "original", "pruned"};
  table.rows.push_back({"test accuracy", fixed(original_acc, 4), fixed(pruned_acc, 4)});
  table.rows.push_back({"parameters", significant(original_params, 8), significant(pruned_params, 8)});
  const auto original_macs = fields.optional_number(json, "original_macs");
  const auto pruned_macs = fields.optional_number(json, "pruned_macs");
  if (original_macs && pruned_macs) {
    table.rows.push_back({"MACs / sample", significant(*original_macs, 8), significant(*pruned_macs, 8)});
    section.metrics.push_back(make_metric("pruned_macs", "MACs per sample after pruning", "", *pruned_macs,
                                          Direction::lower_is_better, MetricCategory::size));
  }
  section.tables.push_back(table);
  section.charts.push_back(before_after("Test accuracy", "original", "pruned", original_acc, pruned_acc,
                                        accuracy_axis("test accuracy"), 0));
  section.charts.push_back(before_after("Parameters", "original", "pruned", original_params / 1e3,
                                        pruned_params / 1e3, plain_axis("parameters", "thousands"), 1));
  return section;
}

Section build_distill_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const std::string student = fields.optional_text(json, "student", "?");
  section.title = "Distillation: student " + student;
  section.facts.emplace_back("student", student);
  if (const auto temperature = fields.optional_number(json, "temperature"))
    section.facts.emplace_back("temperature", significant(*temperature, 3));
  if (const auto labeled = fields.optional_number(json, "labeled_samples"))
    section.facts.emplace_back("labelled samples", significant(*labeled, 8));
  const double student_acc = fields.number(json, "student_acc");
  const double teacher_acc = fields.number(json, "teacher_acc");
  section.metrics.push_back(make_metric("student_acc", "student test accuracy", "", student_acc,
                                        Direction::higher_is_better, MetricCategory::accuracy, true));
  section.metrics.push_back(make_metric("acc_gap_pt", "gap to the teacher", "pt",
                                        fields.optional_number(json, "acc_gap_pt").value_or(0.0),
                                        Direction::lower_is_better, MetricCategory::accuracy));
  section.charts.push_back(before_after("Test accuracy", "teacher", "student", teacher_acc, student_acc,
                                        accuracy_axis("test accuracy"), 0));
  Table table;
  table.title = "Teacher vs student";
  table.header = {"", "teacher", "student"};
  table.rows.push_back({"test accuracy", fixed(teacher_acc, 4), fixed(student_acc, 4)});
  if (const auto params = fields.optional_number(json, "student_params"))
    table.rows.push_back({"parameters", "-", significant(*params, 8)});
  section.tables.push_back(table);
  return section;
}

}  // namespace ipj::report
