// Runs ONNX models in a Node.js child process with onnxruntime-node: input and output tensors travel as raw
// float32 files in a private temporary folder, the script's JSON answer (dims, timing) on its stdout.
#include "ipj/export/onnx_runtime.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"

extern char** environ;

namespace ipj::exporter {
namespace {

namespace fs = std::filesystem;

constexpr const char* kRunnerScript = R"JS(// ipj: runs one ONNX model on ONNX Runtime (onnxruntime-node).
const fs = require('fs');
const [, , packageDir, modelPath, inputPath, dimsJson, outputPath, timedRuns] = process.argv;
const ort = require(packageDir);
(async () => {
  const session = await ort.InferenceSession.create(modelPath);
  const bytes = new Uint8Array(fs.readFileSync(inputPath));  // a copy: offset 0, aligned for Float32Array
  const input = new ort.Tensor('float32', new Float32Array(bytes.buffer), JSON.parse(dimsJson));
  const feeds = {[session.inputNames[0]]: input};
  let result = await session.run(feeds);
  const runs = Number(timedRuns);
  const start = process.hrtime.bigint();
  for (let run = 0; run < runs; ++run) result = await session.run(feeds);
  const elapsedMs = Number(process.hrtime.bigint() - start) / 1e6;
  const output = result[session.outputNames[0]];
  fs.writeFileSync(outputPath, Buffer.from(output.data.buffer, output.data.byteOffset, output.data.byteLength));
  process.stdout.write(JSON.stringify({dims: output.dims, ms_per_run: runs > 0 ? elapsedMs / runs : 0}));
})().catch((error) => {
  process.stderr.write(String((error && error.stack) || error));
  process.exit(1);
});
)JS";

std::optional<std::string> find_in_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string paths = path == nullptr ? "/usr/bin:/bin" : path;
  std::size_t start = 0;
  while (start <= paths.size()) {
    const std::size_t end = std::min(paths.find(':', start), paths.size());
    const fs::path candidate = fs::path(paths.substr(start, end - start)) / program;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return std::nullopt;
}

// A package folder when `dir` is one, or holds one (node_modules/onnxruntime-node, onnxruntime-node).
std::optional<fs::path> package_in(const fs::path& dir) {
  for (const fs::path& candidate : {dir, dir / "onnxruntime-node", dir / "node_modules" / "onnxruntime-node"})
    if (fs::exists(candidate / "package.json") && fs::exists(candidate / "dist")) return candidate;
  return std::nullopt;
}

std::optional<fs::path> find_package() {
  if (const char* configured = std::getenv("IPJ_ONNXRUNTIME_NODE")) return package_in(configured);
  if (auto found = package_in(fs::current_path())) return found;
  std::error_code error;
  fs::path dir = fs::read_symlink("/proc/self/exe", error).parent_path();
  for (int level = 0; !error && level < 4 && !dir.empty(); ++level, dir = dir.parent_path())
    if (auto found = package_in(dir)) return found;
  return std::nullopt;
}

class TemporaryFolder {
 public:
  TemporaryFolder() {
    std::error_code error;
    const fs::path parent = fs::temp_directory_path(error);  // $TMPDIR, else /tmp
    if (error) {
      const char* tmpdir = std::getenv("TMPDIR");
      fail(ErrorCategory::io, "no folder for ONNX Runtime's temporary files: TMPDIR='" +
                                  std::string(tmpdir != nullptr ? tmpdir : "") + "' (" + error.message() +
                                  "); point TMPDIR at an existing writable folder, or unset it");
    }
    std::string pattern = (parent / "ipj-onnxruntime-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      fail(ErrorCategory::io, "cannot create a temporary folder under " + parent.string() + " (" +
                                  std::strerror(errno) + "); point TMPDIR at a writable folder");
    path_ = pattern;
  }
  ~TemporaryFolder() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Runs argv with stdout and stderr sent to files; returns the exit status (128 + N when killed by N).
int run_process(const std::vector<std::string>& argv, const fs::path& stdout_path,
                const fs::path& stderr_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) fail(ErrorCategory::runtime, "cannot start '" + argv[0] + "'");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::optional<OnnxRuntimeNode> find_onnxruntime_node(std::string& reason) {
  const std::optional<std::string> node = find_in_path("node");
  const std::optional<fs::path> package = find_package();
  const std::string install = "npm install --ignore-scripts onnxruntime-node@1.30.0";
  if (!node) {
    reason = "Node.js ('node') is not on PATH; install Node.js, then `" + install + "`";
    return std::nullopt;
  }
  if (!package) {
    reason =
        "the npm package onnxruntime-node was not found ($IPJ_ONNXRUNTIME_NODE, ./node_modules, or next to "
        "ipj); run `" +
        install + "` (scripts/install-onnxruntime.sh)";
    return std::nullopt;
  }
  OnnxRuntimeNode runtime;
  runtime.node_binary = *node;
  runtime.package_dir = package->string();
  try {
    runtime.version = Json::parse(read_file((*package / "package.json").string())).value("version", "");
  } catch (const Json::exception&) {
    runtime.version = "unknown";
  }
  return runtime;
}

OnnxRuntimeRun run_onnxruntime(const OnnxRuntimeNode& runtime, const std::string& model_path,
                               const torch::Tensor& input, int timed_runs) {
  TemporaryFolder folder;
  const torch::Tensor data = input.detach().to(torch::kFloat).contiguous();  // [B, ...]
  write_file_atomically((folder / "runner.js").string(), kRunnerScript);
  write_file_atomically((folder / "input.bin").string(),
                        std::string(static_cast<const char*>(data.data_ptr()), data.numel() * sizeof(float)));
  const Json dims = data.sizes().vec();
  const std::vector<std::string> argv{runtime.node_binary,
                                      (folder / "runner.js").string(),
                                      runtime.package_dir,
                                      fs::absolute(model_path).string(),
                                      (folder / "input.bin").string(),
                                      dims.dump(),
                                      (folder / "output.bin").string(),
                                      std::to_string(timed_runs)};
  const int status = run_process(argv, folder / "stdout.json", folder / "stderr.txt");
  if (status != 0)
    fail(ErrorCategory::runtime, "ONNX Runtime (onnxruntime-node " + runtime.version + ") failed on '" +
                                     model_path +
                                     "': " + read_file((folder / "stderr.txt").string()).substr(0, 2000));
  const Json answer = Json::parse(read_file((folder / "stdout.json").string()));
  const std::vector<std::int64_t> output_dims = answer.at("dims").get<std::vector<std::int64_t>>();
  const std::string bytes = read_file((folder / "output.bin").string());
  torch::Tensor output = torch::empty(output_dims, torch::kFloat);
  if (static_cast<std::size_t>(output.numel()) * sizeof(float) != bytes.size())
    fail(ErrorCategory::runtime, "ONNX Runtime returned " + std::to_string(bytes.size()) +
                                     " bytes for an output of shape " + answer.at("dims").dump());
  std::memcpy(output.data_ptr(), bytes.data(), bytes.size());
  return {output, answer.value("ms_per_run", 0.0)};
}

}  // namespace ipj::exporter
