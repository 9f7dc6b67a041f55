// The choices of a training run (precision, optimizer, schedule, ...) as enums. They are parsed once where
// text enters (CLI flags, JSON files: core/choice.hpp's parse_choice, with the spellings below, which are
// also what results and checkpoint files hold) and compared as enums everywhere else. LibTorch-free.
#pragma once

#include <array>
#include <string>
#include <utility>

#include "ipj/core/choice.hpp"
#include "ipj/device/allocator.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::train {

enum class Precision { fp32, bf16, fp16, automatic };   // --precision; automatic: "auto"
enum class OptimizerKind { sgd, adamw };                // --optimizer
enum class ScheduleKind { none, step, cosine };         // --schedule
enum class LossScaling { none, dynamic, automatic };    // --loss-scale; automatic: dynamic for fp16
enum class MemoryFormat { contiguous, channels_last };  // --memory-format
// --optimizer-impl; fused: the linear-chain step where it applies, else autograd + CapturableSgd
enum class OptimizerImpl { fused, autograd, torch };
enum class CompileMode { none, jit, graphs };  // --compile
using device::AllocatorChoice;                 // --allocator
using device::ThreadPlanChoice;                // --thread-plan

// --device: the CPU or a CUDA device ("cpu", "cuda", "cuda:N").
struct DeviceSpec {
  bool cuda = false;
  int index = -1;  // CUDA: -1 = the current device ("cuda")
  bool operator==(const DeviceSpec& other) const { return cuda == other.cuda && index == other.index; }
};
// Throws ipj::Error(usage) "<setting> must be cpu, cuda or cuda:N, got '<text>'".
DeviceSpec parse_device(const std::string& text, const std::string& setting);
std::string device_name(const DeviceSpec& device);  // what torch::Device takes

}  // namespace ipj::train

namespace ipj {

template <>
struct ChoiceNames<train::Precision> {
  static constexpr std::array<std::pair<train::Precision, const char*>, 4> names{
      {{train::Precision::fp32, "fp32"},
       {train::Precision::bf16, "bf16"},
       {train::Precision::fp16, "fp16"},
       {train::Precision::automatic, "auto"}}};
};
template <>
struct ChoiceNames<train::OptimizerKind> {
  static constexpr std::array<std::pair<train::OptimizerKind, const char*>, 2> names{
      {{train::OptimizerKind::sgd, "sgd"}, {train::OptimizerKind::adamw, "adamw"}}};
};
template <>
struct ChoiceNames<train::ScheduleKind> {
  static constexpr std::array<std::pair<train::ScheduleKind, const char*>, 3> names{
      {{train::ScheduleKind::none, "none"},
       {train::ScheduleKind::step, "step"},
       {train::ScheduleKind::cosine, "cosine"}}};
};
template <>
struct ChoiceNames<train::LossScaling> {
  static constexpr std::array<std::pair<train::LossScaling, const char*>, 3> names{
      {{train::LossScaling::none, "none"},
       {train::LossScaling::dynamic, "dynamic"},
       {train::LossScaling::automatic, "auto"}}};
};
template <>
struct ChoiceNames<train::MemoryFormat> {
  static constexpr std::array<std::pair<train::MemoryFormat, const char*>, 2> names{
      {{train::MemoryFormat::contiguous, "contiguous"},
       {train::MemoryFormat::channels_last, "channels_last"}}};
};
template <>
struct ChoiceNames<train::OptimizerImpl> {
  static constexpr std::array<std::pair<train::OptimizerImpl, const char*>, 3> names{
      {{train::OptimizerImpl::fused, "fused"},
       {train::OptimizerImpl::autograd, "autograd"},
       {train::OptimizerImpl::torch, "torch"}}};
};
template <>
struct ChoiceNames<train::CompileMode> {
  static constexpr std::array<std::pair<train::CompileMode, const char*>, 3> names{
      {{train::CompileMode::none, "none"},
       {train::CompileMode::jit, "jit"},
       {train::CompileMode::graphs, "graphs"}}};
};

}  // namespace ipj
