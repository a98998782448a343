#pragma once
// A tiny bitset over a small enum, for capability declarations.
#include <cstdint>
#include <initializer_list>

namespace attnkit {

template <class E>
class EnumSet {
 public:
  constexpr EnumSet() = default;
  constexpr EnumSet(std::initializer_list<E> items) {
    for (E e : items) bits_ |= bit(e);
  }
  constexpr bool contains(E e) const { return (bits_ & bit(e)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr EnumSet& insert(E e) {
    bits_ |= bit(e);
    return *this;
  }

 private:
  static constexpr std::uint64_t bit(E e) { return std::uint64_t{1} << static_cast<unsigned>(e); }
  std::uint64_t bits_ = 0;
};

}  // namespace attnkit
