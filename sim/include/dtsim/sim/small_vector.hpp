#pragma once
// A vector of trivially copyable elements that keeps its first N inline:
// a task's few dependencies without a heap allocation each (Note [Inline
// dependencies] in task_graph.hpp). Only what the task graph needs.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

namespace dtsim::sim {

template <typename T, std::uint32_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable elements");
  static_assert(N > 0, "SmallVector needs inline room");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;
  using size_type = std::size_t;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> xs) { assign(xs.begin(), xs.end()); }
  /// From a std::vector, as the builders that make the list may.
  SmallVector(const std::vector<T>& xs) { assign(xs.data(), xs.data() + xs.size()); }  // NOLINT: implicit on purpose
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  SmallVector(SmallVector&& o) noexcept { steal(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) {
      size_ = 0;
      assign(o.begin(), o.end());
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~SmallVector() { release(); }

  T* data() { return heap_ ? heap_.get() : inline_; }
  const T* data() const { return heap_ ? heap_.get() : inline_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  size_type size() const { return size_; }
  size_type capacity() const { return heap_ ? capacity_ : N; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_type i) { return data()[i]; }
  const T& operator[](size_type i) const { return data()[i]; }
  T& front() { return data()[0]; }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void clear() { size_ = 0; }
  void reserve(size_type n) {
    if (n <= capacity()) return;
    auto grown = std::make_unique<T[]>(n);
    std::memcpy(grown.get(), data(), size_ * sizeof(T));
    heap_ = std::move(grown);
    capacity_ = static_cast<std::uint32_t>(n);
  }
  void push_back(const T& x) {
    if (size_ == capacity()) {
      const T copy = x;  // x may be one of ours
      reserve(2 * capacity());
      data()[size_++] = copy;
      return;
    }
    data()[size_++] = x;
  }
  void pop_back() { --size_; }
  /// [first, last) removed, the rest moved down (as after std::remove_if).
  iterator erase(const_iterator first, const_iterator last) {
    const auto at = static_cast<size_type>(first - begin());
    const auto n = static_cast<size_type>(last - first);
    T* d = data();
    std::memmove(d + at, d + at + n, (size_ - at - n) * sizeof(T));
    size_ -= static_cast<std::uint32_t>(n);
    return d + at;
  }
  /// [first, last) inserted before `pos` (not from this vector).
  template <typename It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto at = static_cast<size_type>(pos - begin());
    const auto n = static_cast<size_type>(std::distance(first, last));
    if (size_ + n > capacity()) reserve(std::max<size_type>(size_ + n, 2 * capacity()));
    T* d = data();
    std::memmove(d + at + n, d + at, (size_ - at) * sizeof(T));
    std::copy(first, last, d + at);
    size_ += static_cast<std::uint32_t>(n);
    return d + at;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

 private:
  void assign(const T* first, const T* last) {
    const auto n = static_cast<size_type>(last - first);
    reserve(n);
    T* d = data();
    for (size_type i = 0; i < n; ++i) d[i] = first[i];  // a few: no call to memmove
    size_ = static_cast<std::uint32_t>(n);
  }
  void steal(SmallVector& o) {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = std::move(o.heap_);
      capacity_ = o.capacity_;
    } else {
      for (std::uint32_t i = 0; i < o.size_; ++i) inline_[i] = o.inline_[i];
    }
    o.size_ = 0;
    o.capacity_ = 0;
  }
  void release() {
    heap_.reset();
    capacity_ = 0;
    size_ = 0;
  }

  T inline_[N];
  std::unique_ptr<T[]> heap_;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = 0;  ///< of heap_, where it is used
};

}  // namespace dtsim::sim
