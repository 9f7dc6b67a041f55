// Assembles the `ipj devices` report and its human rendering.
#include "ipj/device/device_report.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <sstream>

#include "ipj/device/blas_info.hpp"
#include "ipj/device/cpu_info.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/device/torch_info.hpp"

namespace ipj::device {
namespace {

// ATEN_CPU_CAPABILITY as the user set it, when LibTorch took it: the value, in lower case as LibTorch reads
// it, names the level it reports (LibTorch ignores other values with a warning and picks for the CPU).
struct AtenCapabilitySetting {
  Json set_by = nullptr;   // "ATEN_CPU_CAPABILITY=avx2" when LibTorch took it
  Json ignored = nullptr;  // the setting when LibTorch ignored it
};

AtenCapabilitySetting aten_capability_setting(const std::string& kernels) {
  AtenCapabilitySetting setting;
  const char* value = std::getenv("ATEN_CPU_CAPABILITY");
  if (value == nullptr) return setting;
  const std::string text = value, named = "ATEN_CPU_CAPABILITY=" + text;
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  const bool names_level =
      upper == kernels || (text == "default" && (kernels == "NO AVX" || kernels == "DEFAULT"));
  const bool taken = !text.empty() && std::none_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isupper(c);
  }) && names_level;
  (taken ? setting.set_by : setting.ignored) = named;
  return setting;
}

}  // namespace

Json device_report() {
  const CpuInfo cpu = probe_cpu();
  const TorchInfo torch_info = probe_torch();

  Json report;
  Json features = Json::object();
  for (const auto& [name, present] : cpu.features)
    features[name] = present;
  report["cpu"] = {{"model", cpu.model},
                   {"cores", cpu.cores},
                   {"logical_processors", cpu.logical_processors},
                   {"features", features},
                   {"memory_bytes", cpu.memory_bytes},
                   {"onednn_isa_cap", nullptr}};
  if (cpu.onednn_cap)
    report["cpu"]["onednn_isa_cap"] = {{"variable", cpu.onednn_cap->variable},
                                       {"value", cpu.onednn_cap->value},
                                       {"allows_bf16", cpu.onednn_cap->allows_bf16},
                                       {"allows_vnni", cpu.onednn_cap->allows_vnni}};
  const AtenCapabilitySetting aten_setting = aten_capability_setting(torch_info.cpu_kernels);
  report["torch"] = {{"version", torch_info.version},
                     {"onednn", torch_info.onednn},
                     {"openmp", torch_info.openmp},
                     {"mkl", torch_info.mkl},
                     {"intra_op_threads", torch_info.intra_op_threads},
                     {"cpu_kernels", torch_info.cpu_kernels},
                     {"cpu_kernels_set_by", aten_setting.set_by},
                     {"cpu_kernels_ignored_setting", aten_setting.ignored},
                     {"blas_threads", blas_thread_count()},
                     {"quantized_engines", torch_info.quantized_engines},
                     {"cuda_built", torch_info.cuda_built}};
  report["blas"] = to_json(loaded_blas());
  Json cuda = Json::array();
  Json cuda_precisions = Json::object();
  for (const auto& device : torch_info.cuda_devices) {
    cuda.push_back({{"index", device.index},
                    {"name", device.name},
                    {"memory_bytes", device.memory_bytes},
                    {"compute_capability",
                     std::to_string(device.compute_major) + "." + std::to_string(device.compute_minor)},
                    {"bf16", device.bf16_native},
                    {"fp16", device.fp16_native}});
    Json native = Json::array({"fp32"});
    if (device.fp16_native) native.push_back("fp16");
    if (device.bf16_native) native.push_back("bf16");
    cuda_precisions["cuda:" + std::to_string(device.index)] = native;
  }
  report["cuda"] = cuda;
  report["cuda_note"] =
      torch_info.cuda_built
          ? (cuda.empty() ? "built with CUDA, but no CUDA device is visible" : "")
          : "this ipj build has no CUDA support (configure with -DIPJ_WITH_CUDA=ON against a "
            "CUDA LibTorch)";
  report["mps"] = {{"available", false}, {"reason", "MPS is Apple-only; not available on Linux"}};
  report["native_precisions"] = {{"cpu", native_cpu_precisions(cpu)}, {"cuda", cuda_precisions}};
  report["devices"] = usable_devices(torch_info);
  return report;
}

