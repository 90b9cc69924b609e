// The ONNX export's building blocks (onnx_export.cc): a graph under
// construction, and the trained model's state tensors checked against the
// shapes the network gives them. Internal to the export.
#ifndef TRAIND_WORKER_ENGINE_ONNX_GRAPH_H_
#define TRAIND_WORKER_ENGINE_ONNX_GRAPH_H_

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "onnx/onnx_pb.h"
#include "worker/engine/model_file.h"

namespace traind::engine::onnx_internal {

// The graph under construction. Every node has one output, named as the
// node; internal names contain a "/" ("preprocess/Concat", "layers[2]/Gemm")
// and initializers are named by the state tensor ("layers[0].weight") or
// "const/...". Every name used is recorded, so an input named as one of them
// is reported instead of silently aliasing it.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* graph) : graph_(graph) {}

  onnx::NodeProto* Node(const std::string& op, const std::string& name,
                        std::vector<std::string> inputs, const char* domain = "") {
    onnx::NodeProto* node = graph_->add_node();
    node->set_op_type(op);
    node->set_name(name);
    if (domain[0] != '\0') node->set_domain(domain);
    for (std::string& in : inputs) node->add_input(std::move(in));
    node->add_output(name);
    names_.insert(name);
    return node;
  }

  static void Attr(onnx::NodeProto* node, const std::string& name, int64_t value) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void Attr(onnx::NodeProto* node, const std::string& name, float value) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }
  static void Attr(onnx::NodeProto* node, const std::string& name,
                   const std::vector<int64_t>& values) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (const int64_t v : values) a->add_ints(v);
  }
  static void Attr(onnx::NodeProto* node, const std::string& name,
                   const std::vector<std::string>& values) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const std::string& v : values) a->add_strings(v);
  }
  static void Attr(onnx::NodeProto* node, const std::string& name, const std::string& value) {
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(value);
  }

  // An initializer of floats (dims {} for a scalar).
  std::string Floats(const std::string& name, const std::vector<int64_t>& dims,
                     const std::vector<float>& values, const std::string& doc = "") {
    onnx::TensorProto* t = NewInitializer(name, dims, onnx::TensorProto::FLOAT, doc);
    for (const float v : values) t->add_float_data(v);
    return name;
  }
  std::string Doubles(const std::string& name, const std::vector<int64_t>& dims,
                      const std::vector<double>& values, const std::string& doc = "") {
    onnx::TensorProto* t = NewInitializer(name, dims, onnx::TensorProto::DOUBLE, doc);
    for (const double v : values) t->add_double_data(v);
    return name;
  }
  std::string Int64s(const std::string& name, const std::vector<int64_t>& dims,
                     const std::vector<int64_t>& values) {
    onnx::TensorProto* t = NewInitializer(name, dims, onnx::TensorProto::INT64, "");
    for (const int64_t v : values) t->add_int64_data(v);
    return name;
  }
  // A float scalar shared by every node that needs it ("const/0.5").
  std::string Scalar(float value) {
    const std::string name = absl::StrFormat("const/%.9g", value);
    if (names_.count(name) == 0) Floats(name, {}, {value});
    return name;
  }

  const std::set<std::string>& names() const { return names_; }

 private:
  onnx::TensorProto* NewInitializer(const std::string& name, const std::vector<int64_t>& dims,
                                    int32_t type, const std::string& doc) {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    for (const int64_t d : dims) t->add_dims(d);
    if (!doc.empty()) t->set_doc_string(doc);
    names_.insert(name);
    return t;
  }

  onnx::GraphProto* graph_;
  std::set<std::string> names_;
};

// The model's state tensors by name, each checked against the shape the
// network gives it.
class StateTensors {
 public:
  explicit StateTensors(const TrainedModel& model) : model_(model) {}

  absl::StatusOr<const TrainedModel::NamedTensor*> Get(const std::string& name,
                                                       const std::vector<int64_t>& shape) const {
    for (const TrainedModel::NamedTensor& t : model_.state) {
      if (t.name != name) continue;
      int64_t size = 1;
      for (const int64_t d : shape) size *= d;
      if (t.shape != shape || static_cast<int64_t>(t.values.size()) != size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "onnx export: state tensor %s has shape [%s] and %d values; the network needs [%s]",
            name, absl::StrJoin(t.shape, ", "), t.values.size(), absl::StrJoin(shape, ", ")));
      }
      return &t;
    }
    return absl::InvalidArgumentError(
        absl::StrFormat("onnx export: the model has no state tensor %s", name));
  }

  // An initializer holding the state tensor `name` of `shape`.
  absl::StatusOr<std::string> Initializer(GraphBuilder& b, const std::string& name,
                                          const std::vector<int64_t>& shape,
                                          const std::string& doc) const {
    TRAIND_ASSIGN_OR_RETURN(const TrainedModel::NamedTensor* t, Get(name, shape));
    return b.Floats(name, shape, t->values, doc);
  }
  // The same values under other dimensions (a convolution's [F, (C/G)·kh·kw]
  // weights as ONNX's [F, C/G, kh, kw]).
  absl::StatusOr<std::string> Initializer(GraphBuilder& b, const std::string& name,
                                          const std::vector<int64_t>& shape,
                                          const std::vector<int64_t>& dims,
                                          const std::string& doc) const {
    TRAIND_ASSIGN_OR_RETURN(const TrainedModel::NamedTensor* t, Get(name, shape));
    return b.Floats(name, dims, t->values, doc);
  }

 private:
  const TrainedModel& model_;
};

}  // namespace traind::engine::onnx_internal

#endif  // TRAIND_WORKER_ENGINE_ONNX_GRAPH_H_
