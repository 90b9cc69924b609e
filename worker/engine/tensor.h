// A dense, row-major, move-only buffer with a shape, owned by a backend.
#ifndef TRAIND_WORKER_ENGINE_TENSOR_H_
#define TRAIND_WORKER_ENGINE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace traind::engine {

enum class DType { kF32, kS32 };

// Bytes per element (both types are 4 bytes wide).
inline constexpr size_t SizeOf(DType) { return 4; }

// Where a tensor's bytes live. Only kHost memory may be read or written
// through data() by the caller.
enum class MemorySpace { kHost, kDevice };

// A tensor of rank 1 or 2: [n] or [rows, cols]. Rank-1 tensors report
// rows() == 1. Allocated by Backend::Allocate and freed with the tensor;
// copying is deleted, so a copy of device memory is never accidental.
//
// Thread safety: a Tensor is not synchronized.
class Tensor {
 public:
  using Deleter = void (*)(void*);

  Tensor() = default;
  // Takes ownership of `data` (freed with `deleter`).
  Tensor(void* data, Deleter deleter, DType dtype, int64_t rows, int64_t cols, int rank,
         MemorySpace space)
      : data_(data, deleter), dtype_(dtype), rows_(rows), cols_(cols), rank_(rank), space_(space) {}

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  size_t bytes() const { return static_cast<size_t>(size()) * SizeOf(dtype_); }
  MemorySpace space() const { return space_; }
  bool empty() const { return data_ == nullptr; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  // Rows [first, first + count) of a rank-2 tensor: a tensor that shares
  // this one's memory and must not outlive it.
  // REQUIRES: 0 <= first, 0 <= count, first + count <= rows().
  Tensor Rows(int64_t first, int64_t count) {
    return Tensor(
        static_cast<char*>(data_.get()) + first * cols_ * static_cast<int64_t>(SizeOf(dtype_)),
        &NoDelete, dtype_, count, cols_, 2, space_);
  }

  // The same values as a [rows, cols] matrix: a tensor that shares this
  // one's memory and must not outlive it (writable, even from a const
  // tensor: the caller keeps to what its own contract allows).
  // REQUIRES: rows * cols == size().
  Tensor Reshaped(int64_t rows, int64_t cols) const {
    return Tensor(const_cast<void*>(data_.get()), &NoDelete, dtype_, rows, cols, 2, space_);
  }

  float* f32() { return static_cast<float*>(data_.get()); }
  const float* f32() const { return static_cast<const float*>(data_.get()); }
  int32_t* s32() { return static_cast<int32_t*>(data_.get()); }
  const int32_t* s32() const { return static_cast<const int32_t*>(data_.get()); }

 private:
  static void NoDelete(void*) {}

  std::unique_ptr<void, Deleter> data_{nullptr, &NoDelete};
  DType dtype_ = DType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int rank_ = 0;
  MemorySpace space_ = MemorySpace::kHost;
};

}  // namespace traind::engine

#endif  // TRAIND_WORKER_ENGINE_TENSOR_H_