std::string render_device_report(const Json& report) {
  std::ostringstream out;
  const Json& cpu = report["cpu"];
  out << "CPU      " << cpu["model"].get<std::string>() << ", " << cpu["cores"].get<int>() << " cores, "
      << cpu["logical_processors"].get<int>() << " threads, "
      << (cpu["memory_bytes"].get<std::uint64_t>() >> 20) << " MiB memory\n";
  out << "ISA     ";
  for (const auto& [name, present] : cpu["features"].items())
    out << ' ' << name << (present ? "+" : "-");
  out << '\n';
  if (const Json& cap = cpu["onednn_isa_cap"]; cap.is_object())
    out << "         oneDNN capped at " << cap["value"].get<std::string>() << " by "
        << cap["variable"].get<std::string>()
        << (cap["allows_bf16"].get<bool>() ? "" : ": no bf16 instructions for LibTorch's bf16 kernels")
        << (cap["allows_vnni"].get<bool>() ? "" : ", no VNNI for its int8 kernels (7-bit int8 weights)")
        << '\n';
  const Json& torch_json = report["torch"];
  out << "LibTorch " << torch_json["version"].get<std::string>()
      << "  oneDNN=" << (torch_json["onednn"].get<bool>() ? "yes" : "no")
      << "  OpenMP=" << (torch_json["openmp"].get<bool>() ? "yes" : "no")
      << "  MKL=" << (torch_json["mkl"].get<bool>() ? "yes" : "no") << "  quantized engines:";
  for (const auto& engine : torch_json["quantized_engines"])
    out << ' ' << engine.get<std::string>();
  out << "\nKernels  ATen " << torch_json["cpu_kernels"].get<std::string>()
      << (torch_json["cpu_kernels_set_by"].is_null()
              ? std::string(" (LibTorch's choice for this CPU") +
                    (torch_json["cpu_kernels_ignored_setting"].is_null()
                         ? std::string(")")
                         : "; " + torch_json["cpu_kernels_ignored_setting"].get<std::string>() +
                               " ignored: LibTorch reads avx2, avx512 or default, in lower case)")
              : " (" + torch_json["cpu_kernels_set_by"].get<std::string>() + ")");
  out << "\nThreads  ATen " << torch_json["intra_op_threads"].get<int>() << ", OpenBLAS "
      << torch_json["blas_threads"].get<int>() << '\n';
  const Json& blas = report["blas"];
  out << "BLAS     " << blas["library"].get<std::string>();
  if (!blas["kernels"].get<std::string>().empty())
    out << ", " << blas["kernels"].get<std::string>() << " kernels (" << blas["kernel_isa"].get<std::string>()
        << (blas["forced_by"].is_null() ? "" : ", forced by " + blas["forced_by"].get<std::string>()) << ")";
  out << '\n';
  if (!blas["advice"].get<std::string>().empty())
    out << "         note: " << blas["advice"].get<std::string>() << '\n';
  out << "CUDA    ";
  if (report["cuda"].empty()) out << " none (" << report["cuda_note"].get<std::string>() << ")";
  for (const auto& device : report["cuda"])
    out << " [" << device["index"].get<int>() << "] " << device["name"].get<std::string>() << " sm_"
        << device["compute_capability"].get<std::string>() << " "
        << (device["memory_bytes"].get<std::uint64_t>() >> 20)
        << " MiB bf16=" << (device["bf16"].get<bool>() ? "yes" : "no");
  out << "\nMPS      unavailable (" << report["mps"]["reason"].get<std::string>() << ")\n";
  out << "Native   cpu:";
  for (const auto& precision : report["native_precisions"]["cpu"])
    out << ' ' << precision.get<std::string>();
  out << '\n';
  if (report.contains("energy_meters")) {
    out << "Energy  ";
    for (const auto& meter : report["energy_meters"]) {
      out << "\n  " << meter["name"].get<std::string>() << ": "
          << (meter["available"].get<bool>() ? "available" : "missing");
      if (meter.contains("reason") && !meter["reason"].get<std::string>().empty())
        out << " (" << meter["reason"].get<std::string>() << ")";
    }
    out << '\n';
  }
  return out.str();
}

}  // namespace ipj::device
