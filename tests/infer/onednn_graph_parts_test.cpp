// The oneDNN runtime's private pieces (src/infer/onednn_graph_parts.hpp) that no model on this machine's
// oneDNN reaches: the reference-kernel guard, on a convolution oneDNN 2.x has only its reference kernel for.
// Built where the tests link Debian's libdnnl (IPJ_WITH_ONEDNN); else one skipped test says so.
#include <gtest/gtest.h>

#include <string>

#include "ipj/core/error.hpp"

#ifdef IPJ_WITH_ONEDNN
#include "infer/onednn_graph_parts.hpp"
#endif

namespace ipj::infer {
namespace {

#ifdef IPJ_WITH_ONEDNN
namespace parts = onednn_graph;  // not a using-directive: the unity build shares this namespace
using dnnl::memory;
using Tag = memory::format_tag;

// A 3x3 convolution of a plain NCHW image, 1 -> 8 channels, into the given output layout.
dnnl::convolution_forward::primitive_desc image_convolution(const dnnl::engine& engine, Tag output) {
  const memory::dims source{1, 1, 28, 28}, weights{8, 1, 3, 3}, destination{1, 8, 26, 26};
  const dnnl::convolution_forward::desc description(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      memory::desc(source, parts::kFloat, Tag::nchw), parts::any(weights),
      memory::desc(destination, parts::kFloat, output), {1, 1}, {0, 0}, {0, 0});
  return dnnl::convolution_forward::primitive_desc(description, parts::runtime_attributes(), engine);
}

// oneDNN 2.6 has no optimised kernel writing NHWC from an NCHW input (measured 100-200x slower: the guard's
// reason); the runtime would refuse such a node by name, and takes the same convolution in a layout of
// oneDNN's choice.
TEST(OnednnGraphParts, ReferenceKernelsAreRefusedByNodeAndKernelName) {
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  quant::GraphNode node;
  node.kind = quant::NodeKind::conv2d;
  node.name = "stem.conv";
  const auto reference = image_convolution(engine, Tag::nhwc);
  const std::string kernel = reference.impl_info_str();
  if (kernel.rfind("ref", 0) != 0) GTEST_SKIP() << "this oneDNN has an optimised kernel for it: " << kernel;
  EXPECT_TRUE(parts::reference_kernel(reference));
  try {
    parts::check_kernel(node, reference);
    ADD_FAILURE() << "a reference kernel was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what())
                  .find("node 'stem.conv' (conv2d): oneDNN has only its reference kernel (" + kernel + ")"),
              std::string::npos)
        << error.what();
  }
  const auto chosen = image_convolution(engine, Tag::any);
  EXPECT_FALSE(parts::reference_kernel(chosen)) << chosen.impl_info_str();
  EXPECT_NO_THROW(parts::check_kernel(node, chosen));
}
#else
TEST(OnednnGraphParts, ReferenceKernelsAreRefusedByNodeAndKernelName) {
  GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
}
#endif

}  // namespace
}  // namespace ipj::infer
