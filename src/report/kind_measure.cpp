// Section of `ipj measure --json`: the energy of one command, per device, with source and estimate model.
#include "kinds.hpp"
#include "text_format.hpp"

namespace ipj::report {

Section build_measure_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  std::string command;
  if (const Json* words = fields.optional_array(json, "command"))
    for (std::size_t index = 0; index < words->size(); ++index) {
      if (!(*words)[index].is_string()) fields.fail_at("", indexed("", "command", index), "must be a string");
      command += (command.empty() ? "" : " ") + (*words)[index].get<std::string>();
    }
  section.title = "Measured command: " + (command.empty() ? std::string("?") : command);
  section.facts.emplace_back("command", command);
  if (const auto exit_code = fields.optional_number(json, "exit_code"))
    section.facts.emplace_back("exit status", significant(*exit_code, 4));
  const double wall_s = fields.number(json, "wall_s");
  const double energy_j = fields.number(json, "energy_j");
  section.facts.emplace_back("wall time", significant(wall_s, 4) + " s");
  if (const auto kwh = fields.optional_number(json, "kwh"))
    section.facts.emplace_back("kWh", significant(*kwh, 4));
  if (const auto co2 = fields.optional_number(json, "co2_g"))
    section.facts.emplace_back("CO2", significant(*co2, 4) + " g");
  if (const auto cost = fields.optional_number(json, "cost_usd"))
    section.facts.emplace_back("cost", "$" + significant(*cost, 4));

  const EnergyProvenance provenance = measurement_provenance(fields, json, "", std::nullopt);
  Metric energy = make_metric("energy_j", "energy", "J", energy_j, Direction::lower_is_better,
                              MetricCategory::energy, true);
  energy.energy = provenance;
  section.metrics.push_back(energy);
  section.metrics.push_back(make_metric("wall_s", "wall time", "s", wall_s, Direction::lower_is_better,
                                        MetricCategory::time, true));
  if (const auto average = fields.optional_number(json, "average_w"))
    section.metrics.push_back(make_metric("average_w", "average power", "W", *average,
                                          Direction::lower_is_better, MetricCategory::energy));
  section.energy.push_back({"total", energy_j, "J", provenance});
  add_device_figures(fields, json, "", "", section);

  Chart devices;
  devices.title = "Energy per device";
  devices.kind = ChartKind::bar;
  devices.x.label = "device";
  devices.y.label = "energy";
  devices.y.unit = "J";
  devices.y.include_zero = true;
  devices.caption = "source: " + provenance.source;
  Chart power;
  power.title = "Power per device";
  power.kind = ChartKind::bar;
  power.x.label = "device";
  power.y.label = "power";
  power.y.unit = "W";
  power.y.include_zero = true;
  Series joules{"energy", {}, {}, false, 0}, average{"average W", {}, {}, false, 1},
      peak{"peak W", {}, {}, false, 2};
  Table table;
  table.title = "Devices";
  table.header = {"device", "kind", "energy J", "avg W", "peak W", "source", "in total"};
  const Json& device_list = fields.array(json, "devices");
  for (std::size_t index = 0; index < device_list.size(); ++index) {
    const std::string at = indexed("", "devices", index);
    const Json& device = device_list[index];
    const std::string name = fields.text(device, "name", at);
    const double joules_value = fields.number(device, "energy_j", at);
    const double average_w = fields.optional_number(device, "average_w", at).value_or(0.0);
    const double peak_w = fields.optional_number(device, "peak_w", at).value_or(0.0);
    const double x = static_cast<double>(index);
    devices.x.categories.push_back(name);
    power.x.categories.push_back(name);
    joules.points.emplace_back(x, joules_value);
    average.points.emplace_back(x, average_w);
    peak.points.emplace_back(x, peak_w);
    table.rows.push_back({name, fields.optional_text(device, "kind", "?", at), significant(joules_value, 4),
                          significant(average_w, 4), significant(peak_w, 4),
                          fields.optional_text(device, "source", "?", at),
                          fields.optional_flag(device, "in_total", at).value_or(true) ? "yes" : "no"});
  }
  devices.series.push_back(joules);
  power.series = {average, peak};
  section.charts = {devices, power};
  section.tables.push_back(table);
  if (const Json* meters = fields.optional_array(json, "meters")) {
    Table meter_table;
    meter_table.title = "Meters";
    meter_table.header = {"meter", "available", "reason"};
    for (std::size_t index = 0; index < meters->size(); ++index) {
      const std::string at = indexed("", "meters", index);
      meter_table.rows.push_back(
          {fields.optional_text((*meters)[index], "name", "?", at),
           fields.optional_flag((*meters)[index], "available", at).value_or(false) ? "yes" : "no",
           fields.optional_text((*meters)[index], "reason", "", at)});
    }
    section.tables.push_back(meter_table);
  }
  return section;
}

}  // namespace ipj::report
